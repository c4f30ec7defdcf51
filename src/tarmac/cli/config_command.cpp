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

int run_config(const GlobalOptions& global, const ConfigOptions& options) {
  config::Loaded loaded;
  if (!options.defaults) {
    auto result = load_config(global);
    if (!result.ok()) return kExitUsage;
    loaded = std::move(*result);
  }
  if (global.json) {
    fmt::print("{}\n", util::json_text(detail::config_json(loaded), 2));
  } else if (options.check) {
    fmt::print("{}", detail::config_check_text(loaded));
  } else {
    fmt::print("{}", detail::config_toml(loaded.config, loaded.files));
  }
  return kExitOk;
}

}  // namespace

namespace detail {

std::string config_toml(const config::Config& cfg, const std::vector<std::string>& files) {
  // Values and file names are shown, never obeyed: value_text writes control characters as \u
  // escapes, and terminal_text turns C1 controls and bidirectional overrides into \u escapes too,
  // which TOML reads back as the same characters.
  std::string out = fmt::format("# tarmac configuration: the defaults{}\n",
                                files.empty() ? "" : ", then " + util::terminal_text(fmt::format("{}", fmt::join(files, ", "))));
  out += "# Every key is documented in docs/configuration.md.\n";
  std::string_view section;
  for (const auto& key : config::keys()) {
    if (key.section != section) {
      section = key.section;
      out += fmt::format("\n[{}]\n", section);
    }
    out += fmt::format("# {}\n{} = {}\n", key.doc, key.name, util::terminal_text(config::value_text(cfg, key)));
  }
  // Each configured server: its name is a letters-and-digits word (config refuses any other).
  for (const auto& [name, server] : cfg.backfill.servers) {
    out += fmt::format("\n[backfill.server.{}]\n", name);
    for (const auto& key : config::server_keys()) {
      if (!config::server_key_applies(server, key)) continue;
      out += fmt::format("# {}\n{} = {}\n", key.doc, key.name,
                         util::terminal_text(config::server_value_text(server, key)));
    }
  }
  return out;
}

nlohmann::json config_json(const config::Loaded& loaded) {
  nlohmann::json values = nlohmann::json::object();
  for (const auto& key : config::keys()) {
    values[fmt::format("{}.{}", key.section, key.name)] = nlohmann::json::parse(config::value_text(loaded.config, key));
  }
  for (const auto& [name, server] : loaded.config.backfill.servers) {
    for (const auto& key : config::server_keys()) {
      values[fmt::format("backfill.server.{}.{}", name, key.name)] =
          nlohmann::json::parse(config::server_value_text(server, key));
    }
  }
  return nlohmann::json{{"files", loaded.files}, {"warnings", loaded.warnings}, {"values", values}};
}

std::string config_check_text(const config::Loaded& loaded) {
  if (loaded.files.empty()) {
    return fmt::format("no configuration file (looked for {}): the defaults apply\n",
                       fmt::join(std::vector<std::string>{"/etc/tarmac/tarmac.toml", "$XDG_CONFIG_HOME/tarmac/tarmac.toml"},
                                 " and "));
  }
  return fmt::format("configuration ok: {}{}\n", util::terminal_text(fmt::format("{}", fmt::join(loaded.files, ", "))),
                     loaded.warnings.empty() ? "" : fmt::format(" ({} warning{})", loaded.warnings.size(),
                                                                loaded.warnings.size() == 1 ? "" : "s"));
}

}  // namespace detail

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
