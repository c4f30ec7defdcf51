// `tarmac report`: the grounded-fleet report over recorded telemetry (text, --json, --html FILE).
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <string>

#include "tarmac/cli/context.hpp"
#include "tarmac/report/report.hpp"

namespace tarmac::cli {

void add_report_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

namespace detail {

// The options --price (US dollars per GPU-hour, "" for none) and -i (GPU indices) give; an
// Invalid error naming the flag and its value when one is not what it should be.
[[nodiscard]] Result<report::ReportOptions> report_options(const std::string& price, const std::string& gpus);

}  // namespace detail

}  // namespace tarmac::cli
