// `tarmac status` (and `tarmac` alone): every GPU, its processes and one verdict per problem.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/gpu/activity.hpp"

namespace tarmac::cli {

// Adds the `status` subcommand to `app`; `exit_code` receives its result when it runs.
void add_status_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

struct StatusOptions {
  gpu::ActivityThresholds thresholds;      // from the configuration ([activity])
  std::optional<long long> holding_after_s;  // --holding-after, over the configuration
};

// Fills options.thresholds from the configuration and the command line; false (the error
// printed) when the configuration cannot be read.
[[nodiscard]] bool resolve_thresholds(const GlobalOptions& global, StatusOptions& options);

// The activity class of every device of `snapshot`, in order.
[[nodiscard]] std::vector<gpu::Activity> classify_all(const gpu::Snapshot& snapshot,
                                                      const gpu::ActivityThresholds& thresholds);

// The human-readable status of `snapshot` (the GPU table, the process table, the verdicts).
void print_status(std::FILE* out, const gpu::Snapshot& snapshot, const std::vector<gpu::Activity>& classes,
                  bool color);

// When CUDA_VISIBLE_DEVICES is set: which GPUs a CUDA program started here sees, as one line
// (and a second one when the variable has a problem). Prints nothing when it is unset.
void print_cuda_visibility(std::FILE* out, const gpu::Snapshot& snapshot, bool color);

// Runs status with the given options (also what plain `tarmac` runs).
[[nodiscard]] int run_status(const GlobalOptions& global, StatusOptions options = {});

}  // namespace tarmac::cli
