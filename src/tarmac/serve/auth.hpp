// HTTP Basic authentication against bcrypt hashes (web.config.file's basic_auth_users), as
// Prometheus' exporters check it. bcrypt costs tens of milliseconds by design, and the server
// has one thread: a credential checked once is remembered (by its SHA-256, never in clear), and the
// time spent checking new ones is rationed per client address and in all, so a client guessing
// passwords slows itself, not the scrapes of others.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "tarmac/util/result.hpp"

namespace tarmac::serve {

// How much of the server's thread checking new passwords may take.
struct PasswordRation {
  double per_client_seconds = 0.2;  // of bcrypt a second, for one client address
  double total_seconds = 0.5;       // ... for all clients together: at most half the server's thread
};

class BasicAuth {
 public:
  enum class Verdict {
    Allowed,
    Denied,  // no credentials, malformed ones, an unknown user or a wrong password: 401
    Busy,    // this client (or all together) spent its time for checking new passwords: 429
  };
  using Clock = std::chrono::steady_clock;

  using Ration = PasswordRation;

  // `users`: name -> bcrypt hash (checked by parse_web_config).
  explicit BasicAuth(std::map<std::string, std::string> users, Ration ration = PasswordRation{});

  // The verdict on an Authorization header's value ("Basic dXNlcjpwYXNz"; "" when none came) from
  // the client at `peer` (its address, the key of its ration).
  [[nodiscard]] Verdict check(std::string_view authorization, const std::string& peer, Clock::time_point now);

  // How many bcrypt checks ran (for tests: a remembered credential costs none).
  [[nodiscard]] long long bcrypt_checks() const { return bcrypt_checks_; }

 private:
  using Digest = std::array<std::uint8_t, 32>;
  // Seconds of bcrypt that may be spent: a check runs while it is not negative, and its time is
  // taken from it afterwards; it refills at its rate up to one second's worth.
  struct Bucket {
    double seconds = 0;
    Clock::time_point at{};
  };
  [[nodiscard]] static bool has_time(Bucket& b, double rate, Clock::time_point now);

  std::map<std::string, std::string> users_;
  Ration ration_;
  std::string decoy_;                         // a hash at the users' highest cost, for unknown names
  std::map<std::string, Digest> right_;       // per user: the credential that was right
  std::set<Digest> wrong_;                    // credentials that were wrong (bounded)
  std::map<std::string, Bucket> per_client_;  // bounded
  Bucket total_;
  long long bcrypt_checks_ = 0;
};

// Decodes strict base64 (RFC 4648, with padding); nullopt for anything else.
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view text);

// A bcrypt hash of `password` at `cost` (for `tarmac config web-config`), from the system's libcrypt.
[[nodiscard]] Result<std::string> bcrypt_hash(const std::string& password, int cost = 10);

}  // namespace tarmac::serve
