// What one user may hold of the agent through batches (docs/backfill.md "Limits"): the agent runs as
// root, so every batch's descriptor, store rows and parsing time are root's; without these bounds
// one user could use up its descriptors (a batch holds its output open), the store's disk (a batch
// keeps its bodies) or its one scheduler thread (parsing).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>

#include "tarmac/backfill/batch_db.hpp"
#include "tarmac/sched/settings.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::backfill {

// The bounds, from the [scheduler] keys backfill_* (docs/configuration.md); 0: no bound.
struct BatchQuota {
  unsigned batches_per_user = 16;                       // unfinished batches of one user (not root)
  std::uint64_t body_bytes_per_user = 1ULL << 30;       // bodies one user's unfinished batches keep
  std::uint64_t body_bytes_total = 8ULL << 30;          // everyone's together, root's too
  std::uint64_t input_bytes_per_minute = 256ULL << 20;  // input one user (not root) hands over a minute
};

// The quota the configuration sets.
[[nodiscard]] BatchQuota quota_from(const sched::SchedulerConfig& config);

// Whether `uid`, holding `held`, may submit one more batch: checked before its input is read.
[[nodiscard]] Result<void> room_for_a_batch(uid_t uid, const Holding& held, const BatchQuota& quota);

// Whether bodies of `bytes` fit beside what `uid` (`user`) and everyone (`all`) hold.
[[nodiscard]] Result<void> room_for_bodies(uid_t uid, long long bytes, const Holding& user, const Holding& all,
                                           const BatchQuota& quota);

// The input each user handed over in the last minute, a token bucket per uid that refills at
// input_bytes_per_minute: a user cannot keep the scheduler's thread parsing (root is not limited).
class InputRate {
 public:
  explicit InputRate(std::uint64_t bytes_per_minute) : per_minute_(bytes_per_minute) {}
  // Takes `bytes` of `uid`'s allowance at `now_ms`, or says how long to wait; nothing is taken then.
  [[nodiscard]] Result<void> take(uid_t uid, std::uint64_t bytes, long long now_ms);

 private:
  struct Bucket {
    double tokens = 0;
    long long at_ms = 0;
  };
  std::uint64_t per_minute_;
  std::map<uid_t, Bucket> buckets_;
};

}  // namespace tarmac::backfill
