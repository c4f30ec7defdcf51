// What one user may hold through batches (quota.hpp, docs/backfill.md "Limits").
#include "tarmac/backfill/quota.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "tarmac/util/units.hpp"

namespace tarmac::backfill {

namespace {

Error over_quota(std::string message) { return make_error(Error::Code::Invalid, std::move(message), std::string("quota")); }

bool over(long long held, long long more, std::uint64_t cap) {
  return cap > 0 && static_cast<std::uint64_t>(held) + static_cast<std::uint64_t>(more) > cap;
}

}  // namespace

BatchQuota quota_from(const sched::SchedulerConfig& c) {
  return BatchQuota{c.backfill_batches_per_user, c.backfill_store_per_user, c.backfill_store_total,
                    c.backfill_input_per_minute};
}

Result<void> room_for_a_batch(uid_t uid, const Holding& held, const BatchQuota& quota) {
  if (uid == 0 || !over(held.batches, 1, quota.batches_per_user)) return {};
  return over_quota(fmt::format("you have {} unfinished batches, the most one user may have: cancel one, or wait for "
                                "one to end",
                                held.batches));
}

Result<void> room_for_bodies(uid_t uid, long long bytes, const Holding& user, const Holding& all,
                             const BatchQuota& quota) {
  if (uid != 0 && over(user.body_bytes, bytes, quota.body_bytes_per_user)) {
    return over_quota(fmt::format("this batch's requests ({}) and those your unfinished batches keep ({}) come to more "
                                  "than the {} one user may keep in the agent's store",
                                  util::format_bytes(static_cast<std::uint64_t>(bytes)),
                                  util::format_bytes(static_cast<std::uint64_t>(user.body_bytes)),
                                  util::format_bytes(quota.body_bytes_per_user)));
  }
  if (over(all.body_bytes, bytes, quota.body_bytes_total)) {
    return over_quota(fmt::format("this batch's requests ({}) do not fit in the agent's store: unfinished batches keep "
                                  "{} of the {} all users may keep",
                                  util::format_bytes(static_cast<std::uint64_t>(bytes)),
                                  util::format_bytes(static_cast<std::uint64_t>(all.body_bytes)),
                                  util::format_bytes(quota.body_bytes_total)));
  }
  return {};
}

Result<void> InputRate::take(uid_t uid, std::uint64_t bytes, long long now_ms) {
  if (uid == 0 || per_minute_ == 0) return {};
  const double cap = static_cast<double>(per_minute_);
  auto [it, added] = buckets_.try_emplace(uid, Bucket{cap, now_ms});
  Bucket& b = it->second;
  const long long elapsed = std::max(0LL, now_ms - b.at_ms);
  b.tokens = std::min(cap, b.tokens + cap * static_cast<double>(elapsed) / 60000.0);
  b.at_ms = now_ms;
  const auto want = static_cast<double>(bytes);
  if (want <= b.tokens) {
    b.tokens -= want;
    return {};
  }
  // An input larger than a minute's allowance waits for a full bucket, then passes alone.
  const double missing = std::min(want, cap) - b.tokens;
  if (missing <= 0) {
    b.tokens = 0;
    return {};
  }
  const auto wait_s = static_cast<long long>(missing * 60.0 / cap) + 1;
  return over_quota(fmt::format("you handed the agent {} of input in the last minute, the most one user may: try "
                                "again in {} s",
                                util::format_bytes(per_minute_), wait_s));
}

}  // namespace tarmac::backfill
