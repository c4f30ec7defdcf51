// `tarmac alerts`: --check evaluates the alert rules once from the store (for cron: exit 1 while
// any fires); --prometheus-rules writes them as a Prometheus alerting-rules file (docs/alerts.md).
#pragma once

#include <CLI/CLI.hpp>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_alerts_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace tarmac::cli
