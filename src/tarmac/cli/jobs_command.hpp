// The agent's queue from the command line (docs/scheduler.md "Agent mode"): `tarmac jobs`,
// `cancel`, `reserve`, `release`, `extend`, and the client half of an agent-mode `tarmac run`.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/sched/wire.hpp"

namespace tarmac::cli {

void add_jobs_commands(CLI::App& app, const GlobalOptions& global, int& exit_code);

// The agent's socket path for this configuration (TARMAC_SOCKET, scheduler.socket, the default).
[[nodiscard]] std::string agent_socket(const GlobalOptions& global);

// Sends one request (with `fds`) on a new connection and reads the answer, waiting up to
// `answer_timeout_ms` for it. An error when no agent answers (its message names the socket). The
// connection is returned for the events that follow.
struct AgentAnswer {
  nlohmann::json body;
  sched::Connection conn;
};
[[nodiscard]] Result<AgentAnswer> ask_agent(const std::string& socket, const nlohmann::json& request,
                                            const std::vector<int>& fds = {}, int answer_timeout_ms = 30000);

// The exit code for a failed answer ({"ok": false, "code": ...}): 1 busy, 3 io, else 2.
[[nodiscard]] int exit_code_for(const nlohmann::json& failure);

// A failed answer's words ({"ok": false, "error": ...}) for a terminal: a refusal can quote other
// users' text (who holds a GPU, a job's name) over several lines, so each line is escaped.
[[nodiscard]] std::string failure_text(const nlohmann::json& failure);

// A job's status for `run`'s exit: its exit code, or 1 when it ended without one.
[[nodiscard]] int job_exit_status(const nlohmann::json& job);

// The pieces of the queue commands' output, declared for their unit tests. Answers come from a
// socket: a field of another type than expected is read as missing, never thrown over.
namespace detail {

[[nodiscard]] std::string gpu_list(const nlohmann::json& job);      // "0,2"
[[nodiscard]] std::string command_text(const nlohmann::json& job);  // argv joined with spaces
// The TIME column at `now`: "ran 2m", "waited 12s", a lease's "ends in 1h"; "" for an expired lease.
[[nodiscard]] std::string time_text(const nlohmann::json& job, long long now);
// A job or lease id as typed: a whole positive number.
[[nodiscard]] std::optional<long long> parse_id(const std::string& text);
// `tarmac jobs`: the table of jobs (names, commands and users shown escaped), or "no jobs or leases".
void print_jobs(std::FILE* out, const nlohmann::json& jobs, long long now, bool color);
// `reserve` and `extend`: the lease and the line to export.
[[nodiscard]] std::string lease_text(const nlohmann::json& job, long long now);

}  // namespace detail

}  // namespace tarmac::cli
