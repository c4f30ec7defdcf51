// `tarmac watch [-n S]`: status redrawn in place, the `watch -n 1 nvidia-smi` reflex done right.
#pragma once

#include <CLI/CLI.hpp>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_watch_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace tarmac::cli
