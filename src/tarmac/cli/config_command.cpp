#include "tarmac/cli/config_command.hpp"

#include <CLI/CLI.hpp>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tarmac/cli/app.hpp"
#include "tarmac/serve/auth.hpp"
#include "tarmac/serve/web_config.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::cli {

namespace {

struct ConfigOptions {
  bool check = false;
  bool defaults = false;
};

struct WebConfigOptions {
  std::vector<std::string> users;
  std::string cert;
  std::string key;
  std::string client_ca;
};

// One line of stdin, without echo when it is a terminal.
std::optional<std::string> read_password(const std::string& user) {
  const bool tty = isatty(STDIN_FILENO) == 1;
  termios saved{};
  if (tty) {
    fmt::print(stderr, "password for {}: ", user);
    tcgetattr(STDIN_FILENO, &saved);
    termios quiet = saved;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
  }
  std::string line;
  const bool got = static_cast<bool>(std::getline(std::cin, line));
  if (tty) {
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
    fmt::print(stderr, "\n");
  }
  if (!got) return std::nullopt;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

// A YAML single-quoted scalar: the only escape is '' for '.
std::string yaml_quoted(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// The agent reads a relative path from the web config file's own directory, which is not where
// this command runs: the paths are written whole.
std::string whole_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const auto whole = std::filesystem::absolute(path, ec);
  return ec ? path : whole.lexically_normal().string();
}

int run_web_config(WebConfigOptions options) {
  options.cert = whole_path(options.cert);
  options.key = whole_path(options.key);
  options.client_ca = whole_path(options.client_ca);
  std::string out = "# The agent's TLS and passwords (docs/fleet.md): http.web_config_file in tarmac.toml.\n";
  if (!options.cert.empty() || !options.key.empty() || !options.client_ca.empty()) {
    out += "tls_server_config:\n";
    if (!options.cert.empty()) out += fmt::format("  cert_file: {}\n", yaml_quoted(options.cert));
    if (!options.key.empty()) out += fmt::format("  key_file: {}\n", yaml_quoted(options.key));
    if (!options.client_ca.empty()) {
      out += fmt::format("  client_ca_file: {}\n  client_auth_type: RequireAndVerifyClientCert\n",
                         yaml_quoted(options.client_ca));
    }
  }
  if (!options.users.empty()) out += "basic_auth_users:\n";
  for (const auto& user : options.users) {
    if (std::any_of(user.begin(), user.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
      fmt::print(stderr, "tarmac: --user {}: a user name cannot hold a control character\n", util::terminal_text(user));
      return kExitUsage;
    }
    const auto password = read_password(user);
    if (!password || password->empty()) {
      fmt::print(stderr, "tarmac: no password for {} on stdin\n", util::terminal_text(user));
      return kExitUsage;
    }
    auto hash = serve::bcrypt_hash(*password);
    if (!hash.ok()) {
      fmt::print(stderr, "tarmac: {}\n", hash.error().message);
      return kExitUsage;
    }
    out += fmt::format("  {}: {}\n", yaml_quoted(user), yaml_quoted(*hash));
  }
  // What is printed must be what the agent reads: checked with the agent's own reader.
  if (auto checked = serve::parse_web_config(out, "/"); !checked.ok()) {
    fmt::print(stderr, "tarmac: {}\n", util::terminal_text(checked.error().message));
    return kExitUsage;
  }
  fmt::print("{}", out);
  return kExitOk;
}

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
  auto web = std::make_shared<WebConfigOptions>();
  auto* web_cmd = cmd->add_subcommand(
      "web-config",
      "Print an http.web_config_file for the agent: TLS files, and users whose passwords (one line each on stdin) "
      "are stored as bcrypt hashes (docs/fleet.md)");
  web_cmd->add_option("--user", web->users, "A user Prometheus logs in as; repeatable (one password line each)");
  web_cmd->add_option("--cert", web->cert, "The server's certificate chain (PEM)");
  web_cmd->add_option("--key", web->key, "The server's private key (PEM, unencrypted)");
  web_cmd->add_option("--client-ca", web->client_ca,
                      "Require client certificates signed by this CA (PEM): RequireAndVerifyClientCert");
  web_cmd->callback([&exit_code, web] { exit_code = run_web_config(*web); });
  cmd->callback([&global, &exit_code, options, web_cmd] {
    if (web_cmd->parsed()) return;
    exit_code = run_config(global, *options);
  });
}

}  // namespace tarmac::cli
