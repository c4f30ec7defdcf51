// Verdict lines: one short sentence per problem a snapshot shows, for `tarmac status`.
// `tarmac doctor` (issue 4) grows the full diagnosis from the same checks.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/model.hpp"

namespace tarmac::diagnose {

enum class Severity { Info, Warning, Critical };

struct Verdict {
  Severity severity = Severity::Info;
  std::string code;  // stable: "single-gpu-active", "holding", ...
  std::string text;  // one line for people
};

// The verdicts for a snapshot whose devices were classified into `classes` (same order).
// `held_idle_since_unix_ms` (same order, may be empty): since when each GPU's processes have been at
// 0 %, where something watched it over time (the agent); a holder is then "holding since 14:02"
// rather than "started 14:02".
// The scheduler's lease on a GPU, as a verdict names it.
struct GpuLease {
  std::string label;      // "job 12 alice", "lease alice"; "" for none
  std::string cancel_id;  // the agent's job `tarmac cancel` takes; "" when none may be named
};

// The reserved-idle verdict's sentence for `what` ("GPU 2", "MIG 4:3") under `lease`.
[[nodiscard]] std::string reserved_idle_text(const std::string& what, const GpuLease& lease);

// `leases` (same order, may be empty): the lease on each GPU, named in the verdict on a reserved
// GPU nothing runs on.
[[nodiscard]] std::vector<Verdict> verdicts(const gpu::Snapshot& snapshot, const std::vector<gpu::Activity>& classes,
                                            const std::vector<std::optional<long long>>& held_idle_since_unix_ms = {},
                                            const std::vector<GpuLease>& leases = {});

// A backfill batch running on a GPU (docs/backfill.md), as the agent names it: model, server and
// progress, not whose batch it is.
struct Backfill {
  std::string model;
  std::string server;
  long long answered = 0;  // requests done or failed
  long long requests = 0;
};

// The leases on `device`'s MIG devices (by their MIG-UUIDs in `leases`; an empty GpuLease for
// none), one per MIG device, and in `classes` (its MIG devices' classes as classified without
// leases; shorter when some are unknown) each leased one with nothing on it made reserved-idle.
// What runs on a leased device keeps the class it was given (the agent's, over time).
[[nodiscard]] std::vector<GpuLease> overlay_mig_leases(const gpu::Device& device,
                                                       const std::map<std::string, GpuLease>& leases,
                                                       const gpu::ActivityThresholds& thresholds, long long now_s,
                                                       std::vector<gpu::MigActivity>& classes);

// The verdicts that a lease or the agent adds to verdicts()'s, per device of `snapshot` (each list
// may be shorter, or empty): a reserved-idle one per MIG device that `mig_classes` class so, named
// with its lease in `mig_leases`, and an informational one per backfill batch, which yields to any
// job (so that its server's process is not taken for somebody's work). Text from the agent is
// made safe for a terminal.
[[nodiscard]] std::vector<Verdict> lease_and_backfill_verdicts(const gpu::Snapshot& snapshot,
                                                               const std::vector<std::vector<gpu::MigActivity>>& mig_classes,
                                                               const std::vector<std::vector<GpuLease>>& mig_leases,
                                                               const std::vector<std::vector<Backfill>>& backfill);

// "0", "1-3", "0, 2, 5-7": GPU index lists as people write them.
[[nodiscard]] std::string format_index_list(const std::vector<unsigned>& indices);

[[nodiscard]] const char* to_string(Severity severity);

}  // namespace tarmac::diagnose
