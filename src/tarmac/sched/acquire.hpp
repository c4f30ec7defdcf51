// One race-free pick: under the lock directory's lock, read the live leases, look at the GPUs,
// choose, and (when asked) lease what was chosen, so no other pick or run can choose it meanwhile.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/backend.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/sched/pick.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::sched {

struct Acquired {
  PickResult pick;
  gpu::Snapshot snapshot;          // what the choice was made on (processes and topology)
  std::vector<std::string> uuids;  // of pick.chosen, in the same order; leased when a lease was given
                                   // (a MIG pick's: its MIG device's)
  std::optional<std::string> mig;  // the request's MIG profile ("" any), for messages
};

// Picks for `request` and, when the pick succeeds and `lease` is given, writes one lease per chosen
// GPU (the lease's uuid is filled in per GPU). Fails only when the directory or NVML cannot be read
// or the leases cannot be written; "not enough free GPUs" is an Acquired whose pick is not ok().
[[nodiscard]] Result<Acquired> acquire(const LeaseDir& dir, gpu::Backend& backend, const PickRequest& request,
                                       const std::optional<Lease>& lease, long long now_unix_ms);

}  // namespace tarmac::sched
