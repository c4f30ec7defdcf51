#include "tarmac/sched/supervise.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <fmt/format.h>

#include "tarmac/util/units.hpp"

namespace tarmac::sched {

namespace {

// A word to the job's own stderr, which is the submitter's terminal or pipe: written only when it
// has room now, in one write(2), and always after the signal it announces. A stderr nobody reads
// (a full pipe, a terminal stopped with Ctrl-S) must never hold back a wall-clock limit, a cancel
// or a preemption.
void notice(const std::string& text) {
  pollfd p{STDERR_FILENO, POLLOUT, 0};
  if (::poll(&p, 1, 0) != 1 || (p.revents & POLLOUT) == 0) return;
  const int flags = ::fcntl(STDERR_FILENO, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK) == 0) ::fcntl(STDERR_FILENO, F_SETFL, flags | O_NONBLOCK);
  const ssize_t n = ::write(STDERR_FILENO, text.data(), std::min(text.size(), static_cast<std::size_t>(PIPE_BUF)));
  (void)n;  // a word lost is better than a signal late
  if (flags >= 0 && (flags & O_NONBLOCK) == 0) ::fcntl(STDERR_FILENO, F_SETFL, flags);
}

// Reaps every finished child; stores the leader's status when it is among them. Returns whether the
// leader has been reaped.
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

}  // namespace

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, s);
  return set;
}

int wait_signal(const sigset_t& set, long long ms) {
  ms = std::max(0LL, ms);
  timespec ts{.tv_sec = static_cast<time_t>(ms / 1000), .tv_nsec = static_cast<long>(ms % 1000) * 1000000L};
  const int sig = ::sigtimedwait(&set, nullptr, &ts);
  return sig < 0 ? 0 : sig;
}

bool is_stop_signal(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }

long long monotonic_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

std::vector<std::string> job_environment(const std::vector<std::string>& base, const std::string& visible, bool uuids,
                                         const std::string& job_id, const std::string& name) {
  std::vector<std::string> env;
  for (const auto& kv : base) {
    if (kv.starts_with("CUDA_VISIBLE_DEVICES=") || kv.starts_with("CUDA_DEVICE_ORDER=") ||
        kv.starts_with("TARMAC_JOB_ID=") || kv.starts_with("TARMAC_JOB_NAME=")) {
      continue;
    }
    env.push_back(kv);
  }
  env.push_back("CUDA_VISIBLE_DEVICES=" + visible);
  if (!uuids) env.emplace_back("CUDA_DEVICE_ORDER=PCI_BUS_ID");
  env.push_back("TARMAC_JOB_ID=" + job_id);
  if (!name.empty()) env.push_back("TARMAC_JOB_NAME=" + name);
  return env;
}

bool owns_terminal() { return ::isatty(STDIN_FILENO) != 0 && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp(); }

void give_terminal(pid_t pgid) {
  sigset_t ttou;
  sigset_t old;
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  ::sigprocmask(SIG_BLOCK, &ttou, &old);
  (void)::tcsetpgrp(STDIN_FILENO, pgid);
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
}

Result<util::Child> spawn(util::ProcessSpec spec, const sigset_t& original_mask) {
  spec.session = util::Session::NewGroup;
  spec.other_fds = util::OtherFds::KeepInherited;
  spec.dispositions = util::Dispositions::KeepIgnored;
  spec.signal_mask = original_mask;
  return util::start_process(spec);
}

int not_started_code(const Error& error) {
  constexpr int kCommandNotFound = 127;
  constexpr int kCannotExecute = 126;
  return error.code == Error::Code::NotFound ? kCommandNotFound : kCannotExecute;
}

int supervise(pid_t pgid, const std::string& what, const Limits& limits, const sigset_t& handled) {
  constexpr long long kNever = std::numeric_limits<long long>::max();
  const long long start = monotonic_ms();
  long long term_at = limits.time_ms ? start + *limits.time_ms : kNever;  // the wall-clock limit's SIGTERM
  long long kill_at = kNever;                                             // the grace period's SIGKILL
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
      ::kill(-pgid, SIGTERM);
      notice(fmt::format("tarmac: {} ended; stopping what it left running (SIGTERM, SIGKILL after {})\n", what,
                         util::format_duration_ms(limits.grace_ms)));
      leftovers_signalled = true;
      term_at = kNever;
      if (kill_at == kNever) kill_at = now + limits.grace_ms;
    }
    if (now >= term_at) {
      ::kill(-pgid, SIGTERM);
      notice(fmt::format("tarmac: {}: wall-clock limit of {} reached: SIGTERM, SIGKILL after {}\n", what,
                         util::format_duration_ms(*limits.time_ms), util::format_duration_ms(limits.grace_ms)));
      term_at = kNever;
      kill_at = now + limits.grace_ms;
    }
    if (now >= kill_at) {
      ::kill(-pgid, SIGKILL);
      notice(fmt::format("tarmac: {}: still running after the grace period: SIGKILL to its process group\n", what));
      kill_at = kNever;
    }
    const long long timeout = std::min({leader_done ? 50LL : 1000LL, term_at - now, kill_at - now});
    const int sig = wait_signal(handled, timeout);
    if (is_stop_signal(sig)) {
      ::kill(-pgid, sig);
      if (kill_at == kNever) kill_at = monotonic_ms() + limits.grace_ms;  // a group that ignores it is killed
      term_at = kNever;
    }
  }
}

}  // namespace tarmac::sched
