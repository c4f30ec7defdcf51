// The agent's queue from the command line (docs/scheduler.md "Agent mode"): `tarmac jobs`,
// `cancel`, `reserve`, `release`, `extend`, the client half of an agent-mode `tarmac run`, and the
// job wrapper the agent starts, `tarmac job-shim`.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/sched/wire.hpp"

namespace tarmac::cli {

void add_jobs_commands(CLI::App& app, const GlobalOptions& global, int& exit_code);
void add_shim_command(CLI::App& app, int& exit_code);

// The agent's socket path for this configuration (TARMAC_SOCKET, scheduler.socket, the default).
[[nodiscard]] std::string agent_socket(const GlobalOptions& global);

// Sends one request (with `fds`) on a new connection and reads the answer. An error when no agent
// answers (its message names the socket). The connection is returned for the events that follow.
struct AgentAnswer {
  nlohmann::json body;
  sched::Connection conn;
};
[[nodiscard]] Result<AgentAnswer> ask_agent(const std::string& socket, const nlohmann::json& request,
                                            const std::vector<int>& fds = {});

// The exit code for a failed answer ({"ok": false, "code": ...}): 1 busy, 3 io, else 2.
[[nodiscard]] int exit_code_for(const nlohmann::json& failure);

// A job's status for `run`'s exit: its exit code, or 1 when it ended without one.
[[nodiscard]] int job_exit_status(const nlohmann::json& job);

}  // namespace tarmac::cli
