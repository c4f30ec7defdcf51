// `tarmac config`: the effective configuration as TOML (or the defaults), and `--check`.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_config_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

// What `config` prints, declared for its unit tests.
namespace detail {

// Every key with its documentation and value, as a TOML file that reads back to `cfg`; a
// header names the files it came from.
[[nodiscard]] std::string config_toml(const config::Config& cfg, const std::vector<std::string>& files);
// `config --json`: the files, their warnings and every value, typed.
[[nodiscard]] nlohmann::json config_json(const config::Loaded& loaded);
// `config --check`: which files were read (and how many warnings), or that the defaults apply.
[[nodiscard]] std::string config_check_text(const config::Loaded& loaded);

}  // namespace detail

}  // namespace tarmac::cli
