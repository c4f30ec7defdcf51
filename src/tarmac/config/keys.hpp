// The configuration's keys, as config.cpp reads and writes the file's sections and
// backfill_servers.cpp the [backfill.server.NAME] tables: private to src/tarmac/config.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/backfill/settings.hpp"
#include "tarmac/config/config.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::config::detail {

// A key with how to read and write it. Values travel as long long in the key's own unit:
// percent, °C, milliseconds, bytes.
// Text keys (Path, Choice) use set_text/get_text and `choices` instead.
struct Key {
  KeyInfo info;
  long long min = 0;
  long long max = 0;
  std::function<void(Config&, long long)> set;
  std::function<long long(const Config&)> get;
  std::function<void(Config&, const std::string&)> set_text;
  std::function<std::string(const Config&)> get_text;
  std::vector<std::string_view> choices;
  // For Text keys: why a value is refused, or nullopt when it is accepted.
  std::function<std::optional<std::string>(const std::string&)> check;
};

Key text_key(std::string_view section, std::string_view name, Kind kind, std::string_view doc,
             std::vector<std::string_view> choices, std::function<void(Config&, const std::string&)> set,
             std::function<std::string(const Config&)> get,
             std::function<std::optional<std::string>(const std::string&)> check = nullptr);
// The keys of the fixed sections, in the order `tarmac config` prints them (key_table.cpp).
[[nodiscard]] const std::vector<Key>& fixed_table();
[[nodiscard]] bool is_text(const Key& k);
// A value as the file has it (quoted_text: a string both TOML and JSON read back; number_text: a
// number in its kind's unit).
[[nodiscard]] std::string quoted_text(const std::string& text);
[[nodiscard]] std::string number_text(Kind kind, long long v);

// A key of a [backfill.server.NAME] table: read like the fixed keys (its Key gives the kind, the
// bounds, the choices and the check; its setters are unused), set on one server.
struct ServerKey {
  Key key;
  std::function<void(backfill::ServerConfig&, long long)> set;
  std::function<long long(const backfill::ServerConfig&)> get;
  std::function<void(backfill::ServerConfig&, const std::string&)> set_text;
  std::function<std::string(const backfill::ServerConfig&)> get_text;
};

[[nodiscard]] const std::vector<ServerKey>& server_table();
[[nodiscard]] const ServerKey* find_server_key(std::string_view name);
[[nodiscard]] bool valid_server_name(std::string_view name);
// What a server needs besides its keys, checked once its table is read; `where` starts the error.
[[nodiscard]] Result<void> check_server(const backfill::ServerConfig& server, const std::string& where);
// The port of a url check_url accepts: the one it names, else the scheme's.
[[nodiscard]] unsigned url_port(std::string_view url);

}  // namespace tarmac::config::detail
