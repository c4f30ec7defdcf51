// `tarmac fleet`: every GPU of a fleet, grounded first, from Prometheus or the agents (docs/fleet.md).
#pragma once

#include "tarmac/cli/cli_fwd.hpp"

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_fleet_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace tarmac::cli
