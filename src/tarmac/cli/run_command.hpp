// `tarmac run [-n N] [--min-free SIZE] [--max-util PCT] [--time D] [--grace D] [--name NAME] [--uuids]
// [--backfill] [--detach] [--wait D] -- CMD ARGS...`: through the agent's queue when an agent
// answers on its socket, else alone: waits until N GPUs can be leased, runs CMD on them in its own
// process group, enforces the wall-clock limit and returns CMD's exit code (docs/scheduler.md).
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/sched/supervise.hpp"

namespace tarmac::cli {

void add_run_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

// The pieces of `run`, declared for their unit tests.
namespace detail {

struct RunLimits {
  sched::Limits job;                // --time (none: no limit) and --grace
  std::optional<long long> wait_ms; // --wait (none: forever)
};

// --time (more than 0), --grace and --wait (0 or more) as typed; an Invalid error naming the flag
// and its value otherwise.
[[nodiscard]] Result<RunLimits> parse_limits(const std::string& time, const std::string& grace, const std::string& wait);

// The first argument, environment entry or working directory that is not valid UTF-8 (which the
// queue's JSON cannot carry exactly): what it is ("argument 2", "the environment variable LANG")
// and its bytes.
[[nodiscard]] std::optional<std::pair<std::string, std::string>> first_non_utf8(const std::vector<std::string>& argv,
                                                                              const std::vector<std::string>& env,
                                                                              const std::string& cwd);

// Why the agent refused a submission: its escaped words, or the line it sent when that was not JSON.
[[nodiscard]] std::string refusal_text(const nlohmann::json& answer, const std::string& line);

// How `run` ends for job `id` that has ended: its exit status, with a line to `err` when it never
// started (cancelled: 1) or was lost (3).
[[nodiscard]] int ended_status(const nlohmann::json& job, long long id, std::FILE* err);

}  // namespace detail

}  // namespace tarmac::cli
