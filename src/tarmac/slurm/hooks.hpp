// `tarmac slurm prolog` and `epilog` (docs/slurm.md): what slurmd runs as root before and after
// every job on the node. The prolog refuses a job a GPU that is lost, faulty, or holds memory of a
// process that belongs to no job (its non-zero exit makes Slurm drain the node and requeue the
// job), records the job in the HPC job mapping directory (dcgm-exporter's hpc_job), and leases the
// GPUs to it so that agentless `tarmac pick`/`run` never hand them out. The epilog ends what the
// job's user left on the job's GPUs, through pidfds checked for identity, confirms through the
// driver that the memory is free, and takes the mapping and the leases back. Neither calls a Slurm
// command: everything comes from slurmd's environment, NVML and /proc.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tarmac/gpu/backend.hpp"
#include "tarmac/host/job_map.hpp"
#include "tarmac/host/proc_reader.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::slurm {

// The job, as slurmd's environment describes it to its Prolog and Epilog.
struct JobEnv {
  std::string job_id;         // SLURM_JOB_ID
  uid_t uid = 0;              // SLURM_JOB_UID
  std::string user;           // SLURM_JOB_USER when it is a plain name, else the uid as text
  std::string partition;      // SLURM_JOB_PARTITION when it is a plain name, else ""
  std::vector<unsigned> gpus;  // SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES (indices); empty: no GPUs
};

// Reads the job from `env` (the variables above). Fails naming the variable that is missing or
// malformed; a GPU list of UUIDs or MIG devices is refused (the indices are what the mapping uses).
[[nodiscard]] Result<JobEnv> read_job_env(const std::map<std::string, std::string>& env);

// The Slurm jobs root's prolog mapped (the job mapping directory): the only jobs a process's claim
// (its SLURM_JOB_ID, a cgroup named job_N, both in the user's hands) is believed for.
using MappedJobs = std::set<std::string>;
[[nodiscard]] MappedJobs mapped_jobs(const host::JobMap& map);

// Why GPU `d` cannot be given to `job`: lost, a fault, or memory held by a process of no Slurm job
// (whose job cannot be read, that has none, or that claims one no prolog mapped); nullopt when it
// is fit. Processes of other mapped jobs are the sharing the site configured (shards, MPS).
[[nodiscard]] std::optional<std::string> unfit_reason(const gpu::Device& d, const std::string& job,
                                                     const MappedJobs& mapped);

// The processes on `d` the epilog ends: the job's user's (never root's unless they claim this job),
// claiming this job, or (when `job_was_mapped`: its prolog ran) no job or one no prolog mapped.
// Never another mapped job's, never another user's, never one whose job cannot be read.
[[nodiscard]] std::vector<const gpu::GpuProcess*> leftovers(const gpu::Device& d, const JobEnv& job,
                                                           const MappedJobs& mapped, bool job_was_mapped);

struct HookOptions {
  std::string job_map_dir;   // "" for none
  std::string lock_dir;      // the scheduler's lease directory; "" for no leases
  long long max_hold_ms = 0;  // scheduler.max_hold, for the leases read there
  long long grace_ms = 3000;  // epilog: SIGTERM to SIGKILL
  long long free_wait_ms = 5000;  // epilog: how long the driver is asked for the memory to be free
};

// What a hook did: its exit code for slurmd, and its lines (the first says why when it fails).
struct HookResult {
  int exit_code = 0;
  std::vector<std::string> lines;
};

[[nodiscard]] HookResult run_prolog(gpu::Backend& backend, const JobEnv& job, const HookOptions& options);
[[nodiscard]] HookResult run_epilog(gpu::Backend& backend, const host::ProcReader& proc, const JobEnv& job,
                                    const HookOptions& options);

}  // namespace tarmac::slurm
