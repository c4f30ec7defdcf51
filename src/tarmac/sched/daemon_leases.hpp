// Leases that sit idle or run out (daemon_state.hpp). Private to src/tarmac/sched.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tarmac/sched/daemon.hpp"
#include "tarmac/sched/daemon_gpus.hpp"
#include "tarmac/sched/daemon_locks.hpp"
#include "tarmac/sched/daemon_table.hpp"

namespace tarmac::sched {

// Ends lease `job` in `state`: its lease files go (under the lock when it can be had at `now_ms`,
// monotonic), the table records its end and lets it go. Returns the lease as it ended.
Job end_lease(JobTable& table, LeaseFiles& files, Job& job, JobState state, const std::string& reason, long long now_ms);

// Gives lease `lease` (recorded in the store: it has its id) the GPUs `chosen` (indices) / `uuids`
// for `for_ms` from now: active, its lease files written (call with the lock held), its record saved,
// logged. A lease whose files cannot be written is left as it was, and the failure returned.
[[nodiscard]] Result<void> activate_lease(JobTable& table, LeaseFiles& files, Job& lease,
                                          const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids,
                                          long long for_ms, const util::LogSink& log);

// Leases that sit idle or run out: when each active lease was last seen used (on the monotonic
// clock, so that a step of the wall clock neither reclaims a lease early nor keeps one forever),
// the warning after scheduler.lease_idle_limit, the reclaim after scheduler.lease_idle_grace more,
// and the end of those whose time ran out (wall time, as their lease files say). Owns those clocks;
// sends its notices to the log, the store's events and DaemonOptions::notify.
class IdleLeases {
 public:
  using Notify = std::function<void(const LeaseNotice&)>;

  IdleLeases(const SchedulerConfig& config, JobTable& table, LeaseFiles& files, Notify notify, util::LogSink log)
      : config_(config), table_(table), files_(files), notify_(std::move(notify)), log_(std::move(log)) {}

  // Lease `id` was given at `now_ms` (monotonic): it counts as used then.
  void given(long long id, long long now_ms) { idle_[id] = Idle{.last_used_ms = now_ms}; }
  // One check of every active lease against `seen` (the sampler's latest sample), at `now_ms`
  // (monotonic) and `now_unix_ms` (wall): warns, reclaims and ends as due.
  void check(const std::map<std::string, GpuUse>& seen, long long now_ms, long long now_unix_ms);

 private:
  struct Idle {
    long long last_used_ms = 0;
    long long warned_ms = 0;  // when the idle warning went out; 0 when it has not
  };
  void notice(const Job& job, bool reclaimed, long long idle_ms, long long now_unix_ms);
  void log(util::LogLevel level, const std::string& message) const {
    if (log_) log_(level, message);
  }

  const SchedulerConfig& config_;
  JobTable& table_;
  LeaseFiles& files_;
  Notify notify_;
  util::LogSink log_;
  std::map<long long, Idle> idle_;  // active leases -> their idle clock (monotonic)
};

}  // namespace tarmac::sched
