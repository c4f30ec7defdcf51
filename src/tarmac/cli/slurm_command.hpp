// `tarmac slurm prolog` and `tarmac slurm epilog`: slurmd's Prolog and Epilog (docs/slurm.md).
#pragma once

#include "tarmac/cli/cli_fwd.hpp"

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_slurm_commands(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace tarmac::cli
