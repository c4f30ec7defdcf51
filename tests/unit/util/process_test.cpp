#include "tarmac/util/process.hpp"
#include "tarmac/util/clock.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <set>
#include <thread>

#include "tarmac/util/strings.hpp"

namespace tarmac::util {
namespace {

const std::string kChild = TARMAC_PROCESS_TEST_CHILD;
constexpr long long kHang = 30'000;  // only catches a hang: every wait below ends on an event

ProcessSpec child_spec(const std::string& mode) {
  ProcessSpec spec;
  spec.path = kChild;
  spec.argv = {"process_test_child", mode};
  spec.env = {"PATH=/bin:/usr/bin"};
  return spec;
}

// The descriptors this process has open.
std::set<int> open_fds() {
  std::set<int> out;
  DIR* dir = ::opendir("/proc/self/fd");
  while (const dirent* entry = dir != nullptr ? ::readdir(dir) : nullptr) {
    if (entry->d_name[0] != '.' && std::atoi(entry->d_name) != ::dirfd(dir)) out.insert(std::atoi(entry->d_name));
  }
  if (dir != nullptr) ::closedir(dir);
  return out;
}

struct Ran {
  std::string out;  // what the child wrote on its descriptor 1
  int status = -1;  // its wait(2) status
};

// Starts `spec` with its descriptor 1 on a pipe, reads the pipe to its end and reaps the child.
Ran run(ProcessSpec spec) {
  int out[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  Fd read_end(out[0]);
  Fd write_end(out[1]);
  spec.fds.push_back({1, write_end.get()});
  auto child = start_process(spec);
  EXPECT_TRUE(child.ok()) << child.error().message;
  write_end.reset();
  Ran ran;
  if (!child.ok()) return ran;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::read(read_end.get(), buffer, sizeof buffer)) > 0) ran.out.append(buffer, static_cast<std::size_t>(n));
  auto status = wait_for(*child, kHang);
  EXPECT_TRUE(status.ok() && status->has_value());
  if (status.ok() && status->has_value()) ran.status = **status;
  return ran;
}

TEST(StartProcess, MapsDescriptorsAndClosesEveryOther) {
  const Fd leaky(::open("/dev/zero", O_RDONLY));  // no O_CLOEXEC: only OtherFds::Close keeps it out
  ASSERT_TRUE(leaky.valid());
  ProcessSpec spec = child_spec("fds");
  spec.fds = {{5, kDevNull}, {7, leaky.get()}};
  const Ran ran = run(spec);
  EXPECT_EQ(ran.status, 0);
  const auto lines = split(ran.out, '\n');
  ASSERT_EQ(lines.size(), 4U) << ran.out;  // three descriptors and the empty piece after the last newline
  EXPECT_TRUE(lines[0].starts_with("1 pipe:")) << lines[0];
  EXPECT_EQ(lines[1], "5 /dev/null");
  EXPECT_EQ(lines[2], "7 /dev/zero");
}

TEST(StartProcess, SwapsDescriptorsThatAreEachOthersTargets) {
  const Fd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const Fd zero(::open("/dev/zero", O_RDONLY | O_CLOEXEC));
  ASSERT_GE(::dup3(null.get(), 40, O_CLOEXEC), 0);
  ASSERT_GE(::dup3(zero.get(), 41, O_CLOEXEC), 0);
  const Fd forty(40);
  const Fd forty_one(41);
  ProcessSpec spec = child_spec("fds");
  spec.fds = {{40, 41}, {41, 40}};
  const Ran ran = run(spec);
  EXPECT_NE(ran.out.find("\n40 /dev/zero\n41 /dev/null\n"), std::string::npos) << ran.out;
}

TEST(StartProcess, KeepsInheritedDescriptorsWhenAsked) {
  const Fd inherited(::open("/dev/zero", O_RDONLY));
  const Fd cloexec(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ProcessSpec spec = child_spec("fds");
  spec.other_fds = OtherFds::KeepInherited;
  const Ran ran = run(spec);
  EXPECT_NE(ran.out.find(fmt::format("\n{} /dev/zero\n", inherited.get())), std::string::npos) << ran.out;
  EXPECT_EQ(ran.out.find(fmt::format("\n{} /dev/null\n", cloexec.get())), std::string::npos) << ran.out;
}

TEST(StartProcess, GivesTheEnvironmentExactlyAsGiven) {
  ProcessSpec spec = child_spec("env");
  spec.env = {"B=two words", "A=1", "EMPTY=", "NO_EQUALS_SIGN", "A=again"};
  const Ran ran = run(spec);
  std::string expected;
  for (const auto& kv : spec.env) expected += kv + '\0';
  EXPECT_EQ(ran.out, expected);
}

TEST(StartProcess, ReportsAnExecFailureWithItsErrno) {
  ProcessSpec spec = child_spec("ids");
  spec.path = "/nonexistent/program";
  const auto missing = start_process(spec);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Error::Code::NotFound);
  EXPECT_EQ(missing.error().message, "cannot run /nonexistent/program: exec: No such file or directory");

  spec.path = "/etc/passwd";  // not executable
  const auto refused = start_process(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Error::Code::Io);
  EXPECT_EQ(refused.error().message, "cannot run /etc/passwd: exec: Permission denied");

  // Both children were reaped: no zombie is left for anyone to collect.
  errno = 0;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(StartProcess, ReportsWhichStepFailed) {
  ProcessSpec spec = child_spec("cwd");
  spec.cwd = "/nonexistent/directory";
  const auto no_dir = start_process(spec);
  ASSERT_FALSE(no_dir.ok());
  EXPECT_EQ(no_dir.error().message,
            fmt::format("cannot run {}: enter /nonexistent/directory: No such file or directory", kChild));

  spec = child_spec("fds");
  spec.fds = {{3, 1000}};  // not open here
  const auto bad_fd = start_process(spec);
  ASSERT_FALSE(bad_fd.ok());
  EXPECT_EQ(bad_fd.error().message, fmt::format("cannot run {}: descriptor 3: Bad file descriptor", kChild));
}

TEST(StartProcess, EntersTheWorkingDirectory) {
  ProcessSpec spec = child_spec("cwd");
  spec.cwd = "/";
  EXPECT_EQ(run(spec).out, "/\n");
}

// Another user's identity needs root: the child says so, and the parent's error names the step.
// As root, the test drops to nobody in a forked helper first so that the refusal is what it sees.
TEST(StartProcess, RefusesAUserChangeWithoutPrivilege) {
  const auto refused_message = [] {
    ProcessSpec spec = child_spec("ids");
    spec.user = Identity{.uid = 4000001, .gid = 4000002, .groups = {4000003}};
    auto started = start_process(spec);
    return started.ok() ? std::string("started") : started.error().message;
  };
  const std::string expected =
      fmt::format("cannot run {}: set supplementary groups: Operation not permitted", kChild);
  if (::geteuid() != 0) {
    EXPECT_EQ(refused_message(), expected);
    return;
  }
  const pid_t helper = ::fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    ::_exit(refused_message() == expected ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(helper, &status, 0), helper);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST(StartProcess, ChangesUserGroupAndGroupsAsRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  ProcessSpec spec;
  spec.path = "/bin/sh";
  spec.argv = {"sh", "-c", "echo $(id -u) $(id -g) $(id -G)"};
  spec.env = {"PATH=/bin:/usr/bin"};
  spec.cwd = "/";
  spec.user = Identity{.uid = 4000001, .gid = 4000002, .groups = {4000003, 4000004}};
  EXPECT_EQ(run(spec).out, "4000001 4000002 4000002 4000003 4000004\n");
}

std::vector<std::string> ids(Session session) {
  ProcessSpec spec = child_spec("ids");
  spec.session = session;
  const std::string out = run(spec).out;
  return split(out.substr(0, out.find('\n')), ' ');
}

TEST(StartProcess, StartsANewSessionOrGroup) {
  const auto session = ids(Session::NewSession);
  ASSERT_EQ(session.size(), 3U);
  EXPECT_EQ(session[1], session[0]) << "getsid is the child itself";
  EXPECT_EQ(session[2], session[0]) << "and it leads its group";

  const auto group = ids(Session::NewGroup);
  ASSERT_EQ(group.size(), 3U);
  EXPECT_EQ(group[1], std::to_string(::getsid(0)));
  EXPECT_EQ(group[2], group[0]);

  const auto inherited = ids(Session::Inherit);
  ASSERT_EQ(inherited.size(), 3U);
  EXPECT_EQ(inherited[1], std::to_string(::getsid(0)));
  EXPECT_EQ(inherited[2], std::to_string(::getpgrp()));
}

// This process's signal state changed for one test, and restored after it.
class SignalState {
 public:
  SignalState() {
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    ::sigprocmask(SIG_BLOCK, &usr1, &old_mask_);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGUSR2, &ignore, &old_usr2_);
  }
  SignalState(const SignalState&) = delete;
  SignalState& operator=(const SignalState&) = delete;
  ~SignalState() {
    ::sigaction(SIGUSR2, &old_usr2_, nullptr);
    ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }

 private:
  sigset_t old_mask_{};
  struct sigaction old_usr2_ {};
};

constexpr const char* kUsr1 = "0000000000000200";  // bit SIGUSR1 - 1 = 9
constexpr const char* kUsr2 = "0000000000000800";  // bit SIGUSR2 - 1 = 11

TEST(StartProcess, ResetsTheSignalMaskAndDispositions) {
  const SignalState blocked_and_ignored;
  EXPECT_EQ(run(child_spec("signals")).out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");

  ProcessSpec spec = child_spec("signals");
  spec.dispositions = Dispositions::KeepIgnored;
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  spec.signal_mask = usr1;
  EXPECT_EQ(run(spec).out, fmt::format("SigBlk:\t{}\nSigIgn:\t{}\n", kUsr1, kUsr2));
}

TEST(StartProcess, ThePidfdTellsWhenTheChildEnds) {
  int in[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  Fd read_end(in[0]);
  Fd write_end(in[1]);
  ProcessSpec spec = child_spec("wait");
  spec.fds = {{0, read_end.get()}};
  auto child = start_process(spec);
  ASSERT_TRUE(child.ok()) << child.error().message;
  read_end.reset();
  ASSERT_TRUE(child->pidfd.valid()) << "this kernel has pidfds";
  pollfd p{child->pidfd.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "still running: it waits for its stdin";
  auto running = wait_for(*child, 0);
  ASSERT_TRUE(running.ok());
  EXPECT_FALSE(running->has_value());
  write_end.reset();  // end of its input: it exits
  EXPECT_EQ(::poll(&p, 1, static_cast<int>(kHang)), 1);
  auto status = wait_for(*child, kHang);
  ASSERT_TRUE(status.ok() && status->has_value());
  EXPECT_TRUE(WIFEXITED(**status) && WEXITSTATUS(**status) == 0);
}

TEST(StartProcess, SendsASignalThroughThePidfd) {
  int in[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  Fd read_end(in[0]);
  const Fd write_end(in[1]);  // kept open: the child would wait for ever
  ProcessSpec spec = child_spec("wait");
  spec.fds = {{0, read_end.get()}};
  auto child = start_process(spec);
  ASSERT_TRUE(child.ok()) << child.error().message;
  ASSERT_TRUE(send_signal(*child, SIGKILL).ok());
  auto status = wait_for(*child, kHang);
  ASSERT_TRUE(status.ok() && status->has_value());
  EXPECT_TRUE(WIFSIGNALED(**status) && WTERMSIG(**status) == SIGKILL);
}

TEST(StartProcess, LeavesNoDescriptorBehindInTheParent) {
  const auto before = open_fds();
  (void)run(child_spec("ids"));
  ProcessSpec missing = child_spec("ids");
  missing.path = "/nonexistent/program";
  missing.fds = {{0, kDevNull}};
  EXPECT_FALSE(start_process(missing).ok());
  ProcessSpec invalid = child_spec("ids");
  invalid.argv.clear();
  EXPECT_FALSE(start_process(invalid).ok());
  EXPECT_EQ(open_fds(), before);
}

// The agent starts processes from two threads (the scheduler's and the alert sender's): children
// made while another thread makes one get their own descriptors and environment.
TEST(StartProcess, StartsFromSeveralThreadsAtOnce) {
  const auto before = open_fds();
  std::atomic<int> right{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &right] {
      for (int i = 0; i < 20; ++i) {
        ProcessSpec spec = child_spec("env");
        spec.env = {fmt::format("THREAD={}", t), fmt::format("ROUND={}", i)};
        if (run(spec).out == fmt::format("THREAD={}{}ROUND={}{}", t, '\0', i, '\0')) ++right;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(right.load(), 80);
  EXPECT_EQ(open_fds(), before);
}

TEST(StartProcess, RefusesASpecItCannotRunAsGiven) {
  ProcessSpec spec = child_spec("ids");
  spec.argv = {"a", std::string("b\0c", 3)};
  EXPECT_EQ(start_process(spec).error().code, Error::Code::Invalid);
  spec = child_spec("ids");
  spec.env = {std::string("A=1\0B=2", 7)};
  EXPECT_EQ(start_process(spec).error().code, Error::Code::Invalid);
  spec = child_spec("ids");
  spec.fds = {{1, kDevNull}, {1, kDevNull}};
  EXPECT_EQ(start_process(spec).error().code, Error::Code::Invalid);
  spec = child_spec("ids");
  spec.take_terminal = true;  // a terminal goes to a new group of this session only
  EXPECT_EQ(start_process(spec).error().code, Error::Code::Invalid);
  spec = child_spec("ids");
  spec.argv.clear();
  EXPECT_EQ(start_process(spec).error().code, Error::Code::Invalid);
}

TEST(Pidfd, SignalsTheProcessItWasOpenedForAndSeesItEnd) {
  ProcessSpec spec;
  spec.path = "/bin/sleep";
  spec.argv = {"sleep", "1000"};
  auto child = start_process(spec);
  ASSERT_TRUE(child.ok()) << child.error().message;
  auto pidfd = open_pidfd(child->pid);
  ASSERT_TRUE(pidfd.ok()) << pidfd.error().message;
  EXPECT_FALSE(pidfd_ended(*pidfd, 0));
  ASSERT_TRUE(signal_pidfd(*pidfd, SIGTERM).ok());
  EXPECT_TRUE(pidfd_ended(*pidfd, kHang));
  const auto status = wait_for(*child, kHang);
  ASSERT_TRUE(status.ok() && status->has_value());
  EXPECT_TRUE(WIFSIGNALED(**status) && WTERMSIG(**status) == SIGTERM);
  // Reaped: the pidfd still names that process, never whoever gets its pid next.
  const auto again = signal_pidfd(*pidfd, SIGTERM);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Error::Code::NotFound);
}

TEST(Pidfd, RefusesPidsThatAreNotOneProcess) {
  EXPECT_EQ(open_pidfd(0).error().code, Error::Code::Invalid);
  EXPECT_EQ(open_pidfd(1).error().code, Error::Code::Invalid);
  EXPECT_EQ(open_pidfd(-1).error().code, Error::Code::Invalid);
  EXPECT_EQ(signal_pidfd(Fd(), SIGTERM).error().code, Error::Code::Invalid);
}

TEST(ResolveCommand, PathLookupAndExplicitPaths) {
  EXPECT_EQ(resolve_command("sh", "/nonexistent:/bin:/usr/bin"), std::optional<std::string>("/bin/sh"));
  EXPECT_EQ(resolve_command("/bin/sh", ""), std::optional<std::string>("/bin/sh"));
  EXPECT_FALSE(resolve_command("no-such-command-here", "/bin:/usr/bin"));
  EXPECT_FALSE(resolve_command("/etc/passwd", "")) << "not executable";
  EXPECT_FALSE(resolve_command("", "/bin"));
}

}  // namespace
}  // namespace tarmac::util

namespace tarmac::util {
namespace {

ProcessSpec shell(const std::string& script) {
  ProcessSpec spec;
  spec.path = "/bin/sh";
  spec.argv = {"sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.fds = {{0, kDevNull}};
  return spec;
}

TEST(RunCaptured, CapturesOutputAndErrorWithTheStatus) {
  std::string out;
  auto status = run_captured(shell("echo out; echo err >&2; exit 3"), 10'000, out);
  ASSERT_TRUE(status.ok()) << status.error().message;
  ASSERT_TRUE(status->has_value());
  EXPECT_TRUE(WIFEXITED(**status));
  EXPECT_EQ(WEXITSTATUS(**status), 3);
  EXPECT_EQ(out, "out\nerr\n");
}

TEST(RunCaptured, KeepsAtMost64KiBAndKillsWhatOutlivesItsTime) {
  std::string out;
  auto big = run_captured(shell("head -c 200000 /dev/zero"), 10'000, out);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(out.size(), 64U * 1024);
  out.clear();
  const long long started = monotonic_ms();
  auto slow = run_captured(shell("exec sleep 30"), 300, out);
  ASSERT_TRUE(slow.ok());
  EXPECT_FALSE(slow->has_value()) << "killed at its timeout";
  EXPECT_LT(monotonic_ms() - started, 10'000);
  const std::atomic<bool> abandon{true};
  auto abandoned = run_captured(shell("exec sleep 30"), 30'000, out, &abandon);
  ASSERT_TRUE(abandoned.ok());
  EXPECT_FALSE(abandoned->has_value());
  auto missing = run_captured(ProcessSpec{"/nonexistent/x", {"x"}, {}, {}}, 1000, out);
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace tarmac::util
