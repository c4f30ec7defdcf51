// The [backfill.server.NAME] tables' keys (keys.hpp): their documentation, bounds and checks, how
// each is set on a server and written back, and what a server needs as a whole. The TOML reading
// is config.cpp's, the one translation unit that includes toml++.
#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tarmac/config/keys.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::config {

namespace detail {

namespace {

constexpr std::string_view kServerSection = "backfill.server.NAME";

template <typename T>
ServerKey server_number(std::string_view name, Kind kind, std::string_view doc, long long min, long long max,
                        T backfill::ServerConfig::*member) {
  return ServerKey{Key{{kServerSection, name, kind, doc}, min, max, nullptr, nullptr, nullptr, nullptr, {}, nullptr},
                   [member](backfill::ServerConfig& s, long long v) { s.*member = static_cast<T>(v); },
                   [member](const backfill::ServerConfig& s) { return static_cast<long long>(s.*member); },
                   nullptr,
                   nullptr};
}

ServerKey server_text(std::string_view name, Kind kind, std::string_view doc, std::vector<std::string_view> choices,
                      std::function<void(backfill::ServerConfig&, const std::string&)> set,
                      std::function<std::string(const backfill::ServerConfig&)> get,
                      std::function<std::optional<std::string>(const std::string&)> check) {
  return ServerKey{text_key(kServerSection, name, kind, doc, std::move(choices), nullptr, nullptr, std::move(check)),
                   nullptr, nullptr, std::move(set), std::move(get)};
}

}  // namespace

const std::vector<ServerKey>& server_table() {
  using backfill::ServerConfig;
  using backfill::ServerKind;
  using backfill::ServerProtocol;
  static const std::vector<ServerKey> keys = {
      server_text(
          "kind", Kind::Choice,
          "\"external\": a server already running at url, which tarmac only sends to; \"managed\": a server tarmac "
          "starts as a backfill job on idle GPUs (command or preset, user) and stops when a normal job needs them",
          {"external", "managed"},
          [](ServerConfig& s, const std::string& v) { s.kind = v == "managed" ? ServerKind::Managed : ServerKind::External; },
          [](const ServerConfig& s) { return std::string(s.kind == ServerKind::Managed ? "managed" : "external"); },
          nullptr),
      server_text(
          "protocol", Kind::Choice,
          "\"openai\": /v1/chat/completions and /v1/completions (llama-server, vLLM and Ollama serve them); "
          "\"ollama\": Ollama's native /api/chat and /api/generate, streamed, answers written in OpenAI's shape",
          {"openai", "ollama"},
          [](ServerConfig& s, const std::string& v) {
            s.protocol = v == "ollama" ? ServerProtocol::Ollama : ServerProtocol::OpenAi;
          },
          [](const ServerConfig& s) { return std::string(s.protocol == ServerProtocol::Ollama ? "ollama" : "openai"); },
          nullptr),
      server_text("url", Kind::Text,
                  "the server's base URL, http:// or https://, such as \"http://127.0.0.1:8080\": each request's url "
                  "(/v1/chat/completions) is appended to it; required",
                  {}, [](ServerConfig& s, const std::string& v) { s.url = v; },
                  [](const ServerConfig& s) { return s.url; },
                  [](const std::string& v) -> std::optional<std::string> {
                    if (auto ok = net::check_url(v); !ok.ok()) return ok.error().message;
                    if (v.find_first_of("?#") != std::string::npos) return "'" + v + "': no query or fragment";
                    return std::nullopt;
                  }),
      server_number("timeout", Kind::Duration,
                    "the longest one request may take, connecting included; past it the request is sent again "
                    "(retries), then written with error \"timeout\"",
                    100, 24LL * 3600 * 1000, &ServerConfig::timeout_ms),
      server_number("retries", Kind::Count,
                    "how often a request is sent again after a 5xx answer, a failed connection or a timeout, waiting "
                    "1s, 2s, 4s ... (at most 1m) in between; then its error is written",
                    0, 100, &ServerConfig::retries),
      server_number("max_parallel", Kind::Count,
                    "the most requests in flight to this server at once, all its batches together, whatever their "
                    "--parallel asks",
                    1, 256, &ServerConfig::max_parallel),
      server_number("stream", Kind::Bool,
                    "protocol \"openai\": each request is sent with \"stream\": true and its answer put back "
                    "together as the server would have given it unstreamed, so that a server that stops "
                    "mid-answer is seen and a cancel ends its generation; false: sent as it is, for a server "
                    "whose streams are not OpenAI's",
                    0, 1, &ServerConfig::stream),
      server_text("server_user", Kind::Text,
                  "the account whose process serves a loopback url: the agent checks each connection's other end "
                  "is that account's before it sends a prompt on it, so a user who takes the port while the server "
                  "is down gets nothing; empty: not checked",
                  {}, [](ServerConfig& s, const std::string& v) { s.server_user = v; },
                  [](const ServerConfig& s) { return s.server_user; },
                  [](const std::string& v) -> std::optional<std::string> {
                    if (v.empty()) return std::nullopt;
                    if (auto uid = backfill::server_user_uid(v); !uid.ok()) return uid.error().message;
                    return std::nullopt;
                  }),
      server_text("command", Kind::Text,
                  "managed: the server's argv as an array of strings, \"{port}\" and \"{model}\" replaced in each "
                  "(no shell), such as [\"/usr/bin/llama-server\", \"-m\", \"{model}\", \"--port\", \"{port}\"]",
                  {}, nullptr, [](const ServerConfig& s) { return util::json_text(nlohmann::json(s.command)); },
                  nullptr),
      server_text("models", Kind::Text,
                  "the models its batches may name (--model), as an array of strings; a batch naming another is "
                  "refused at submit. A managed server opens the model named as its account: list the ones meant "
                  "for it. Empty: any",
                  {}, nullptr, [](const ServerConfig& s) { return util::json_text(nlohmann::json(s.models)); },
                  nullptr),
      server_text("preset", Kind::Choice,
                  "managed: a known server's command and health path instead of command: \"llama-server\", "
                  "\"ollama\" or \"vllm\"",
                  {"llama-server", "ollama", "vllm"}, [](ServerConfig& s, const std::string& v) { s.preset = v; },
                  [](const ServerConfig& s) { return s.preset; }, nullptr),
      server_text("binary", Kind::Path, "managed: the preset's program, when it is not on the agent's PATH", {},
                  [](ServerConfig& s, const std::string& v) { s.binary = v; },
                  [](const ServerConfig& s) { return s.binary; }, nullptr),
      server_text("user", Kind::Text,
                  "managed: the account the server runs as (it runs users' prompts); required, never root", {},
                  [](ServerConfig& s, const std::string& v) { s.user = v; },
                  [](const ServerConfig& s) { return s.user; },
                  [](const std::string& v) -> std::optional<std::string> {
                    if (v == "root" || v == "0") {
                      return "a managed server never runs as root (it runs users' prompts): name an account of its own";
                    }
                    if (v.empty() || v.size() > 32) return "an account name of 1 to 32 characters";
                    return std::nullopt;
                  }),
      server_number("gpus", Kind::Count, "managed: how many idle GPUs the server runs on", 1, 64,
                    &ServerConfig::gpus),
      server_number("ready_timeout", Kind::Duration,
                    "managed: the longest from the server's start until its health path answers; then it is "
                    "stopped and tried again later",
                    100, 24LL * 3600 * 1000, &ServerConfig::ready_timeout_ms),
  };
  return keys;
}

const ServerKey* find_server_key(std::string_view name) {
  for (const auto& k : server_table()) {
    if (k.key.info.name == name) return &k;
  }
  return nullptr;
}

bool valid_server_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_';
  });
}

// What a managed server needs besides its kind: a way to start (command or preset, not both) and an
// account that is not root; an external one, its url.
Result<void> check_server(const backfill::ServerConfig& server, const std::string& where) {
  const auto bad = [&](std::string_view why) {
    return make_error(Error::Code::Invalid, fmt::format("{}: {}", where, why));
  };
  if (server.kind == backfill::ServerKind::External) {
    if (server.url.empty()) return bad("no url (the server's base URL, such as \"http://127.0.0.1:8080\")");
    if (!server.server_user.empty() && !net::is_loopback_url(server.url)) {
      return bad(fmt::format("server_user is checked on this machine only: the url must be a loopback one "
                             "(127.0.0.1, [::1], localhost), not {}",
                             server.url));
    }
    return {};
  }
  if (!server.server_user.empty()) {
    return bad("a managed server's connections are checked against its user: no server_user");
  }
  if (server.command.empty() == server.preset.empty()) {
    return bad("a managed server needs command (its argv) or preset (\"llama-server\", \"ollama\", \"vllm\"), one of them");
  }
  if (server.user.empty()) {
    return bad("a managed server needs user: the account it runs as (never root: it runs users' prompts)");
  }
  if (!server.url.empty()) return bad("a managed server has no url: tarmac gives it a free loopback port");
  return {};
}

unsigned url_port(std::string_view url) {
  const bool https = url.starts_with("https://");
  std::string_view authority = url.substr(url.find("://") + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  const auto close = authority.rfind(']');
  const auto colon = authority.rfind(':');
  if (colon == std::string_view::npos || (close != std::string_view::npos && colon < close)) return https ? 443 : 80;
  unsigned port = 0;
  for (const char c : authority.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) return 0;
    port = port * 10 + static_cast<unsigned>(c - '0');
  }
  return port;
}

}  // namespace detail

using detail::find_server_key;
using detail::is_text;
using detail::number_text;
using detail::quoted_text;
using detail::ServerKey;
using detail::server_table;

const std::vector<KeyInfo>& server_keys() {
  static const std::vector<KeyInfo> infos = [] {
    std::vector<KeyInfo> out;
    for (const auto& k : server_table()) out.push_back(k.key.info);
    return out;
  }();
  return infos;
}

std::string server_value_text(const backfill::ServerConfig& server, const KeyInfo& info) {
  const ServerKey* k = find_server_key(info.name);
  if (k == nullptr) return "";
  if (info.name == "command" || info.name == "models") return k->get_text(server);  // arrays: TOML and JSON read them
  return is_text(k->key) ? quoted_text(k->get_text(server)) : number_text(info.kind, k->get(server));
}

bool server_key_applies(const backfill::ServerConfig& server, const KeyInfo& key) {
  const bool managed = server.kind == backfill::ServerKind::Managed;
  if (key.name == "url" || key.name == "server_user") return !managed;
  if (key.name == "command") return managed && !server.command.empty();
  if (key.name == "models") return !server.models.empty();
  if (key.name == "preset") return managed && !server.preset.empty();
  if (key.name == "binary") return managed && !server.binary.empty();
  if (key.name == "user" || key.name == "gpus" || key.name == "ready_timeout") return managed;
  if (key.name == "stream") return server.protocol == backfill::ServerProtocol::OpenAi;
  return true;
}

}  // namespace tarmac::config
