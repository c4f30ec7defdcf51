#include "tarmac/sched/acquire.hpp"


namespace tarmac::sched {

Result<Acquired> acquire(const LeaseDir& dir, gpu::Backend& backend, const PickRequest& request,
                         const std::optional<Lease>& lease, long long now_unix_ms) {
  TARMAC_TRY_ASSIGN(auto held, dir.lock());
  TARMAC_TRY_ASSIGN(auto live, dir.live_leases(now_unix_ms));
  LeasedGpus leased;
  for (const auto& l : live) leased[l.uuid] = describe(l);
  // The snapshot is taken under the lock too: a job started by the previous holder is already
  // leased, and one that ended has left NVML's process list before its lease was removed.
  TARMAC_TRY_ASSIGN(auto snap, backend.snapshot(
                                              gpu::SnapshotOptions{.processes = true, .topology = true, .values = kPickValues}));
  Acquired out{.pick = pick(snap, leased, request), .snapshot = std::move(snap), .uuids = {}, .mig = request.mig};
  out.uuids = given_uuids(out.snapshot, out.pick);
  if (out.pick.ok() && lease) {
    std::vector<Lease> leases;
    for (const auto& uuid : out.uuids) {
      Lease l = *lease;
      l.uuid = uuid;
      leases.push_back(std::move(l));
    }
    TARMAC_TRY(dir.write(leases));
  }
  return out;
}

}  // namespace tarmac::sched
