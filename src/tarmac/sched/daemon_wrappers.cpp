// The runtime of the scheduler's running jobs (daemon_wrappers.hpp): pidfds, reaping, signals.
#include "tarmac/sched/daemon_wrappers.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fmt/format.h>

#include "tarmac/sched/daemon_common.hpp"
#include "tarmac/sched/leases.hpp"

namespace tarmac::sched {

namespace {

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

}  // namespace

WrapperProbe probe_wrapper(const std::string& lock_path) {
  WrapperProbe out;
  const util::Fd fd(::open(lock_path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return out;
  out.alive = ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0;  // the wrapper holds it while it lives
  const auto words = util::split(detail::read_small(lock_path).value_or(""), ' ');
  if (words.size() >= 2) {
    const auto pid = parse_pid(words[0]);
    const auto start = util::parse_int(words[1], 1, LLONG_MAX);
    if (pid && start) {
      out.pid = *pid;
      out.start = static_cast<unsigned long long>(*start);
    }
  }
  return out;
}

void Wrappers::watch(Job& job, bool child) {
  Runtime& rt = runtime_[job.id];
  rt.child = child;
  if (rt.pidfd || job.shim_pid < 2) return;
  rt.pidfd.reset(pidfd_open(job.shim_pid));
  if (!rt.pidfd) {
    if (errno != ESRCH) {
      log(util::LogLevel::Warning, fmt::format("scheduler: job {}: cannot watch its wrapper (pid {}) by a pidfd: {}; "
                                                "checked by pid and start time instead",
                                                job.id, job.shim_pid, std::strerror(errno)));
    }
    return;
  }
  // The pid came from a file or the store: make sure the pidfd is the wrapper's, not a reuse's.
  if (job.shim_start != 0 && process_starttime(job.shim_pid) != job.shim_start) {
    log(util::LogLevel::Warning, fmt::format("scheduler: job {}: pid {} is no longer its wrapper", job.id, job.shim_pid));
    rt.pidfd.reset();
    job.shim_pid = 0;
  }
}

bool Wrappers::signal(const Job& job, int sig) {
  const auto rt = runtime_.find(job.id);
  if (rt != runtime_.end() && rt->second.pidfd) {
    if (pidfd_send_signal(rt->second.pidfd.get(), sig) == 0) return true;
    if (errno != ENOSYS) {
      if (errno != ESRCH) {
        log(util::LogLevel::Warning,
            fmt::format("scheduler: cannot signal job {}'s wrapper: {}", job.id, std::strerror(errno)));
      }
      return false;
    }
  }
  // No pidfd (a kernel without pidfd_open): by pid, only while that pid is still the wrapper.
  if (job.shim_pid < 2 || job.shim_start == 0 || process_starttime(job.shim_pid) != job.shim_start) return false;
  return ::kill(job.shim_pid, sig) == 0;
}

void Wrappers::reap(const Job& job) {
  const auto rt = runtime_.find(job.id);
  if (rt == runtime_.end() || !rt->second.child || job.shim_pid < 2) return;  // waitpid(0) would wait for any child of the group
  int status = 0;
  while (::waitpid(job.shim_pid, &status, 0) < 0 && errno == EINTR) {
  }
}

void Wrappers::unwatch(long long id) {
  if (const auto rt = runtime_.find(id); rt != runtime_.end()) rt->second.pidfd.reset();
}

std::vector<std::pair<long long, int>> Wrappers::pidfds() const {
  std::vector<std::pair<long long, int>> out;
  for (const auto& [id, rt] : runtime_) {
    if (rt.pidfd) out.emplace_back(id, rt.pidfd.get());
  }
  return out;
}

std::vector<long long> Wrappers::ended_without_pidfd(JobTable& table) {
  std::vector<long long> gone;
  for (auto& [id, job] : table.jobs()) {
    if (job.kind != JobKind::Job || (job.state != JobState::Running && job.state != JobState::Stopping)) continue;
    const auto rt = runtime_.find(id);
    if (rt != runtime_.end() && rt->second.pidfd) continue;
    if (job.shim_pid < 2) {
      // Re-attached before its wrapper had written its pid: look again, without waiting.
      const WrapperProbe w = probe_wrapper(table.file(id, "lock"));
      if (!w.alive) {
        gone.push_back(id);
      } else if (w.pid != 0) {
        job.shim_pid = w.pid;
        job.shim_start = w.start;
        table.persist(job);
        watch(job, false);
      }
      continue;
    }
    if (rt != runtime_.end() && rt->second.child) {
      int status = 0;
      if (::waitpid(job.shim_pid, &status, WNOHANG) == job.shim_pid) {
        rt->second.child = false;
        gone.push_back(id);
      }
      continue;
    }
    const auto start = process_starttime(job.shim_pid);
    if (!start || (job.shim_start != 0 && *start != job.shim_start)) gone.push_back(id);
  }
  return gone;
}

}  // namespace tarmac::sched
