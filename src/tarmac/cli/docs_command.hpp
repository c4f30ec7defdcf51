// `tarmac completion bash|zsh|fish` and `tarmac man`: shell completions and the manual page, made
// from the command line's own definitions (every subcommand, option and help text CLI11 knows), so
// that they cannot drift from it. The build writes them for the install rules (cmake/install.cmake).
#pragma once

#include <string>

#include "tarmac/cli/cli_fwd.hpp"

namespace tarmac::cli {

// Adds `completion` and `man`; they describe the App they are added to, as it is when they run.
void add_docs_commands(CLI::App& app, int& exit_code);

namespace detail {

// The scripts and the page for `app` (its visible subcommands, at any depth, and their options).
[[nodiscard]] std::string bash_completion(const CLI::App& app);
[[nodiscard]] std::string zsh_completion(const CLI::App& app);
[[nodiscard]] std::string fish_completion(const CLI::App& app);
[[nodiscard]] std::string man_page(const CLI::App& app, const std::string& version);

// Text as roff reads it literally: backslashes escaped, a line's leading '.' or '\'' defused.
[[nodiscard]] std::string roff_text(const std::string& text);

}  // namespace detail

}  // namespace tarmac::cli
