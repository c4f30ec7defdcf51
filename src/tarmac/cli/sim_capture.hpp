// `tarmac sim capture [-o FILE] [--keep-commands]` (docs/simulator.md "Capturing a machine"): the
// GPUs this machine has, as a simulator scenario a user can attach to a bug report and anyone can
// replay with `tarmac sim --scenario FILE`. What NVML answered becomes the scenario's keys; what it
// did not support is left out, which is how a scenario says "not supported".
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <string>

#include "tarmac/cli/context.hpp"
#include "tarmac/gpu/model.hpp"

namespace tarmac::cli {

// Adds `capture` under the `sim` subcommand.
void add_sim_capture_command(CLI::App& sim, const GlobalOptions& global, int& exit_code);

namespace detail {

// The scenario text of `snapshot` (read with every value group, processes and the topology).
// Command lines become "<program> [args removed]" unless `keep_commands`; users are never written
// (the replay runs its processes as whoever replays it).
[[nodiscard]] std::string scenario_of(const gpu::Snapshot& snapshot, bool keep_commands, const std::string& host);

}  // namespace detail

}  // namespace tarmac::cli
