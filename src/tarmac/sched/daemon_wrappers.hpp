// The runtime of the scheduler's running jobs (daemon_state.hpp). Private to src/tarmac/sched.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tarmac/sched/daemon_table.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::sched {

// What a job's ID.lock says about its wrapper: whether it lives (holds the lock) and, once it has
// written them, its pid and start time.
struct WrapperProbe {
  bool alive = false;
  int pid = 0;  // 0 until the wrapper has written "pid starttime"
  unsigned long long start = 0;
};

// The lock file at `lock_path`, read without waiting.
[[nodiscard]] WrapperProbe probe_wrapper(const std::string& lock_path);

// The runtime of running jobs: for each wrapper the agent watches, its pidfd (readable once the
// wrapper ends) and whether the agent is its parent (and reaps it); for an attached job, the
// submitter's stdout and stderr until it starts (a backfill job keeps them: it may start again).
// Owns those descriptors. Acts on a wrapper only through its pidfd or, on a kernel without
// pidfd_open, by a pid whose start time still matches the one recorded.
class Wrappers {
 public:
  struct Runtime {
    util::Fd pidfd;
    bool child = false;                  // the agent started it (and must reap it)
    std::vector<util::Fd> output_fds;    // the submitter's stdout and stderr (attached jobs, until started)
  };

  explicit Wrappers(util::LogSink log) : log_(std::move(log)) {}

  // Job `id`'s runtime (an empty one when it has none yet).
  [[nodiscard]] Runtime& runtime(long long id) { return runtime_[id]; }
  // Keeps the submitter's stdout and stderr for attached job `id` until it starts.
  void hold_output(long long id, std::vector<util::Fd> fds) { runtime_[id].output_fds = std::move(fds); }

  // Watches the wrapper of `job` (shim_pid) by a pidfd, once it is sure the pid is still that
  // wrapper's (else shim_pid becomes 0); `child` when the agent started it.
  void watch(Job& job, bool child);
  // Sends `sig` to the wrapper of `job` through its pidfd (never by a bare pid, which may be 0 or
  // reused); false when there is no wrapper to signal.
  bool signal(const Job& job, int sig);
  // Reaps the wrapper of `job` when the agent is its parent (it has ended).
  void reap(const Job& job);
  // Stops watching job `id`'s wrapper (it ended; the job keeps what else it holds).
  void unwatch(long long id);
  // Job `id` ended: closes everything it held.
  void forget(long long id) { runtime_.erase(id); }

  // The pidfds to poll, with their jobs: each one is readable once its wrapper has ended.
  [[nodiscard]] std::vector<std::pair<long long, int>> pidfds() const;
  // The running jobs whose wrappers are watched without a pidfd (a kernel without pidfd_open, or
  // re-attached before the wrapper wrote its pid) and have ended; those that wrote their pid since
  // are watched from now on.
  [[nodiscard]] std::vector<long long> ended_without_pidfd(JobTable& table);

 private:
  void log(util::LogLevel level, const std::string& message) const {
    if (log_) log_(level, message);
  }

  util::LogSink log_;
  std::map<long long, Runtime> runtime_;
};

}  // namespace tarmac::sched
