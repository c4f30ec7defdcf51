// `tarmac run [-n N] [--min-free SIZE] [--max-util PCT] [--time D] [--grace D] [--name NAME] [--uuids]
// [--backfill] [--detach] [--wait D] -- CMD ARGS...`: through the agent's queue when an agent
// answers on its socket, else alone: waits until N GPUs can be leased, runs CMD on them in its own
// process group, enforces the wall-clock limit and returns CMD's exit code (docs/scheduler.md).
#pragma once

#include <CLI/CLI.hpp>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_run_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

}  // namespace tarmac::cli
