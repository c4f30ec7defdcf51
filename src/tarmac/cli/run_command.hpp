// `tarmac run [-n N] [--min-free SIZE] [--max-util PCT] [--time D] [--grace D] [--name NAME] [--uuids]
// [--wait D] -- CMD ARGS...`, agentless: waits until N GPUs can be leased, runs CMD on them in its
// own process group, enforces the wall-clock limit and returns CMD's exit code (docs/scheduler.md).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_run_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

// Where execve would find `name`: itself when it holds a '/', else the first executable regular
// file of that name in `path` (a PATH value; empty entries mean the current directory).
[[nodiscard]] std::optional<std::string> resolve_command(const std::string& name, const std::string& path);

// A shell's exit status for a wait(2) status: the exit code, or 128 + the signal.
[[nodiscard]] int shell_status(int wait_status);

}  // namespace tarmac::cli
