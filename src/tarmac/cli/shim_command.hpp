// `tarmac job-shim SPEC`: the wrapper the agent starts for every job (shim_command.cpp).
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <nlohmann/json.hpp>
#include <string>

#include "tarmac/sched/supervise.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::cli {

void add_shim_command(CLI::App& app, int& exit_code);

// The pieces of the wrapper, declared for their unit tests.
namespace detail {

// What the wrapper runs, read from the spec the agent wrote.
struct ShimJob {
  long long id = 0;
  std::string jobs_dir;  // where <id>.run and <id>.exit go
  util::ProcessSpec what;
  sched::Limits limits;
};

// The spec as the agent writes it (sched/daemon_jobs.cpp); `as_root`: the wrapper runs as root, so
// a job with a uid other than 0 is started as that user. An Invalid error saying what is missing
// or of the wrong type (no job id, a relative jobs_dir, argv that is not a list of strings), so that
// a damaged spec never starts a command nor writes outside the jobs directory.
[[nodiscard]] Result<ShimJob> parse_shim_spec(const nlohmann::json& spec, bool as_root);

}  // namespace detail

}  // namespace tarmac::cli
