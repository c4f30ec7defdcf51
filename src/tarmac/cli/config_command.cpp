#include "tarmac/cli/config_command.hpp"

#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>

#include "tarmac/cli/app.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::cli {

namespace {

struct ConfigOptions {
  bool check = false;
  bool defaults = false;
};

void print_toml(const config::Config& cfg, const std::vector<std::string>& files) {
  fmt::print("# tarmac configuration: the defaults{}\n", files.empty() ? "" : ", then " + fmt::format("{}", fmt::join(files, ", ")));
  fmt::print("# Every key is documented in docs/configuration.md.\n");
  std::string_view section;
  for (const auto& key : config::keys()) {
    if (key.section != section) {
      section = key.section;
      fmt::print("\n[{}]\n", section);
    }
    fmt::print("# {}\n{} = {}\n", key.doc, key.name, config::value_text(cfg, key));
  }
}

int run_config(const GlobalOptions& global, const ConfigOptions& options) {
  config::Loaded loaded;
  if (!options.defaults) {
    auto result = load_config(global);
    if (!result.ok()) return kExitUsage;
    loaded = std::move(*result);
  }
  if (global.json) {
    nlohmann::json values = nlohmann::json::object();
    for (const auto& key : config::keys()) {
      values[fmt::format("{}.{}", key.section, key.name)] =
          nlohmann::json::parse(config::value_text(loaded.config, key));
    }
    fmt::print("{}\n", util::json_text(nlohmann::json{{"files", loaded.files}, {"warnings", loaded.warnings}, {"values", values}}, 2));
    return kExitOk;
  }
  if (options.check) {
    if (loaded.files.empty()) {
      fmt::print("no configuration file (looked for {}): the defaults apply\n",
                 fmt::join(std::vector<std::string>{"/etc/tarmac/tarmac.toml", "$XDG_CONFIG_HOME/tarmac/tarmac.toml"}, " and "));
    } else {
      fmt::print("configuration ok: {}{}\n", fmt::join(loaded.files, ", "),
                 loaded.warnings.empty() ? "" : fmt::format(" ({} warning{})", loaded.warnings.size(),
                                                            loaded.warnings.size() == 1 ? "" : "s"));
    }
    return kExitOk;
  }
  print_toml(loaded.config, loaded.files);
  return kExitOk;
}

}  // namespace

void add_config_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand("config",
                                 "Show the effective configuration as TOML (--defaults: the defaults; --check: "
                                 "validate, exit 2 on an error)");
  auto options = std::make_shared<ConfigOptions>();
  cmd->add_flag("--check", options->check, "Validate the configuration files and say which were read");
  cmd->add_flag("--defaults", options->defaults, "Print the defaults, a starting point for tarmac.toml");
  cmd->callback([&global, &exit_code, options] { exit_code = run_config(global, *options); });
}

}  // namespace tarmac::cli
