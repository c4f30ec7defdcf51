// `tarmac top`: the interactive view of GPUs and their processes (docs/top.md), over this machine
// or agents' JSON APIs; --once prints one frame.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

// Adds the `top` subcommand to `app`; `exit_code` receives its result when it runs.
void add_top_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace tarmac::cli
