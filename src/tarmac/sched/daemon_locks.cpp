// The shared lock directory as the scheduler uses it (daemon_locks.hpp).
#include "tarmac/sched/daemon_locks.hpp"

#include <fmt/format.h>

namespace tarmac::sched {

namespace {
constexpr long long kLockWaitMs = 200;  // the longest the loop waits for the lock directory's lock
// Any user may flock the shared directory's .lock: held longer than this, the pass goes on without
// it (its own jobs and leases are busy whatever the files say), so nobody can stop the queue.
constexpr long long kLockStuckMs = 10000;
constexpr long long kLockLogMs = 60 * 1000;  // a held lock is logged at most this often
}  // namespace

std::optional<LeaseDir::DirLock> LeaseFiles::lock_briefly(long long now_ms) {
  auto held = dir_.lock(kLockWaitMs);
  if (held.ok()) {
    missed_since_ms_ = 0;
    return std::move(*held);
  }
  if (missed_since_ms_ == 0) missed_since_ms_ = now_ms;
  if (now_ms - warned_ms_ >= kLockLogMs) {
    warned_ms_ = now_ms;
    log(util::LogLevel::Warning, fmt::format("scheduler: {}", held.error().message));
  }
  return std::nullopt;
}

bool LeaseFiles::stuck(long long now_ms) const {
  return missed_since_ms_ != 0 && now_ms - missed_since_ms_ >= kLockStuckMs;
}

Result<LeaseDir::DirLock> LeaseFiles::lock_for_request() const { return dir_.lock(kLockWaitMs); }

Result<void> LeaseFiles::write_for(const Job& job, int pid, unsigned long long starttime) const {
  std::vector<Lease> leases;
  for (const auto& uuid : job.gpu_uuids) {
    leases.push_back(Lease{.uuid = uuid, .pid = pid, .starttime = starttime, .expires_unix_ms = job.expires_ms,
                           .job_id = std::to_string(job.id), .user = job.user});
  }
  return dir_.write(leases);
}

void LeaseFiles::remove_for(const Job& job, long long now_ms) {
  if (job.gpu_uuids.empty()) return;
  auto held = lock_briefly(now_ms);
  if (!held) return;  // they go stale with the wrapper, or at their expiry
  dir_.remove(job.gpu_uuids, std::to_string(job.id));
}

}  // namespace tarmac::sched
