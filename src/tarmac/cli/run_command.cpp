#include "tarmac/cli/run_command.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <memory>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/pick_command.hpp"
#include "tarmac/sched/acquire.hpp"
#include "tarmac/util/units.hpp"

extern char** environ;

namespace tarmac::cli {

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

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return kExitProblems;
}

namespace {

constexpr int kCommandNotFound = 127;
constexpr long long kPollMs = 500;

struct RunFlags {
  RequestFlags request;
  std::string time;
  std::string grace = "10s";
  std::string wait;
  std::string name;
  bool uuids = false;
  std::vector<std::string> command;
};

struct Limits {
  std::optional<long long> time_ms;
  long long grace_ms = 10000;
  std::optional<long long> wait_ms;
};

long long monotonic_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

// The signals run handles itself. They stay blocked from the start (threads the NVML library may
// start inherit the mask) and are taken synchronously with sigtimedwait.
sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, s);
  return set;
}

// The next handled signal within `ms`, or 0.
int wait_signal(const sigset_t& set, long long ms) {
  ms = std::max(0LL, ms);
  timespec ts{.tv_sec = static_cast<time_t>(ms / 1000), .tv_nsec = static_cast<long>(ms % 1000) * 1000000L};
  const int sig = ::sigtimedwait(&set, nullptr, &ts);
  return sig < 0 ? 0 : sig;
}

bool is_stop_signal(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }

Result<Limits> parse_limits(const RunFlags& flags) {
  Limits limits;
  const auto duration = [](const std::string& flag, const std::string& text, bool allow_zero) -> Result<long long> {
    const auto ms = util::parse_duration_ms(text);
    if (!ms || *ms < 0 || (*ms == 0 && !allow_zero)) {
      return make_error(Error::Code::Invalid, fmt::format("{}: '{}' is not a duration (like 30s, 10m, 2h)", flag, text));
    }
    return *ms;
  };
  if (!flags.time.empty()) {
    TARMAC_TRY_ASSIGN(limits.time_ms, duration("--time", flags.time, false));
  }
  TARMAC_TRY_ASSIGN(limits.grace_ms, duration("--grace", flags.grace, true));
  if (!flags.wait.empty()) {
    TARMAC_TRY_ASSIGN(limits.wait_ms, duration("--wait", flags.wait, true));
  }
  return limits;
}

std::string make_job_id() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  return fmt::format("{}-{}-{}", host, ::getpid(), now_unix_ms());
}

// The command's environment: ours, with the job's CUDA_* and TARMAC_JOB_* in place of any inherited.
std::vector<std::string> child_environment(const std::string& visible, bool uuids, const std::string& job_id,
                                           const std::string& name) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view kv = *e;
    if (kv.starts_with("CUDA_VISIBLE_DEVICES=") || kv.starts_with("CUDA_DEVICE_ORDER=") ||
        kv.starts_with("TARMAC_JOB_ID=") || kv.starts_with("TARMAC_JOB_NAME=")) {
      continue;
    }
    env.emplace_back(kv);
  }
  env.push_back("CUDA_VISIBLE_DEVICES=" + visible);
  if (!uuids) env.emplace_back("CUDA_DEVICE_ORDER=PCI_BUS_ID");
  env.push_back("TARMAC_JOB_ID=" + job_id);
  if (!name.empty()) env.push_back("TARMAC_JOB_NAME=" + name);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Whether this process owns the terminal on stdin, so the command should get it.
bool owns_terminal() { return ::isatty(STDIN_FILENO) != 0 && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp(); }

// Gives the terminal to process group `pgid`; SIGTTOU is blocked so a background caller may too.
void give_terminal(pid_t pgid) {
  sigset_t ttou;
  sigset_t old;
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  ::sigprocmask(SIG_BLOCK, &ttou, &old);
  (void)::tcsetpgrp(STDIN_FILENO, pgid);
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
}

// Starts `path` with `args` and `env` as the leader of a new process group; never returns in the child.
pid_t spawn(const std::string& path, std::vector<std::string> args, std::vector<std::string> env,
            const sigset_t& original_mask, bool terminal) {
  auto argv = c_strings(args);
  auto envp = c_strings(env);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (terminal) give_terminal(::getpid());
    ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);
    ::execve(path.c_str(), argv.data(), envp.data());
    const int err = errno;
    const std::string msg = fmt::format("tarmac: {}: {}\n", args.front(), std::strerror(err));
    (void)!::write(STDERR_FILENO, msg.data(), msg.size());
    ::_exit(err == ENOENT ? kCommandNotFound : 126);
  }
  if (pid > 0) {
    ::setpgid(pid, pid);  // also here, so the group exists before the parent signals it
    if (terminal) give_terminal(pid);
  }
  return pid;
}

// Reaps every finished child (run is a subreaper: orphaned descendants come to it); stores the
// leader's status when it is among them. Returns whether the leader has been reaped.
bool reap(pid_t leader, int& leader_status) {
  bool leader_done = false;
  int status = 0;
  pid_t r = 0;
  while ((r = ::waitpid(-1, &status, WNOHANG)) > 0) {
    if (r == leader) {
      leader_status = status;
      leader_done = true;
    }
  }
  return leader_done;
}

bool group_alive(pid_t pgid) { return ::kill(-pgid, 0) == 0 || errno != ESRCH; }

// Waits for the job's process group to end: SIGTERM at the wall-clock limit, SIGKILL of the group
// after the grace period, signals to run passed on. Returns the leader's wait status.
int supervise(pid_t pgid, const std::string& what, const Limits& limits, const sigset_t& handled) {
  const long long start = monotonic_ms();
  std::optional<long long> term_at;
  if (limits.time_ms) term_at = start + *limits.time_ms;
  std::optional<long long> kill_at;
  int status = 0;
  bool leader_done = false;
  bool leftovers_signalled = false;
  for (;;) {
    if (!leader_done) leader_done = reap(pgid, status);
    else reap(pgid, status);
    if (leader_done && !group_alive(pgid)) return status;
    const long long now = monotonic_ms();
    if (leader_done && !leftovers_signalled) {
      // The command ended but left processes in its group; they would use GPUs no longer leased.
      fmt::print(stderr, "tarmac: {} ended; stopping what it left running (SIGTERM, SIGKILL after {})\n", what,
                 util::format_duration_ms(limits.grace_ms));
      ::kill(-pgid, SIGTERM);
      leftovers_signalled = true;
      term_at.reset();
      if (!kill_at) kill_at = now + limits.grace_ms;
    }
    if (term_at && now >= *term_at) {
      fmt::print(stderr, "tarmac: {}: wall-clock limit of {} reached: SIGTERM, SIGKILL after {}\n", what,
                 util::format_duration_ms(*limits.time_ms), util::format_duration_ms(limits.grace_ms));
      ::kill(-pgid, SIGTERM);
      term_at.reset();
      kill_at = now + limits.grace_ms;
    }
    if (kill_at && now >= *kill_at) {
      fmt::print(stderr, "tarmac: {}: still running after the grace period: SIGKILL to its process group\n", what);
      ::kill(-pgid, SIGKILL);
      kill_at.reset();
    }
    long long timeout = leader_done ? 50 : 1000;
    if (term_at) timeout = std::min(timeout, *term_at - now);
    if (kill_at) timeout = std::min(timeout, *kill_at - now);
    const int sig = wait_signal(handled, timeout);
    if (is_stop_signal(sig)) ::kill(-pgid, sig);
  }
}

int run_job(const GlobalOptions& global, const RunFlags& flags, const sigset_t& handled, const sigset_t& original) {
  auto request = parse_request(flags.request);
  if (!request.ok()) {
    fmt::print(stderr, "tarmac run: {}\n", request.error().message);
    return kExitUsage;
  }
  auto limits = parse_limits(flags);
  if (!limits.ok()) {
    fmt::print(stderr, "tarmac run: {}\n", limits.error().message);
    return kExitUsage;
  }
  if (flags.command.empty()) {
    fmt::print(stderr, "tarmac run: no command: tarmac run [OPTIONS] -- CMD [ARGS...]\n");
    return kExitUsage;
  }
  const char* path_env = std::getenv("PATH");
  const auto path = resolve_command(flags.command.front(), path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin");
  if (!path) {
    fmt::print(stderr, "tarmac: {}: command not found\n", flags.command.front());
    return kCommandNotFound;
  }
  auto dir = open_lease_dir(global);
  if (!dir.ok()) return dir.error().code == Error::Code::Invalid ? kExitUsage : kExitCouldNotLook;
  auto backend = open_backend(global);
  if (!backend.ok()) return kExitCouldNotLook;

  const std::string job_id = make_job_id();
  const auto self_start = sched::process_starttime(::getpid());
  const sched::Lease lease{.uuid = {}, .pid = ::getpid(), .starttime = self_start.value_or(0), .expires_unix_ms = 0,
                           .job_id = job_id, .user = current_user()};
  const std::optional<long long> wait_until =
      limits->wait_ms ? std::optional<long long>(monotonic_ms() + *limits->wait_ms) : std::nullopt;
  bool announced = false;
  sched::Acquired acquired;
  for (;;) {
    auto got = sched::acquire(*dir, **backend, *request, lease, now_unix_ms());
    if (!got.ok()) {
      print_error(got.error());
      return kExitCouldNotLook;
    }
    if (got->snapshot.devices.size() < request->n) {
      fmt::print(stderr, "tarmac run: -n {} asks for more GPUs than there are ({})\n", request->n,
                 got->snapshot.devices.size());
      return kExitUsage;
    }
    if (got->pick.ok()) {
      acquired = std::move(*got);
      break;
    }
    const long long now = monotonic_ms();
    if (wait_until && now >= *wait_until) {
      fmt::print(stderr, "tarmac: gave up waiting after {}: {}", util::format_duration_ms(*limits->wait_ms),
                 not_enough_message(*got, request->n));
      return kExitProblems;
    }
    if (!announced) {
      fmt::print(stderr, "tarmac: waiting for {} free GPU{}…\n", request->n, request->n == 1 ? "" : "s");
      announced = true;
    }
    const long long pause = wait_until ? std::min(kPollMs, *wait_until - now) : kPollMs;
    if (const int sig = wait_signal(handled, pause); is_stop_signal(sig)) return 128 + sig;
  }
  backend->reset();  // NVML is not needed while the job runs

  const std::string visible = visible_devices(acquired, flags.uuids);
  const bool terminal = owns_terminal();
  const pid_t pid = spawn(*path, flags.command, child_environment(visible, flags.uuids, job_id, flags.name), original,
                          terminal);
  int status = 0;
  if (pid < 0) {
    fmt::print(stderr, "tarmac: cannot start {}: {}\n", flags.command.front(), std::strerror(errno));
    status = kExitCouldNotLook << 8;  // as if it exited 3
  } else {
    status = supervise(pid, flags.command.front(), *limits, handled);
  }
  if (terminal) give_terminal(::getpgrp());
  if (auto held = dir->lock(); held.ok()) dir->remove(acquired.uuids, job_id);
  // Otherwise the leases go stale with this process a moment later.
  return shell_status(status);
}

}  // namespace

void add_run_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<RunFlags>();
  auto* cmd = app.add_subcommand("run", "Run a command on N free GPUs once they can be leased: run [OPTIONS] -- CMD ARGS...");
  add_request_flags(*cmd, flags->request);
  cmd->add_option("--time", flags->time, "Wall-clock limit (like 2h): then SIGTERM, and SIGKILL after --grace");
  cmd->add_option("--grace", flags->grace, "Time between SIGTERM and SIGKILL (default 10s)");
  cmd->add_option("--name", flags->name, "A name for the job (TARMAC_JOB_NAME)");
  cmd->add_flag("--uuids", flags->uuids, "CUDA_VISIBLE_DEVICES as full GPU- UUIDs instead of PCI-ordered indices");
  cmd->add_option("--wait", flags->wait, "Give up (exit 1) when no GPUs are free after this long (default: wait forever)");
  cmd->add_option("command", flags->command, "The command and its arguments, after --");
  cmd->callback([&global, &exit_code, flags] {
    const sigset_t handled = handled_signals();
    sigset_t original;
    ::sigprocmask(SIG_BLOCK, &handled, &original);
    // Descendants the command leaves behind come to run, so they can be waited for and reaped.
    (void)::prctl(PR_SET_CHILD_SUBREAPER, 1);
    exit_code = run_job(global, *flags, handled, original);
    ::sigprocmask(SIG_SETMASK, &original, nullptr);
  });
}

}  // namespace tarmac::cli
