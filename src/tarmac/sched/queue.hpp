// The queue's pure policies (docs/scheduler.md "Policies"): the order of waiting jobs, the per-user
// cap, and what GPUs would look like without the backfill jobs on them. No I/O.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tarmac/gpu/model.hpp"
#include "tarmac/sched/job.hpp"

namespace tarmac::sched {

// Waiting normal jobs in the order they may take GPUs: the user with the fewest GPU-milliseconds
// in `usage` first, then the oldest submission, then the lowest id.
[[nodiscard]] std::vector<const Job*> fair_order(std::vector<const Job*> waiting,
                                                 const std::map<uid_t, long long>& usage);

// Whether a job for `n` GPUs fits a user who holds `in_use` GPUs under `cap` (0: no cap).
[[nodiscard]] bool within_cap(unsigned cap, unsigned in_use, unsigned n);

// `snapshot` as it would be if the jobs on the GPUs `uuids` ended: no processes there and all of
// their memory free.
[[nodiscard]] gpu::Snapshot without_jobs_on(const gpu::Snapshot& snapshot, const std::set<std::string>& uuids);

}  // namespace tarmac::sched
