#include "tarmac/serve/web_config.hpp"

#include <yaml.h>

#include <fmt/format.h>
#include <memory>
#include <vector>

#include "tarmac/util/trusted_file.hpp"

namespace tarmac::serve {

namespace {

// A web config file is a few lines; a larger one is a mistake or an attack.
constexpr std::size_t kMaxFileBytes = 64 * 1024;

Error invalid(std::string message) { return make_error(Error::Code::Invalid, std::move(message)); }

// The loaded document, freed on every path.
struct Document {
  yaml_document_t doc{};
  bool loaded = false;
  ~Document() {
    if (loaded) yaml_document_delete(&doc);
  }
};

struct Parser {
  yaml_parser_t parser{};
  Parser() { yaml_parser_initialize(&parser); }
  ~Parser() { yaml_parser_delete(&parser); }
};

std::string scalar(const yaml_node_t* node) {
  return std::string(reinterpret_cast<const char*>(node->data.scalar.value), node->data.scalar.length);
}

// A mapping's pairs as (key text, value node), in file order; fails on a key that is not a plain
// scalar or appears twice.
Result<std::vector<std::pair<std::string, yaml_node_t*>>> pairs_of(yaml_document_t& doc, yaml_node_t* node,
                                                                   std::string_view where) {
  if (node == nullptr || node->type != YAML_MAPPING_NODE) return invalid(fmt::format("{} must be a mapping", where));
  std::vector<std::pair<std::string, yaml_node_t*>> out;
  for (auto* p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; ++p) {
    yaml_node_t* key = yaml_document_get_node(&doc, p->key);
    if (key == nullptr || key->type != YAML_SCALAR_NODE) return invalid(fmt::format("{}: a key is not a word", where));
    std::string name = scalar(key);
    for (const auto& [seen, value] : out) {
      if (seen == name) return invalid(fmt::format("{}: {} is given twice", where, name));
    }
    out.emplace_back(std::move(name), yaml_document_get_node(&doc, p->value));
  }
  return out;
}

bool is_null(const yaml_node_t* node) {
  if (node == nullptr) return true;
  if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
  const std::string v = scalar(node);
  return v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL";
}

Result<std::string> text_of(const yaml_node_t* node, std::string_view where) {
  if (node == nullptr || node->type != YAML_SCALAR_NODE) return invalid(fmt::format("{} must be text", where));
  std::string v = scalar(node);
  if (v.find('\0') != std::string::npos) return invalid(fmt::format("{} holds a NUL byte", where));
  return v;
}

std::string absolute(const std::string& path, const std::string& dir) {
  if (path.empty() || path.front() == '/') return path;
  return dir.empty() ? path : dir + "/" + path;
}

Result<int> tls_version(const std::string& v, std::string_view where) {
  if (v == "TLS10") return 10;
  if (v == "TLS11") return 11;
  if (v == "TLS12") return 12;
  if (v == "TLS13") return 13;
  return invalid(fmt::format("{}: unknown TLS version \"{}\" (TLS10, TLS11, TLS12 or TLS13)", where, v));
}

Result<ClientAuth> client_auth(const std::string& v) {
  if (v.empty() || v == "NoClientCert") return ClientAuth::None;
  if (v == "RequestClientCert") return ClientAuth::Request;
  if (v == "RequireAnyClientCert") return ClientAuth::RequireAny;
  if (v == "VerifyClientCertIfGiven") return ClientAuth::VerifyIfGiven;
  if (v == "RequireAndVerifyClientCert") return ClientAuth::RequireAndVerify;
  return invalid(fmt::format("tls_server_config.client_auth_type: invalid \"{}\" (NoClientCert, RequestClientCert, "
                             "RequireAnyClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert)",
                             v));
}

Result<TlsSettings> read_tls(yaml_document_t& doc, yaml_node_t* node, const std::string& dir) {
  TARMAC_TRY_ASSIGN(const auto pairs, pairs_of(doc, node, "tls_server_config"));
  TlsSettings tls;
  std::string auth_type;
  for (const auto& [name, value] : pairs) {
    const std::string where = "tls_server_config." + name;
    if (name == "prefer_server_cipher_suites") continue;  // a preference of Go's, no setting here
    if (name == "cipher_suites" || name == "curve_preferences") {
      if (is_null(value) || (value->type == YAML_SEQUENCE_NODE && value->data.sequence.items.start ==
                                                                        value->data.sequence.items.top)) {
        continue;  // an empty list is the library's defaults
      }
      return invalid(fmt::format("{}: tarmac does not choose {}; remove it to use OpenSSL's defaults", where,
                                 name == "cipher_suites" ? "cipher suites" : "curves"));
    }
    if (is_null(value)) continue;
    TARMAC_TRY_ASSIGN(const std::string v, text_of(value, where));
    if (name == "cert_file") {
      tls.cert_file = absolute(v, dir);
    } else if (name == "key_file") {
      tls.key_file = absolute(v, dir);
    } else if (name == "client_ca_file") {
      tls.client_ca_file = absolute(v, dir);
    } else if (name == "client_auth_type") {
      auth_type = v;
    } else if (name == "min_version") {
      TARMAC_TRY_ASSIGN(tls.min_version, tls_version(v, where));
    } else if (name == "max_version") {
      TARMAC_TRY_ASSIGN(tls.max_version, tls_version(v, where));
    } else if (name == "cert" || name == "key" || name == "client_ca") {
      return invalid(fmt::format("{}: give the PEM as a file (cert_file, key_file, client_ca_file)", where));
    } else {
      return invalid(fmt::format("tls_server_config: unknown key {}", name));
    }
  }
  TARMAC_TRY_ASSIGN(tls.client_auth, client_auth(auth_type));
  if (tls.cert_file.empty()) return invalid("tls_server_config: missing cert_file");
  if (tls.key_file.empty()) return invalid("tls_server_config: missing key_file");
  const bool verifies = tls.client_auth == ClientAuth::VerifyIfGiven || tls.client_auth == ClientAuth::RequireAndVerify;
  if (verifies && tls.client_ca_file.empty()) {
    return invalid(fmt::format("tls_server_config: client_auth_type {} needs client_ca_file", auth_type));
  }
  if (!verifies && !tls.client_ca_file.empty()) {
    return invalid("tls_server_config: client_ca_file is given but client_auth_type does not verify client "
                   "certificates (VerifyClientCertIfGiven or RequireAndVerifyClientCert)");
  }
  if (tls.max_version != 0 && tls.max_version < tls.min_version) {
    return invalid("tls_server_config: max_version is below min_version");
  }
  return tls;
}

Result<std::map<std::string, std::string>> read_users(yaml_document_t& doc, yaml_node_t* node) {
  TARMAC_TRY_ASSIGN(const auto pairs, pairs_of(doc, node, "basic_auth_users"));
  std::map<std::string, std::string> users;
  for (const auto& [name, value] : pairs) {
    if (name.empty() || name.find(':') != std::string::npos) {
      return invalid(fmt::format("basic_auth_users: \"{}\" cannot be a user name (empty, or with a colon)", name));
    }
    for (const char c : name) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        return invalid("basic_auth_users: a user name holds a control character");
      }
    }
    TARMAC_TRY_ASSIGN(std::string hash, text_of(value, "basic_auth_users." + name));
    if (!is_bcrypt_hash(hash)) {
      return invalid(fmt::format("basic_auth_users.{}: not a bcrypt hash of cost 4 to 12 ($2y$10$ and 53 "
                                 "characters; `tarmac config web-config --user {}` makes one)",
                                 name, name));
    }
    users.emplace(name, std::move(hash));
  }
  return users;
}

}  // namespace

bool is_bcrypt_hash(std::string_view hash) {
  if (hash.size() != 60 || !hash.starts_with("$2") || hash[3] != '$' || hash[6] != '$') return false;
  if (hash[2] != 'a' && hash[2] != 'b' && hash[2] != 'y') return false;
  if (hash[4] < '0' || hash[4] > '9' || hash[5] < '0' || hash[5] > '9') return false;
  // Each step of the cost doubles the work, and the server's one thread waits for it: 12 takes about
  // 0.2 s, 16 over 3 s.
  const int cost = (hash[4] - '0') * 10 + (hash[5] - '0');
  if (cost < 4 || cost > 12) return false;
  for (const char c : hash.substr(7)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '/';
    if (!ok) return false;
  }
  return true;
}

Result<WebConfig> parse_web_config(std::string_view text, const std::string& dir) {
  Parser p;
  yaml_parser_set_input_string(&p.parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  Document d;
  if (yaml_parser_load(&p.parser, &d.doc) == 0) {
    return invalid(fmt::format("not YAML: {} at line {}", p.parser.problem != nullptr ? p.parser.problem : "error",
                               p.parser.problem_mark.line + 1));
  }
  d.loaded = true;
  WebConfig config;
  yaml_node_t* root = yaml_document_get_root_node(&d.doc);
  if (root == nullptr) return config;  // an empty file: plain HTTP, nobody asked for a password
  {
    Document second;
    if (yaml_parser_load(&p.parser, &second.doc) == 0) return invalid("not YAML after the first document");
    second.loaded = true;
    if (yaml_document_get_root_node(&second.doc) != nullptr) return invalid("more than one YAML document");
  }
  TARMAC_TRY_ASSIGN(const auto top, pairs_of(d.doc, root, "the file"));
  for (const auto& [name, value] : top) {
    if (name == "tls_server_config") {
      if (is_null(value)) continue;
      TARMAC_TRY_ASSIGN(config.tls, read_tls(d.doc, value, dir));
    } else if (name == "basic_auth_users") {
      if (is_null(value)) continue;
      TARMAC_TRY_ASSIGN(config.users, read_users(d.doc, value));
    } else if (name == "http_server_config") {
      if (is_null(value)) continue;
      return invalid("http_server_config: tarmac speaks HTTP/1.1 and sets its own headers; remove the section");
    } else {
      return invalid(fmt::format("unknown key {} (tls_server_config, basic_auth_users)", name));
    }
  }
  return config;
}

Result<WebConfig> load_web_config(const std::string& path, bool trusted) {
  auto text = util::read_trusted_file(path, trusted ? util::Writers::OwnerOnly : util::Writers::Anyone, 0,
                                      kMaxFileBytes);
  if (!text.ok()) return text.error();
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  auto config = parse_web_config(*text, dir);
  if (!config.ok()) return invalid(fmt::format("{}: {}", path, config.error().message));
  return config;
}

}  // namespace tarmac::serve
