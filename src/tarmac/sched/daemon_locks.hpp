// The shared lock directory as the scheduler uses it (daemon_state.hpp). Private to src/tarmac/sched.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tarmac/sched/job.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::sched {

// The shared lock directory as the scheduler uses it: its lock, waited for briefly (kLockWaitMs),
// logged at most once a minute when someone holds it longer, and given up on after kLockStuckMs so
// that nobody can stop the queue by holding it; and the lease files of this agent's jobs and
// leases. Owns the directory's descriptor and the lock's timers (on the monotonic clock).
class LeaseFiles {
 public:
  LeaseFiles(LeaseDir dir, util::LogSink log) : dir_(std::move(dir)), log_(std::move(log)) {}

  // The directory's lock, waited for at most kLockWaitMs at `now_ms`; nullopt (logged at most once
  // a minute) when someone holds it longer.
  [[nodiscard]] std::optional<LeaseDir::DirLock> lock_briefly(long long now_ms);
  // Whether the lock has been out of reach for kLockStuckMs (someone holds it on purpose): the pass
  // then schedules without it rather than not at all.
  [[nodiscard]] bool stuck(long long now_ms) const;
  // The lock for a request, waited for at most kLockWaitMs; an error the caller answers with.
  [[nodiscard]] Result<LeaseDir::DirLock> lock_for_request() const;

  // The live leases of the directory, at `now_unix_ms` (call with the lock held).
  [[nodiscard]] Result<std::vector<Lease>> live(long long now_unix_ms) const { return dir_.live_leases(now_unix_ms); }
  // Writes the lease files of `job` on its GPUs: owned by its wrapper `pid` (started at `starttime`),
  // or by nobody (pid 0, a lease) until its expiry (call with the lock held).
  [[nodiscard]] Result<void> write_for(const Job& job, int pid, unsigned long long starttime) const;
  // Removes the lease files of `job`, under the lock when it can be had at `now_ms`; otherwise they
  // go stale with the wrapper, or at their expiry.
  void remove_for(const Job& job, long long now_ms);

 private:
  void log(util::LogLevel level, const std::string& message) const {
    if (log_) log_(level, message);
  }

  LeaseDir dir_;
  util::LogSink log_;
  long long warned_ms_ = 0;       // when a held lock was last logged
  long long missed_since_ms_ = 0;  // since when the lock could not be had; 0 when it could
};

}  // namespace tarmac::sched
