// The queue's pure policies (docs/scheduler.md "Policies"): the order of waiting jobs, the per-user
// cap, what GPUs would look like without the backfill jobs on them, and the facts about the jobs
// that the scheduling pass decides on (who holds which GPUs, whose room is coming). No I/O.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tarmac/gpu/model.hpp"
#include "tarmac/sched/job.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/sched/pick.hpp"

namespace tarmac::sched {

// The agent's jobs and leases that have not ended, by id.
using JobsById = std::map<long long, Job>;

// Waiting normal jobs in the order they may take GPUs: the user with the fewest GPU-milliseconds
// in `usage` first, then the oldest submission, then the lowest id.
[[nodiscard]] std::vector<const Job*> fair_order(std::vector<const Job*> waiting,
                                                 const std::map<uid_t, long long>& usage);

// Whether a job for `n` GPUs fits a user who holds `in_use` GPUs under `cap` (0: no cap).
[[nodiscard]] bool within_cap(unsigned cap, unsigned in_use, unsigned n);

// `snapshot` as it would be if the jobs on the GPUs `uuids` ended: no processes there and all of
// their memory free.
[[nodiscard]] gpu::Snapshot without_jobs_on(const gpu::Snapshot& snapshot, const std::set<std::string>& uuids);

// Whether `job` holds its GPUs: a job running or being stopped, or an active lease.
[[nodiscard]] bool holds_gpus(const Job& job);

// The GPUs `uid` holds now (holds_gpus).
[[nodiscard]] unsigned gpus_held_by(const JobsById& jobs, uid_t uid);
// The GPUs `uid`'s leases waiting for backfill to yield ask for: counted with those held against the
// per-user cap, since a waiting lease preempts (without it, eight waiting leases of a user capped at
// one GPU would empty eight GPUs of backfill).
[[nodiscard]] unsigned gpus_awaited_by(const JobsById& jobs, uid_t uid);

// GPUs nobody else may be given, and who holds each: the `live` leases of the lock directory and,
// whatever its files say (a user may remove or replace them), the agent's own running jobs and
// active leases.
[[nodiscard]] LeasedGpus busy_gpus(const std::vector<Lease>& live, const JobsById& jobs);

// The GPUs held by work that no pass may take back: normal jobs running and active leases (not
// backfill jobs, nor jobs already being stopped). Whole GPUs only: a MIG device is no board.
[[nodiscard]] unsigned gpus_held_for_good(const JobsById& jobs);

// The GPUs of running backfill jobs not yet being stopped: what preemption may free.
[[nodiscard]] std::set<std::string> preemptible_gpus(const JobsById& jobs);

// The running backfill jobs on any of `uuids`, each once, in the order of `uuids` (then by id).
[[nodiscard]] std::vector<long long> backfill_on(const JobsById& jobs, const std::vector<std::string>& uuids);

// Backfill work that no job of the scheduler's runs: an LLM server already running that the agent
// sends batches to (backfill's external servers, docs/backfill.md "External servers"), whose
// processes are `pids` (its listener and their descendants). Asked to yield
// (DaemonOptions::yield_external), it unloads its models: its processes leave the GPUs, and the server
// runs on. Only servers that can unload are offered (Ollama's protocol).
struct ExternalBackfill {
  std::string name;
  std::set<unsigned> pids;
};

// The UUIDs of the GPUs on which `snapshot` lists a process of `holder`.
[[nodiscard]] std::set<std::string> gpus_of(const gpu::Snapshot& snapshot, const ExternalBackfill& holder);

// `snapshot` as it would be if `holders` unloaded their models: none of their processes listed, the
// memory NVML gives for each free, and a GPU they leave without any process not busy.
[[nodiscard]] gpu::Snapshot without_processes_of(const gpu::Snapshot& snapshot,
                                                 const std::vector<ExternalBackfill>& holders);

// Room that backfill holds: the GPUs a request would get if it gave them back.
struct BackfillRoom {
  std::vector<unsigned> chosen;          // device indices
  std::vector<std::string> uuids;        // of `chosen`
  std::vector<long long> backfill;       // the running backfill jobs on them (backfill_on)
  std::vector<std::string> external;     // the external servers with a process on them, by name
};

// The room for `request` in the GPUs of the running backfill jobs and of the `external` servers, as
// if the jobs ended and the servers unloaded, with the GPUs in `leased` (busy_gpus, and what a pass
// has claimed) taken; nullopt when even that would not fit.
[[nodiscard]] std::optional<BackfillRoom> room_in_backfill(const gpu::Snapshot& snapshot, const LeasedGpus& leased,
                                                           const JobsById& jobs, const PickRequest& request,
                                                           const std::vector<ExternalBackfill>& external = {});

// Why a request waits for `room`, for people: "waiting for backfill job 7 to yield GPU 0", "waiting
// for backfill server llm to unload GPU 1".
[[nodiscard]] std::string yield_reason(const BackfillRoom& room);

// GPU-milliseconds per uid for fairness: `ended` (the jobs that ended in the window) plus the jobs
// running now, counted up to `now_unix_ms`.
[[nodiscard]] std::map<uid_t, long long> usage_until(const std::map<uid_t, long long>& ended, const JobsById& jobs,
                                                     long long now_unix_ms);

// Whether a request is bound to find no room in this pass because one that asked for no more (as
// many GPUs or fewer, as much free memory or less, as busy GPUs or busier) already found none.
[[nodiscard]] bool no_room_for(const PickRequest& request, const std::vector<PickRequest>& found_none);

// Whether backfill jobs are being stopped to make room for job `id`.
[[nodiscard]] bool room_coming(const JobsById& jobs, long long id);

// The longest --grace of the jobs stopping to make room for job `id`: how long its room may take.
[[nodiscard]] long long longest_grace_for(const JobsById& jobs, long long id);

// Whether a GPU idle since `idle_since_ms` (0: not idle) has been idle for `needed_ms` at `now_ms`
// (the same clock), as backfill requires.
[[nodiscard]] bool idle_for(long long idle_since_ms, long long now_ms, long long needed_ms);

}  // namespace tarmac::sched
