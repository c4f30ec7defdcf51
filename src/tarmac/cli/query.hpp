// `tarmac query`: nvidia-smi's --query-gpu, the same field names, CSV text, markers, messages and
// exit codes, plus typed JSON/NDJSON forms.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

// Adds the `query` subcommand to `app`; `exit_code` receives its result when it runs. The
// subcommand parses its own arguments so that nvidia-smi's spellings (-lms, --query-gpu F) work.
void add_query_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

// Runs query with the arguments that follow the word "query".
[[nodiscard]] int run_query(const GlobalOptions& global, const std::vector<std::string>& args);

}  // namespace tarmac::cli
