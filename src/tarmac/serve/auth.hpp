// HTTP Basic authentication against bcrypt hashes (web.config.file's basic_auth_users), as
// Prometheus' exporters check it. bcrypt costs tens of milliseconds by design, and the server
// has one thread: a credential checked once is remembered (by its SHA-256, never in clear), and
// checks of credentials not seen before are rationed, so a client guessing passwords slows
// nobody but itself.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "tarmac/util/result.hpp"

namespace tarmac::serve {

class BasicAuth {
 public:
  enum class Verdict {
    Allowed,
    Denied,  // no credentials, malformed ones, an unknown user or a wrong password: 401
    Busy,    // too many new credentials to check this second: 429, try again
  };
  using Clock = std::chrono::steady_clock;

  // `users`: name -> bcrypt hash (checked by parse_web_config). `checks_per_second`: how many
  // bcrypt checks of credentials not seen before may run each second.
  explicit BasicAuth(std::map<std::string, std::string> users, int checks_per_second = 4);

  // The verdict on an Authorization header's value ("Basic dXNlcjpwYXNz"; "" when none came).
  [[nodiscard]] Verdict check(std::string_view authorization, Clock::time_point now);

  // How many bcrypt checks ran (for tests: a remembered credential costs none).
  [[nodiscard]] long long bcrypt_checks() const { return bcrypt_checks_; }

 private:
  using Digest = std::array<std::uint8_t, 32>;
  std::map<std::string, std::string> users_;
  int checks_per_second_;
  std::map<Digest, bool> remembered_;  // SHA-256 of "user\0password" -> whether it was right
  std::size_t remembered_wrong_ = 0;   // the wrong ones among them
  double budget_ = 0;                  // checks that may run now (refills at checks_per_second)
  Clock::time_point refilled_{};
  long long bcrypt_checks_ = 0;
};

// Decodes strict base64 (RFC 4648, with padding); nullopt for anything else.
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view text);

// A bcrypt hash of `password` at `cost` (for `tarmac agent web-config`), from the system's libcrypt.
[[nodiscard]] Result<std::string> bcrypt_hash(const std::string& password, int cost = 10);

}  // namespace tarmac::serve
