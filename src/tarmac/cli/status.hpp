// `tarmac status` (and `tarmac` alone): every GPU, its processes and one verdict per problem.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/gpu/activity.hpp"

namespace tarmac::cli {

// Adds the `status` subcommand to `app`; `exit_code` receives its result when it runs.
void add_status_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

struct StatusOptions {
  gpu::ActivityThresholds thresholds;
};

// The activity class of every device of `snapshot`, in order.
[[nodiscard]] std::vector<gpu::Activity> classify_all(const gpu::Snapshot& snapshot,
                                                      const gpu::ActivityThresholds& thresholds);

// The human-readable status of `snapshot` (the GPU table, the process table, the verdicts).
void print_status(std::FILE* out, const gpu::Snapshot& snapshot, const std::vector<gpu::Activity>& classes,
                  bool color);

// Runs status with the given options (also what plain `tarmac` runs).
[[nodiscard]] int run_status(const GlobalOptions& global, const StatusOptions& options = {});

}  // namespace tarmac::cli
