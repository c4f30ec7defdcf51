// `tarmac status` (and `tarmac` alone): every GPU, its processes and one verdict per problem.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/diagnose/verdicts.hpp"
#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/model.hpp"

namespace tarmac::cli {

// Adds the `status` subcommand to `app`; `exit_code` receives its result when it runs.
void add_status_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

// Where the scheduler's leases are (scheduler.lock_dir, scheduler.max_hold): status names who holds
// a reserved GPU. An empty dir reads none.
struct LeaseFiles {
  std::string dir;
  long long max_hold_ms = 0;
};

struct StatusOptions {
  gpu::ActivityThresholds thresholds;      // from the configuration ([activity])
  std::optional<long long> holding_after_s;  // --holding-after, over the configuration
  bool direct = false;                     // --direct: NVML, never the agent
  std::string agent_socket;                // the agent's socket (scheduler.socket); "" for none
  LeaseFiles leases;                       // from the configuration
};

// Fills options.thresholds and agent_socket from the configuration and the command line (no
// socket with --direct or --holding-after: classes by other thresholds than the agent's); false
// (the error printed) when the configuration cannot be read.
[[nodiscard]] bool resolve_thresholds(const GlobalOptions& global, StatusOptions& options);

// The activity class of every device of `snapshot`, in order.
[[nodiscard]] std::vector<gpu::Activity> classify_all(const gpu::Snapshot& snapshot,
                                                      const gpu::ActivityThresholds& thresholds);

// The class of every MIG device of every device of `snapshot` (gpu::classify_mig), by device.
using MigClasses = std::vector<std::vector<gpu::MigActivity>>;
[[nodiscard]] MigClasses classify_mig_all(const gpu::Snapshot& snapshot, const gpu::ActivityThresholds& thresholds);

// A backfill batch running on a GPU (docs/backfill.md), as the agent's status answer names it.
using GpuBackfill = diagnose::Backfill;

// One look at the GPUs, classified: what status prints. Read from NVML here, or from the agent's
// live view (status_source.hpp), which adds what only watching over time knows.
struct StatusView {
  gpu::Snapshot snapshot;
  std::vector<gpu::Activity> classes;  // per device
  MigClasses mig_classes;
  // From the agent only (empty otherwise), per device: since when it is in its class, and since
  // when its processes have been at 0 % (the snapshot's clock, unix ms).
  std::vector<std::optional<long long>> class_since_unix_ms;
  std::vector<std::optional<long long>> held_idle_since_unix_ms;
  std::optional<long long> agent_age_ms;  // set when the agent answered: how old its sample was
  // Per device: the scheduler's lease on it (label "" for none); empty when the leases were not read.
  std::vector<diagnose::GpuLease> leases;
  // Per device, per MIG device: the lease on that MIG device (a job given one slice); empty as above.
  std::vector<std::vector<diagnose::GpuLease>> mig_leases;
  // From the agent only (empty otherwise), per device: the backfill batches sent to it (a server
  // may be sent several at once).
  std::vector<std::vector<GpuBackfill>> backfill;
};

// A view of `snapshot` read here: classified from this one look.
[[nodiscard]] StatusView view_of(gpu::Snapshot snapshot, const gpu::ActivityThresholds& thresholds);

// The human-readable status (the GPU table with each MIG device under its GPU, the process table,
// the verdicts).
void print_status(std::FILE* out, const StatusView& view, bool color);
void print_status(std::FILE* out, const gpu::Snapshot& snapshot, const std::vector<gpu::Activity>& classes,
                  bool color, const MigClasses& mig_classes = {});

// When CUDA_VISIBLE_DEVICES is set: which GPUs a CUDA program started here sees, as one line
// (and a second one when the variable has a problem). Prints nothing when it is unset.
void print_cuda_visibility(std::FILE* out, const gpu::Snapshot& snapshot, bool color);

// Runs status with the given options (also what plain `tarmac` runs).
[[nodiscard]] int run_status(const GlobalOptions& global, StatusOptions options = {});

// The pieces of status's output, declared for their unit tests.
namespace detail {

// Cells of the GPU table; "-" for a reading that is missing.
[[nodiscard]] std::string memory_cell(const gpu::Device& device);  // "[####------] 15.2/40.0 GiB"
[[nodiscard]] std::string power_cell(const gpu::Device& device);   // "250/400 W", "-/400 W", "250 W"
[[nodiscard]] std::string events_cell(const gpu::Device& device);  // the clock events but idle, ","
[[nodiscard]] std::string short_bus_id(const std::optional<std::string>& id);  // "07:00.0"
// The CONTAINER/JOB cell of a process: "pod 0123abcd", "docker 0123456789ab", "slurm 42".
[[nodiscard]] std::string container_cell(const host::ProcessInfo& info);

// `tarmac status --json`: the snapshot, each GPU with its class, what a CUDA program sees under
// `cuda_visible` (CUDA_VISIBLE_DEVICES, ordered by `cuda_order`; null when unset), the verdicts.
[[nodiscard]] nlohmann::json status_json(const gpu::Snapshot& snapshot, const std::vector<gpu::Activity>& classes,
                                         const std::optional<std::string>& cuda_visible,
                                         const std::optional<std::string>& cuda_order,
                                         const MigClasses& mig_classes = {});
// The variable `name` of this process's environment, or nullopt when it is not set.
[[nodiscard]] std::optional<std::string> env(const char* name);

// The verdicts under the table: diagnose::verdicts', a reserved-idle one per leased, unused MIG
// device, and one per backfill batch the agent names.
[[nodiscard]] std::vector<diagnose::Verdict> status_verdicts(const StatusView& view);

// The same for a view: with "source" ("agent" or "nvml") and, from the agent, each GPU's
// "activity_since_unix_ms" and "held_idle_since_unix_ms" and the sample's "agent_sample_age_ms".
[[nodiscard]] nlohmann::json status_json(const StatusView& view, const std::optional<std::string>& cuda_visible,
                                         const std::optional<std::string>& cuda_order);

}  // namespace detail

}  // namespace tarmac::cli
