// `tarmac config`: the effective configuration as TOML (or the defaults), and `--check`.
#pragma once

#include <CLI/CLI.hpp>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_config_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace tarmac::cli
