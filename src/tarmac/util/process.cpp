#include "tarmac/util/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <string_view>
#include <thread>

#include "tarmac/util/clock.hpp"

extern char** environ;

// The code the child runs between clone and exec shares this process's memory on a stack of its
// own. AddressSanitizer would poison that stack's shadow for frames that never return (the child
// ends in execve or _exit), leaving false reports for whatever reuses the addresses: it stays out.
#define TARMAC_CHILD_CODE __attribute__((no_sanitize("address")))

namespace tarmac::util {

namespace {

// A step of the child's setup; the one that fails is reported to the parent with its errno.
enum class Step : int { KeepReport, Descriptor, CloseFds, Session, Terminal, Groups, Gid, Uid, Chdir, Signals, Exec };

struct Report {
  Step step = Step::Exec;
  int err = 0;
  int fd = -1;  // the child's descriptor for Step::Descriptor
};

// Everything the child needs, built by the parent before clone: the child only reads it (and its
// scratch `copies`), and makes no allocation.
struct Plan {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const ChildFd* fds = nullptr;  // sources resolved (no kDevNull)
  int* copies = nullptr;         // one per fd: scratch for the child
  std::size_t fd_count = 0;
  const int* targets = nullptr;  // the child descriptors, sorted
  int floor = 0;                 // above every target: where copies and the report pipe go first
  int report_fd = -1;
  long open_max = 1024;          // how far to close by hand on a kernel without close_range
  OtherFds other_fds = OtherFds::Close;
  Session session = Session::Inherit;
  bool take_terminal = false;
  const Identity* user = nullptr;
  const char* cwd = nullptr;
  sigset_t mask{};
  Dispositions dispositions = Dispositions::Default;
};

// A 64 KiB stack is ample: the child calls thin system-call wrappers only (sigaction's is the
// largest frame). The lowest page is a guard.
constexpr std::size_t kChildStackBytes = 64 * 1024;

// Raw system calls for the identity: glibc's setgroups/setresgid/setresuid change every thread of
// the process by signalling them, and the child shares the parent's threads' bookkeeping; the
// kernel's calls change only the calling task, which in the child is the whole process.
#if defined(SYS_setgroups32)
constexpr long kSysSetgroups = SYS_setgroups32;
constexpr long kSysSetresgid = SYS_setresgid32;
constexpr long kSysSetresuid = SYS_setresuid32;
#else
constexpr long kSysSetgroups = SYS_setgroups;
constexpr long kSysSetresgid = SYS_setresgid;
constexpr long kSysSetresuid = SYS_setresuid;
#endif

[[noreturn]] TARMAC_CHILD_CODE void child_fails(const Plan& plan, Step step, int fd = -1) {
  const Report report{.step = step, .err = errno, .fd = fd};
  // Smaller than PIPE_BUF, so written whole or not at all; nothing more can be done if not.
  (void)!::write(plan.report_fd, &report, sizeof report);
  ::_exit(127);
}

// Closes descriptors first..last (last may be ~0U).
TARMAC_CHILD_CODE bool close_between(unsigned first, unsigned last, long open_max) {
  if (first > last) return true;
  if (::close_range(first, last, 0) == 0) return true;
  if (errno != ENOSYS) return false;
  for (unsigned fd = first; fd <= last && fd < static_cast<unsigned long>(open_max); ++fd) ::close(static_cast<int>(fd));
  return true;
}

// Gives each target its descriptor. Copies above every target first, so that a source that is
// also another mapping's target (1 -> 2 and 2 -> 1) is read before it is replaced, and so that
// dup2 never sees source == target (which would leave FD_CLOEXEC set).
TARMAC_CHILD_CODE void place_descriptors(Plan& plan) {
  for (std::size_t i = 0; i < plan.fd_count; ++i) {
    plan.copies[i] = ::fcntl(plan.fds[i].parent, F_DUPFD_CLOEXEC, plan.floor);
    if (plan.copies[i] < 0) child_fails(plan, Step::Descriptor, plan.fds[i].child);
  }
  for (std::size_t i = 0; i < plan.fd_count; ++i) {
    if (::dup2(plan.copies[i], plan.fds[i].child) < 0) child_fails(plan, Step::Descriptor, plan.fds[i].child);
  }
  if (plan.other_fds == OtherFds::KeepInherited) {
    for (std::size_t i = 0; i < plan.fd_count; ++i) ::close(plan.copies[i]);
    return;
  }
  // Everything but the targets and the report pipe (which closes itself at exec).
  unsigned next = 0;
  for (std::size_t i = 0; i < plan.fd_count; ++i) {
    const auto target = static_cast<unsigned>(plan.targets[i]);
    if (target > next && !close_between(next, target - 1, plan.open_max)) child_fails(plan, Step::CloseFds);
    next = target + 1;
  }
  const auto report = static_cast<unsigned>(plan.report_fd);
  if ((report > next && !close_between(next, report - 1, plan.open_max)) ||
      !close_between(report + 1, ~0U, plan.open_max)) {
    child_fails(plan, Step::CloseFds);
  }
}

// Caught signals back to the default before any is unblocked: a handler of the parent's would
// otherwise run in the child, on memory the two share. With Dispositions::Default, ignored ones too.
TARMAC_CHILD_CODE void reset_dispositions(const Plan& plan) {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) != 0) continue;  // EINVAL: glibc's own signals
    if (current.sa_handler == SIG_DFL) continue;
    if (current.sa_handler == SIG_IGN && plan.dispositions == Dispositions::KeepIgnored) continue;
    struct sigaction to_default {};
    to_default.sa_handler = SIG_DFL;
    if (::sigaction(sig, &to_default, nullptr) != 0) child_fails(plan, Step::Signals);
  }
}

// The child: every step checked, each failure reported with its errno. Every signal is blocked
// here (the parent blocked them around clone) until the last step before exec.
TARMAC_CHILD_CODE int child_main(void* arg) {
  Plan& plan = *static_cast<Plan*>(arg);
  // The report pipe above every target first, so that no target replaces it.
  const int report = ::fcntl(plan.report_fd, F_DUPFD_CLOEXEC, plan.floor);
  if (report < 0) child_fails(plan, Step::KeepReport);
  plan.report_fd = report;
  place_descriptors(plan);
  if (plan.session == Session::NewSession && ::setsid() < 0) child_fails(plan, Step::Session);
  if (plan.session == Session::NewGroup && ::setpgid(0, 0) != 0) child_fails(plan, Step::Session);
  // SIGTTOU is blocked, so a background group may take the terminal.
  if (plan.take_terminal && ::tcsetpgrp(STDIN_FILENO, ::getpid()) != 0) child_fails(plan, Step::Terminal);
  if (plan.user != nullptr) {
    const Identity& user = *plan.user;
    if (::syscall(kSysSetgroups, user.groups.size(), user.groups.data()) != 0) child_fails(plan, Step::Groups);
    if (::syscall(kSysSetresgid, user.gid, user.gid, user.gid) != 0) child_fails(plan, Step::Gid);
    if (::syscall(kSysSetresuid, user.uid, user.uid, user.uid) != 0) child_fails(plan, Step::Uid);
  }
  // As the user: a directory the user may not enter is refused here, not entered as root.
  if (plan.cwd != nullptr && ::chdir(plan.cwd) != 0) child_fails(plan, Step::Chdir);
  reset_dispositions(plan);
  if (::sigprocmask(SIG_SETMASK, &plan.mask, nullptr) != 0) child_fails(plan, Step::Signals);
  ::execve(plan.path, plan.argv, plan.envp);
  child_fails(plan, Step::Exec);
}

std::string step_text(const Report& report, const Plan& plan) {
  switch (report.step) {
    case Step::KeepReport: return "keep the report pipe";
    case Step::Descriptor: return fmt::format("descriptor {}", report.fd);
    case Step::CloseFds: return "close the other descriptors";
    case Step::Session: return plan.session == Session::NewSession ? "new session" : "new process group";
    case Step::Terminal: return "take the terminal";
    case Step::Groups: return "set supplementary groups";
    case Step::Gid: return fmt::format("become gid {}", plan.user != nullptr ? plan.user->gid : 0);
    case Step::Uid: return fmt::format("become uid {}", plan.user != nullptr ? plan.user->uid : 0);
    case Step::Chdir: return fmt::format("enter {}", plan.cwd != nullptr ? plan.cwd : "");
    case Step::Signals: return "reset signals";
    case Step::Exec: return "exec";
  }
  return "setup";
}

Error run_error(const std::string& path, std::string_view what, int err) {
  return make_error(err == ENOENT ? Error::Code::NotFound : Error::Code::Io,
                    fmt::format("cannot run {}: {}: {}", path, what, std::strerror(err)));
}

bool holds_nul(std::string_view text) { return text.find('\0') != std::string_view::npos; }

// A spec that cannot be run as given: refused before anything is created.
Result<void> check_spec(const ProcessSpec& spec) {
  const auto invalid = [&spec](std::string_view why) {
    return make_error(Error::Code::Invalid, fmt::format("cannot run {}: {}", spec.path, why));
  };
  if (spec.path.empty()) return make_error(Error::Code::Invalid, "cannot run a program without a path");
  if (spec.argv.empty()) return invalid("no arguments (argv[0] is required)");
  if (holds_nul(spec.path) || holds_nul(spec.cwd)) return invalid("its path or directory holds a NUL byte");
  if (std::any_of(spec.argv.begin(), spec.argv.end(), holds_nul)) return invalid("an argument holds a NUL byte");
  if (std::any_of(spec.env.begin(), spec.env.end(), holds_nul)) return invalid("an environment entry holds a NUL byte");
  if (spec.take_terminal && spec.session != Session::NewGroup) return invalid("only a new process group takes the terminal");
  std::vector<int> targets;
  for (const auto& fd : spec.fds) {
    if (fd.child < 0 || (fd.parent < 0 && fd.parent != kDevNull)) return invalid("a descriptor below 0");
    targets.push_back(fd.child);
  }
  std::sort(targets.begin(), targets.end());
  if (std::adjacent_find(targets.begin(), targets.end()) != targets.end()) return invalid("a descriptor given twice");
  return {};
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));  // execve does not write them
  out.push_back(nullptr);
  return out;
}

// The child's stack, unmapped on every path.
class Stack {
 public:
  Stack() = default;
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  ~Stack() {
    if (base_ != MAP_FAILED) ::munmap(base_, kChildStackBytes);
  }
  [[nodiscard]] bool map() {
    base_ = ::mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    return base_ != MAP_FAILED && ::mprotect(base_, static_cast<std::size_t>(::getpagesize()), PROT_NONE) == 0;
  }
  [[nodiscard]] void* top() const { return static_cast<char*>(base_) + kChildStackBytes; }

 private:
  void* base_ = MAP_FAILED;
};

// Blocks every signal in this thread for its lifetime: no handler of ours may run in the child
// before it has reset them, and the child starts with all blocked.
class AllSignalsBlocked {
 public:
  AllSignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    error_ = ::pthread_sigmask(SIG_SETMASK, &all, &old_);
  }
  AllSignalsBlocked(const AllSignalsBlocked&) = delete;
  AllSignalsBlocked& operator=(const AllSignalsBlocked&) = delete;
  ~AllSignalsBlocked() {
    if (error_ == 0) (void)::pthread_sigmask(SIG_SETMASK, &old_, nullptr);  // only fails on a bad `how`
  }
  [[nodiscard]] int error() const { return error_; }

 private:
  sigset_t old_{};
  int error_ = 0;
};

// Reaps a child whose setup failed (it has exited: clone with CLONE_VFORK returns after that).
void reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

Result<Child> start_process(const ProcessSpec& spec) {
  TARMAC_TRY(check_spec(spec));
  Fd dev_null;
  std::vector<ChildFd> fds = spec.fds;
  for (auto& fd : fds) {
    if (fd.parent != kDevNull) continue;
    if (!dev_null) {
      dev_null.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
      if (!dev_null) return run_error(spec.path, "open /dev/null", errno);
    }
    fd.parent = dev_null.get();
  }
  std::vector<int> targets;
  for (const auto& fd : fds) targets.push_back(fd.child);
  std::sort(targets.begin(), targets.end());
  std::vector<int> copies(fds.size(), -1);
  const auto argv = c_strings(spec.argv);
  const auto envp = c_strings(spec.env);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return run_error(spec.path, "report pipe", errno);
  Fd report_read(pipe_fds[0]);
  Fd report_write(pipe_fds[1]);
  Stack stack;
  if (!stack.map()) return run_error(spec.path, "child stack", errno);

  Plan plan;
  plan.path = spec.path.c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.fds = fds.data();
  plan.copies = copies.data();
  plan.fd_count = fds.size();
  plan.targets = targets.data();
  plan.floor = targets.empty() ? 0 : targets.back() + 1;
  plan.report_fd = report_write.get();
  plan.open_max = std::max(::sysconf(_SC_OPEN_MAX), 1024L);
  plan.other_fds = spec.other_fds;
  plan.session = spec.session;
  plan.take_terminal = spec.take_terminal;
  plan.user = spec.user ? &*spec.user : nullptr;
  plan.cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
  if (spec.signal_mask) plan.mask = *spec.signal_mask;
  else sigemptyset(&plan.mask);
  plan.dispositions = spec.dispositions;

  int pidfd = -1;  // stays -1 on a kernel without CLONE_PIDFD (before 5.2), which ignores the flag
  pid_t pid = -1;
  int clone_errno = 0;
  {
    const AllSignalsBlocked blocked;
    if (blocked.error() != 0) return run_error(spec.path, "block signals", blocked.error());
    // CLONE_VFORK: this thread resumes once the child has exec'd or exited, so the stack and the
    // plan stay valid for as long as it uses them.
    pid = ::clone(child_main, stack.top(), CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &plan, &pidfd, nullptr,
                  nullptr);
    clone_errno = errno;
  }
  if (pid < 0) return run_error(spec.path, "clone", clone_errno);
  Child child{.pid = pid, .pidfd = Fd(pidfd)};
  report_write.reset();  // the child's copies closed at exec: end of file means it is running

  Report report;
  ssize_t n = 0;
  while ((n = ::read(report_read.get(), &report, sizeof report)) < 0 && errno == EINTR) {
  }
  if (n == 0) return child;
  const int read_errno = errno;
  reap(pid);
  if (n != static_cast<ssize_t>(sizeof report)) {
    return n < 0 ? run_error(spec.path, "read the child's report", read_errno)
                 : make_error(Error::Code::Io, fmt::format("cannot run {}: a short report from the child", spec.path));
  }
  return run_error(spec.path, step_text(report, plan), report.err);
}

Result<std::optional<int>> wait_for(const Child& child, long long timeout_ms) {
  const long long deadline = monotonic_ms() + std::max(0LL, timeout_ms);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(child.pid, &status, WNOHANG);
    if (r == child.pid) return std::optional<int>(status);
    if (r < 0 && errno != EINTR) {
      return make_error(Error::Code::Io, fmt::format("cannot wait for process {}: {}", child.pid, std::strerror(errno)));
    }
    const long long left = deadline - monotonic_ms();
    if (left <= 0) return std::optional<int>();
    if (child.pidfd) {
      pollfd p{child.pidfd.get(), POLLIN, 0};  // readable once the process has ended
      if (::poll(&p, 1, static_cast<int>(std::min(left, 60'000LL))) < 0 && errno != EINTR) {
        return make_error(Error::Code::Io, fmt::format("cannot wait for process {}: {}", child.pid, std::strerror(errno)));
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(left, 10LL)));
    }
  }
}

namespace {

Error signal_failure(pid_t pid, int err) {
  const std::string who = pid > 0 ? fmt::format("process {}", pid) : std::string("the process");
  return make_error(err == ESRCH ? Error::Code::NotFound : Error::Code::Io,
                    fmt::format("cannot signal {}: {}", who, std::strerror(err)));
}

}  // namespace

Result<std::optional<int>> run_captured(ProcessSpec spec, long long timeout_ms, std::string& output,
                                        const std::atomic<bool>* abandon) {
  constexpr std::size_t kMaxOutput = 64 * 1024;
  int pipe_fds[2] = {-1, -1};
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return make_error(Error::Code::Io, fmt::format("pipe: {}", std::strerror(errno)));
  Fd read_end(pipe_fds[0]);
  Fd write_end(pipe_fds[1]);
  std::erase_if(spec.fds, [](const ChildFd& f) { return f.child == 1 || f.child == 2; });
  spec.fds.push_back({1, write_end.get()});
  spec.fds.push_back({2, write_end.get()});
  TARMAC_TRY_ASSIGN(Child child, start_process(spec));
  write_end.reset();
  const long long deadline = monotonic_ms() + timeout_ms;
  bool killed = false;
  for (;;) {
    const long long left = deadline - monotonic_ms();
    if (left <= 0 || (abandon != nullptr && abandon->load())) {
      (void)send_signal(child, SIGKILL);
      killed = true;
      break;
    }
    pollfd p{read_end.get(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min(left, 200LL))) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(read_end.get(), buf, sizeof buf);
    if (n <= 0) break;  // the end: it closed its output (or exited)
    if (output.size() < kMaxOutput) {
      output.append(buf, std::min(static_cast<std::size_t>(n), kMaxOutput - output.size()));
    }
  }
  auto status = wait_for(child, killed ? 5000 : std::max(0LL, deadline - monotonic_ms()));
  if (!killed && status.ok() && !status->has_value()) {  // closed its output, runs on past the deadline
    (void)send_signal(child, SIGKILL);
    (void)wait_for(child, 5000);
    return std::optional<int>();
  }
  if (killed) return std::optional<int>();
  if (!status.ok()) return status.take_error();
  return *status;
}

Result<Fd> open_pidfd(pid_t pid) {
  if (pid < 2) return make_error(Error::Code::Invalid, fmt::format("refusing to open a pidfd for pid {}", pid));
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) {
    const int err = errno;
    return make_error(err == ESRCH ? Error::Code::NotFound : Error::Code::Io,
                      fmt::format("cannot open a pidfd for process {}: {}", pid, std::strerror(err)));
  }
  return Fd(static_cast<int>(fd));
}

Result<void> signal_pidfd(const Fd& pidfd, int sig) {
  if (!pidfd) return make_error(Error::Code::Invalid, "no pidfd to signal");
  if (::syscall(SYS_pidfd_send_signal, pidfd.get(), sig, nullptr, 0) == 0) return {};
  return signal_failure(-1, errno);
}

bool pidfd_ended(const Fd& pidfd, long long timeout_ms) {
  const long long deadline = monotonic_ms() + std::max(0LL, timeout_ms);
  for (;;) {
    pollfd p{pidfd.get(), POLLIN, 0};  // readable once the process has ended
    const long long left = std::max(0LL, deadline - monotonic_ms());
    const int r = ::poll(&p, 1, static_cast<int>(std::min(left, 60'000LL)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
    if (monotonic_ms() >= deadline) return false;
  }
}

Result<void> send_signal(const Child& child, int sig) {
  if (child.pidfd) {
    if (::syscall(SYS_pidfd_send_signal, child.pidfd.get(), sig, nullptr, 0) == 0) return {};
    if (errno != ENOSYS) return signal_failure(child.pid, errno);
  }
  if (child.pid < 2) return make_error(Error::Code::Invalid, fmt::format("refusing to signal pid {}", child.pid));
  if (::kill(child.pid, sig) != 0) return signal_failure(child.pid, errno);
  return {};
}

std::optional<std::string> resolve_command(const std::string& name, const std::string& path) {
  const auto runnable = [](const std::string& file) {
    struct stat st {};
    return ::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(file.c_str(), X_OK) == 0;
  };
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) return runnable(name) ? std::optional<std::string>(name) : std::nullopt;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string dir = path.substr(start, end - start);
    const std::string file = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (runnable(file)) return file;
    start = end + 1;
  }
  return std::nullopt;
}

std::vector<std::string> own_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace tarmac::util
