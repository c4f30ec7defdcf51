// `tarmac agent`: records every GPU into the store until stopped (SIGTERM, SIGINT).
#pragma once

#include "tarmac/cli/cli_fwd.hpp"

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_agent_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace tarmac::cli
