// The agent's TLS and authentication settings, read from a file in the format every Prometheus
// exporter shares (exporter-toolkit's web.config.file: tls_server_config and basic_auth_users), so
// the file a site already writes for node_exporter works here, and `promtool check web-config`
// checks it. docs/fleet.md "Scraping across the network".
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "tarmac/util/result.hpp"

namespace tarmac::serve {

// tls_server_config.client_auth_type, as Go's crypto/tls names them.
enum class ClientAuth {
  None,              // NoClientCert (the default)
  Request,           // RequestClientCert: asked for, not checked
  RequireAny,        // RequireAnyClientCert: one must come, not checked
  VerifyIfGiven,     // VerifyClientCertIfGiven: checked against client_ca_file when one comes
  RequireAndVerify,  // RequireAndVerifyClientCert: one must come and be signed by client_ca_file
};

struct TlsSettings {
  // Absolute paths: a relative one in the file is taken from the file's own directory, as
  // exporter-toolkit does.
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;  // "" for none
  ClientAuth client_auth = ClientAuth::None;
  int min_version = 12;  // TLS 1.2 unless the file says otherwise: 10, 11, 12 or 13
  int max_version = 0;   // 0: the newest the library speaks
};

struct WebConfig {
  std::optional<TlsSettings> tls;            // nullopt: plain HTTP
  std::map<std::string, std::string> users;  // basic_auth_users: name -> bcrypt hash

  // Whether a client must prove who it is: a password, or a certificate signed by client_ca_file.
  [[nodiscard]] bool authenticates() const {
    return !users.empty() || (tls && tls->client_auth == ClientAuth::RequireAndVerify);
  }
};

// Parses the file's text (YAML). Every key outside the format is refused, as exporter-toolkit
// refuses it, and so are the format's keys tarmac does not implement (cipher_suites,
// curve_preferences, http_server_config), by name: a setting silently dropped would be a weaker
// server than the one the file describes. `dir` is the file's directory, for relative paths.
[[nodiscard]] Result<WebConfig> parse_web_config(std::string_view text, const std::string& dir);

// Reads and parses the file at `path`; as root (`trusted`), the file must be root's and writable by
// root alone (util::read_trusted_file), since it decides who reads the agent.
[[nodiscard]] Result<WebConfig> load_web_config(const std::string& path, bool trusted);

// Whether `hash` is a bcrypt hash ($2a$, $2b$ or $2y$, cost 4 to 12, 60 characters).
[[nodiscard]] bool is_bcrypt_hash(std::string_view hash);

}  // namespace tarmac::serve
