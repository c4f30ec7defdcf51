// `tarmac report`: the grounded-fleet report over recorded telemetry (text, --json, --html FILE).
#pragma once

#include <CLI/CLI.hpp>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_report_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace tarmac::cli
