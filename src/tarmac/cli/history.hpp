// `tarmac history` (recorded telemetry on the terminal or as JSON) and `tarmac export` (the same
// as CSV, NDJSON, JSON, nvidia-smi's CSV layout or the classic gpu_utilization.csv layout).
#pragma once

#include <CLI/CLI.hpp>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_history_commands(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace tarmac::cli
