// The one translation unit of the product that includes toml++ (header-only).
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

#include "tarmac/config/config.hpp"
#include "tarmac/config/keys.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <unistd.h>

#include "tarmac/alerts/sinks.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/trusted_file.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::config {

namespace detail {

Key text_key(std::string_view section, std::string_view name, Kind kind, std::string_view doc,
             std::vector<std::string_view> choices, std::function<void(Config&, const std::string&)> set,
             std::function<std::string(const Config&)> get,
             std::function<std::optional<std::string>(const std::string&)> check) {
  Key k{{section, name, kind, doc}, 0,      0, nullptr, nullptr, std::move(set), std::move(get), std::move(choices),
        std::move(check)};
  return k;
}

bool is_text(const Key& k) {
  return k.info.kind == Kind::Path || k.info.kind == Kind::Choice || k.info.kind == Kind::Address ||
         k.info.kind == Kind::Text;
}

// A value as the file has it: a string quoted so that both TOML and JSON read it back, control
// characters (a "\u001b" written in the file) as \u escapes, so that `tarmac config` neither prints
// them raw nor writes what --json cannot parse; a number in its kind's unit.
std::string quoted_text(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7F) {
      quoted += fmt::format("\\u{:04x}", byte);
      continue;
    }
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string number_text(Kind kind, long long v) {
  switch (kind) {
    case Kind::Duration: return fmt::format("\"{}\"", util::format_duration_ms(v));
    case Kind::Size: {
      const auto bytes = static_cast<std::uint64_t>(v);
      if (bytes % util::kGiB == 0) return fmt::format("\"{}GiB\"", bytes / util::kGiB);
      if (bytes % util::kMiB == 0) return fmt::format("\"{}MiB\"", bytes / util::kMiB);
      return fmt::format("\"{}KiB\"", bytes / 1024);
    }
    case Kind::Bool: return v != 0 ? "true" : "false";
    default: return std::to_string(v);
  }
}

}  // namespace detail

namespace {

using detail::is_text;
using detail::Key;
using detail::number_text;
using detail::quoted_text;
using detail::text_key;
using detail::find_server_key;
using detail::fixed_table;
using detail::ServerKey;
using detail::check_server;
using detail::url_port;
using detail::valid_server_name;

// A configuration file is a few kilobytes; a larger one is a mistake or an attack.
constexpr std::size_t kMaxFileBytes = 1 << 20;

// Keys an older tarmac read, with the key that now decides what they did.
struct RetiredKey {
  std::string_view section;
  std::string_view name;
  std::string_view instead;
};
constexpr RetiredKey kRetired[] = {
    // One definition of starved (gpu::is_starved): the alert follows the class.
    {"alerts", "starvation_util_pct", "activity.busy_util_pct"},
    {"alerts", "starvation_mem_pct", "activity.starved_mem_pct"},
};

const RetiredKey* find_retired(std::string_view section, std::string_view name) {
  for (const auto& r : kRetired) {
    if (r.section == section && r.name == name) return &r;
  }
  return nullptr;
}

const char* kind_example(Kind kind) {
  switch (kind) {
    case Kind::Percent: return "an integer percentage, like 30";
    case Kind::Celsius: return "an integer in degrees Celsius, like 85";
    case Kind::Count: return "a whole number, like 4";
    case Kind::Duration: return "a duration, like \"500ms\", \"3s\" or \"10m\" (or a number of seconds)";
    case Kind::Size: return "a size with its unit, like \"2GiB\" or \"512MiB\"";
    case Kind::Path: return "a path in quotes, like \"/var/lib/tarmac\"";
    case Kind::Choice: return "one of the listed words, in quotes";
    case Kind::Address: return "\"host:port\" in quotes, like \"127.0.0.1:9478\" or \"[::1]:9478\", or \"\"";
    case Kind::Text: return "a string in quotes";
    case Kind::Bool: return "true or false";
  }
  return "a value";
}

// The value of `node` in the key's unit, or why it cannot be.
Result<long long> read_value(const toml::node& node, const Key& k) {
  std::optional<long long> value;
  switch (k.info.kind) {
    case Kind::Percent:
    case Kind::Celsius:
    case Kind::Count:
      if (const auto* i = node.as_integer()) value = i->get();
      break;
    case Kind::Bool:
      if (const auto* b = node.as_boolean()) value = b->get() ? 1 : 0;
      break;
    case Kind::Duration:
      if (const auto* s = node.as_string()) {
        value = util::parse_duration_ms(s->get());
      } else if (const auto* i = node.as_integer()) {
        if (i->get() >= 0) value = i->get() * 1000;
      } else if (const auto* f = node.as_floating_point()) {
        value = util::parse_duration_ms(fmt::format("{}", f->get()));
      }
      break;
    case Kind::Path:
    case Kind::Choice:
    case Kind::Address:
    case Kind::Text: break;  // text keys: read_text
    case Kind::Size:
      if (const auto* s = node.as_string()) {
        const std::string text = s->get();
        // A bare number would be ambiguous (bytes? MiB?): sizes carry their unit.
        if (text.find_first_not_of("0123456789. ") != std::string::npos) {
          if (auto bytes = util::parse_size_bytes(text)) value = static_cast<long long>(*bytes);
        }
      }
      break;
  }
  if (!value) return make_error(Error::Code::Invalid, fmt::format("expected {}", kind_example(k.info.kind)));
  if (*value < k.min || *value > k.max) {
    const auto show = [&](long long v) {
      switch (k.info.kind) {
        case Kind::Duration: return util::format_duration_ms(v);
        case Kind::Size: return util::format_bytes(static_cast<std::uint64_t>(v));
        default: return std::to_string(v);
      }
    };
    return make_error(Error::Code::Invalid, fmt::format("{} is out of range ({} to {})", show(*value), show(k.min),
                                                        show(k.max)));
  }
  return *value;
}

// The value of a text key, or why it cannot be.
Result<std::string> read_text(const toml::node& node, const Key& k) {
  const auto* s = node.as_string();
  if (s == nullptr) {
    if (k.info.kind == Kind::Choice) {
      return make_error(Error::Code::Invalid, fmt::format("expected one of \"{}\"", fmt::join(k.choices, "\", \"")));
    }
    return make_error(Error::Code::Invalid, fmt::format("expected {}", kind_example(k.info.kind)));
  }
  std::string text = s->get();
  if (k.info.kind == Kind::Choice && std::find(k.choices.begin(), k.choices.end(), text) == k.choices.end()) {
    return make_error(Error::Code::Invalid,
                      fmt::format("'{}' is not one of \"{}\"", text, fmt::join(k.choices, "\", \"")));
  }
  if (k.info.kind == Kind::Path && !text.empty() && text.front() != '/') {
    return make_error(Error::Code::Invalid, fmt::format("'{}' is not an absolute path", text));
  }
  if (k.info.kind == Kind::Address && !text.empty() && !split_address(text)) {
    return make_error(Error::Code::Invalid,
                      fmt::format("'{}' is not host:port with a port from 1 to 65535", text));
  }
  if (k.check) {
    if (auto why = k.check(text)) return make_error(Error::Code::Invalid, *why);
  }
  return text;
}

const Key* find_key(std::string_view section, std::string_view name) {
  for (const auto& k : fixed_table()) {
    if (k.info.section == section && k.info.name == name) return &k;
  }
  return nullptr;
}

bool known_section(std::string_view section) {
  for (const auto& k : fixed_table()) {
    if (k.info.section == section) return true;
  }
  return false;
}

// Rules that tie two keys: the owner is warned before the holder is ended, never after. A
// warn_after nobody set follows a short idle_for (half of it) instead of refusing the file.
Result<void> check_reaper(reap::ReaperConfig& reaper, bool warn_after_set, const std::string& file) {
  if (reaper.warn_after_ms < reaper.idle_for_ms) return {};
  if (!warn_after_set) {
    reaper.warn_after_ms = reaper.idle_for_ms / 2;
    return {};
  }
  return make_error(Error::Code::Invalid,
                    fmt::format("{}: reaper.warn_after ({}) must be less than reaper.idle_for ({}): the owner is warned "
                                "before the agent ends the holder",
                                file, util::format_duration_ms(reaper.warn_after_ms),
                                util::format_duration_ms(reaper.idle_for_ms)));
}

// A managed server's `command`: a non-empty array of strings, its program an absolute path (the agent's
// PATH is not the user's, and no shell reads it).
Result<std::vector<std::string>> read_command(const toml::node& value, const std::string& file, const std::string& name) {
  const auto at = value.source().begin;
  const auto bad = [&](std::string_view why) {
    return make_error(Error::Code::Invalid,
                      fmt::format("{}:{}:{}: backfill.server.{}.command: {}", file, at.line, at.column, name, why));
  };
  const auto* array = value.as_array();
  if (array == nullptr || array->empty() || array->size() > 256) return bad("expected an array of 1 to 256 strings");
  std::vector<std::string> argv;
  for (const auto& word : *array) {
    const auto* text = word.as_string();
    if (text == nullptr || text->get().size() > 4096 || text->get().find('\0') != std::string::npos) {
      return bad("each word must be a string (at most 4096 bytes)");
    }
    argv.push_back(text->get());
  }
  if (argv.front().empty() || argv.front().front() != '/') return bad("the program (its first word) must be an absolute path");
  return argv;
}

// A server's `models`: an array of 1 to 1024 model names, each one word of printable ASCII not
// starting with '-' (what submit accepts as --model).
Result<std::vector<std::string>> read_models(const toml::node& value, const std::string& file, const std::string& name) {
  const auto at = value.source().begin;
  const auto bad = [&](std::string_view why) {
    return make_error(Error::Code::Invalid,
                      fmt::format("{}:{}:{}: backfill.server.{}.models: {}", file, at.line, at.column, name, why));
  };
  const auto* array = value.as_array();
  if (array == nullptr || array->empty() || array->size() > 1024) return bad("expected an array of 1 to 1024 strings");
  std::vector<std::string> models;
  for (const auto& word : *array) {
    const auto* text = word.as_string();
    const bool printable = text != nullptr && std::all_of(text->get().begin(), text->get().end(), [](char c) {
      return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
    });
    if (!printable || text->get().empty() || text->get().size() > 1024 || text->get().front() == '-') {
      return bad("each model must be a string of printable ASCII without spaces, not starting with '-'");
    }
    models.push_back(text->get());
  }
  return models;
}

// One [backfill.server.NAME] table over `server`; an error names the line, a warning an unknown key.
Result<void> parse_server(const toml::table& table, const std::string& file, const std::string& name,
                          backfill::ServerConfig& server, std::vector<std::pair<std::size_t, std::string>>& found) {
  for (const auto& [key, value] : table) {
    const auto at = value.source().begin;
    if (key.str() == "command") {
      TARMAC_TRY_ASSIGN(server.command, read_command(value, file, name));
      continue;
    }
    if (key.str() == "models") {
      TARMAC_TRY_ASSIGN(server.models, read_models(value, file, name));
      continue;
    }
    const ServerKey* k = find_server_key(key.str());
    if (k == nullptr) {
      found.emplace_back(key.source().begin.line, fmt::format("{}:{}: unknown key 'backfill.server.{}.{}' (ignored)",
                                                              file, key.source().begin.line, name, key.str()));
      continue;
    }
    const auto bad = [&](const Error& e) {
      return make_error(Error::Code::Invalid, fmt::format("{}:{}:{}: backfill.server.{}.{}: {}", file, at.line,
                                                          at.column, name, key.str(), e.message));
    };
    if (is_text(k->key)) {
      auto t = read_text(value, k->key);
      if (!t.ok()) return bad(t.error());
      k->set_text(server, *t);
    } else {
      auto v = read_value(value, k->key);
      if (!v.ok()) return bad(v.error());
      k->set(server, *v);
    }
  }
  return {};
}

// The [backfill] section: only server tables, each merged over the same server of an earlier file.
Result<void> parse_backfill(const toml::table& section, const std::string& file, backfill::BackfillConfig& out,
                            std::vector<std::pair<std::size_t, std::string>>& found) {
  for (const auto& [key, value] : section) {
    const auto line = key.source().begin.line;
    const auto* servers = value.as_table();
    if (key.str() != "server" || servers == nullptr) {
      found.emplace_back(line, fmt::format("{}:{}: unknown key 'backfill.{}' (ignored; servers are "
                                           "[backfill.server.NAME] tables)",
                                           file, line, key.str()));
      continue;
    }
    for (const auto& [name, table] : *servers) {
      const auto at = name.source().begin;
      const auto* t = table.as_table();
      if (t == nullptr || !valid_server_name(name.str())) {
        return make_error(Error::Code::Invalid,
                          fmt::format("{}:{}:{}: backfill.server.{}: a server is a [backfill.server.NAME] table, its "
                                      "NAME 1 to 64 letters, digits, - and _",
                                      file, at.line, at.column, name.str()));
      }
      const std::string server_name(name.str());
      backfill::ServerConfig& server = out.servers[server_name];
      TARMAC_TRY(parse_server(*t, file, server_name, server, found));
      TARMAC_TRY(check_server(server, fmt::format("{}:{}:{}: backfill.server.{}", file, at.line, at.column, server_name)));
      if (server.kind == backfill::ServerKind::External && server.server_user.empty() &&
          net::is_loopback_url(server.url) && url_port(server.url) > 1023) {
        found.emplace_back(at.line, fmt::format("{}:{}: backfill.server.{}: any local user who listens on port {} "
                                                "while the server is down gets the prompts sent to it: set "
                                                "server_user (docs/backfill.md \"Who the server is\")",
                                                file, at.line, server_name, url_port(server.url)));
      }
      if (server.kind == backfill::ServerKind::Managed && server.models.empty()) {
        found.emplace_back(at.line, fmt::format("{}:{}: backfill.server.{}: its account opens whatever model path "
                                                "a batch names: list the models meant for it (models = [...])",
                                                file, at.line, server_name));
      }
    }
  }
  return {};
}

}  // namespace

const std::vector<KeyInfo>& keys() {
  static const std::vector<KeyInfo> infos = [] {
    std::vector<KeyInfo> out;
    for (const auto& k : fixed_table()) out.push_back(k.info);
    return out;
  }();
  return infos;
}

std::string value_text(const Config& config, const KeyInfo& info) {
  const Key* k = find_key(info.section, info.name);
  if (k == nullptr) return "";
  return is_text(*k) ? quoted_text(k->get_text(config)) : number_text(info.kind, k->get(config));
}

Result<Config> parse(std::string_view text, const std::string& file, const Config& base,
                     std::vector<std::string>& warnings) {
  toml::parse_result parsed = toml::parse(text, file);
  if (!parsed) {
    const auto& err = parsed.error();
    return make_error(Error::Code::Invalid, fmt::format("{}:{}:{}: {}", file, err.source().begin.line,
                                                        err.source().begin.column, err.description()));
  }
  Config out = base;
  bool warn_after_set = base.reaper.warn_after_ms != reap::ReaperConfig{}.warn_after_ms;
  std::vector<std::pair<std::size_t, std::string>> found;  // by line: toml++ keeps keys sorted, not in file order
  for (const auto& [section, node] : parsed.table()) {
    const auto line = section.source().begin.line;
    const auto* sub = node.as_table();
    if (sub != nullptr && section.str() == "backfill") {
      TARMAC_TRY(parse_backfill(*sub, file, out.backfill, found));
      continue;
    }
    if (sub == nullptr || !known_section(section.str())) {
      found.emplace_back(line, fmt::format("{}:{}: unknown {} '{}' (ignored)", file, line, sub ? "section" : "key",
                                           section.str()));
      continue;
    }
    for (const auto& [name, value] : *sub) {
      const Key* k = find_key(section.str(), name.str());
      const auto at = name.source().begin;
      if (const RetiredKey* r = k == nullptr ? find_retired(section.str(), name.str()) : nullptr) {
        found.emplace_back(at.line, fmt::format("{}:{}: '{}.{}' is no longer read: {} decides it for the GPU class, "
                                                "the alert and doctor alike (ignored)",
                                                file, at.line, section.str(), name.str(), r->instead));
        continue;
      }
      if (k == nullptr) {
        found.emplace_back(at.line, fmt::format("{}:{}: unknown key '{}.{}' (ignored)", file, at.line, section.str(),
                                                name.str()));
        continue;
      }
      warn_after_set = warn_after_set || (section.str() == "reaper" && name.str() == "warn_after");
      const auto vat = value.source().begin;
      const auto bad = [&](const Error& e) {
        return make_error(Error::Code::Invalid, fmt::format("{}:{}:{}: {}.{}: {}", file, vat.line, vat.column,
                                                            section.str(), name.str(), e.message));
      };
      if (is_text(*k)) {
        auto t = read_text(value, *k);
        if (!t.ok()) return bad(t.error());
        k->set_text(out, *t);
        continue;
      }
      auto v = read_value(value, *k);
      if (!v.ok()) return bad(v.error());
      k->set(out, *v);
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [line, message] : found) warnings.push_back(std::move(message));
  TARMAC_TRY(check_reaper(out.reaper, warn_after_set, file));
  return out;
}

std::optional<std::pair<std::string, unsigned>> split_address(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string host(text.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty() || host.find_first_of(" /[]") != std::string::npos) return std::nullopt;
  const auto port = util::parse_int(text.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535) return std::nullopt;
  return std::make_pair(host, static_cast<unsigned>(*port));
}

std::string state_dir(const Config& config) {
  if (!config.agent.state_dir.empty()) return config.agent.state_dir;
  if (const char* sd = std::getenv("STATE_DIRECTORY"); sd != nullptr && *sd == '/') {
    std::string first(sd);
    return first.substr(0, first.find(':'));  // systemd lists several, separated by ':'
  }
  if (geteuid() == 0) return "/var/lib/tarmac";
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg != nullptr && *xdg == '/') {
    return std::string(xdg) + "/tarmac";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    return std::string(home) + "/.local/state/tarmac";
  }
  return "/var/lib/tarmac";
}

std::vector<std::string> default_files() {
  std::vector<std::string> candidates = {"/etc/tarmac/tarmac.toml"};
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && *xdg == '/') {
    candidates.push_back(std::string(xdg) + "/tarmac/tarmac.toml");
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    candidates.push_back(std::string(home) + "/.config/tarmac/tarmac.toml");
  }
  std::vector<std::string> out;
  std::error_code ec;
  for (auto& c : candidates) {
    if (std::filesystem::is_regular_file(c, ec)) out.push_back(std::move(c));
  }
  return out;
}

Result<Loaded> load(const std::optional<std::string>& explicit_file) {
  Loaded loaded;
  loaded.files = explicit_file ? std::vector<std::string>{*explicit_file} : default_files();
  // Root (the agent, whose alerts.command it runs) must not take orders from a file a user can
  // change: `sudo -E` hands it the user's XDG_CONFIG_HOME.
  const bool as_root = geteuid() == 0;
  for (const auto& file : loaded.files) {
    auto text = util::read_trusted_file(file, as_root ? util::Writers::OwnerOnly : util::Writers::Anyone, 0,
                                        kMaxFileBytes);
    if (!text.ok()) {
      if (text.error().code == Error::Code::Invalid) {
        return make_error(Error::Code::Invalid,
                          fmt::format("refusing the configuration file {}; as root, tarmac reads only configuration "
                                      "that no one but root can change (sudo -E passes on a user's XDG_CONFIG_HOME: "
                                      "use sudo without -E, or --config)",
                                      text.error().message));
      }
      return make_error(Error::Code::NotFound,
                        fmt::format("cannot read the configuration file {}", text.error().message));
    }
    TARMAC_TRY_ASSIGN(loaded.config, parse(*text, file, loaded.config, loaded.warnings));
  }
  return loaded;
}

}  // namespace tarmac::config
