#include "tarmac/serve/auth.hpp"

#include <crypt.h>

#include <algorithm>
#include <fmt/format.h>
#include <memory>

#include "tarmac/serve/openssl.hpp"

namespace tarmac::serve {

namespace {

// Wrong credentials remembered; past this the memory is dropped (right ones are one per user).
constexpr std::size_t kMaxRememberedWrong = 1024;
// Client addresses whose ration is kept; past this every ration starts afresh.
constexpr std::size_t kMaxClients = 4096;
// Checked when the user is unknown, so that an unknown name takes as long as a wrong password.
constexpr const char* kDecoyHash = "$2b$10$ZbaG2oNm/3tmVv3cJ1fWuOlY0YeVq1CTcVfnlY9w5Y1bq1rE8wK7W";

int value_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Whether `password` matches the bcrypt `hash`, in time that does not depend on where they differ.
bool bcrypt_matches(const OpenSsl& o, const std::string& password, const std::string& hash) {
  auto data = std::make_unique<crypt_data>();
  const char* out = crypt_rn(password.c_str(), hash.c_str(), data.get(), sizeof(crypt_data));
  if (out == nullptr || out[0] == '*') return false;
  const std::string_view got(out);
  return got.size() == hash.size() && o.CRYPTO_memcmp(got.data(), hash.data(), hash.size()) == 0;
}

}  // namespace

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      const char c = text[i + j];
      if (c == '=' && last && j >= 2) {
        v[j] = 0;
        ++pad;
      } else {
        if (pad > 0) return std::nullopt;  // a digit after padding
        v[j] = value_of(c);
        if (v[j] < 0) return std::nullopt;
      }
    }
    const unsigned triple = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>((triple >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((triple >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(triple & 0xff);
  }
  return out;
}

Result<std::string> bcrypt_hash(const std::string& password, int cost) {
  if (password.find('\0') != std::string::npos) return make_error(Error::Code::Invalid, "the password holds a NUL byte");
  if (password.size() > 72) {
    return make_error(Error::Code::Invalid, "bcrypt reads at most 72 bytes of a password; choose a shorter one");
  }
  char setting[CRYPT_GENSALT_OUTPUT_SIZE];
  if (crypt_gensalt_rn("$2b$", static_cast<unsigned long>(cost), nullptr, 0, setting, sizeof setting) == nullptr) {
    return make_error(Error::Code::External, "libcrypt cannot make a bcrypt salt");
  }
  auto data = std::make_unique<crypt_data>();
  const char* out = crypt_rn(password.c_str(), setting, data.get(), sizeof(crypt_data));
  if (out == nullptr || out[0] == '*') return make_error(Error::Code::External, "libcrypt cannot hash with bcrypt");
  return std::string(out);
}

BasicAuth::BasicAuth(std::map<std::string, std::string> users, Ration ration)
    : users_(std::move(users)), ration_(ration) {
  // An unknown name is checked against a hash of the same cost as the slowest user's, so the time
  // of a 401 does not tell whether the name exists. Only the setting's cost and salt are used.
  std::string cost = "10";
  for (const auto& [name, hash] : users_) cost = std::max(cost, hash.substr(4, 2));
  decoy_ = "$2b$" + cost + "$" + std::string(kDecoyHash).substr(7);
  total_.seconds = ration_.total_seconds;
}

bool BasicAuth::has_time(Bucket& b, double rate, Clock::time_point now) {
  if (b.at != Clock::time_point{}) {
    b.seconds = std::min(rate, b.seconds + std::chrono::duration<double>(now - b.at).count() * rate);
  }
  b.at = now;
  return b.seconds >= 0;
}

BasicAuth::Verdict BasicAuth::check(std::string_view authorization, const std::string& peer, Clock::time_point now) {
  constexpr std::string_view kScheme = "Basic ";
  if (authorization.size() < kScheme.size()) return Verdict::Denied;
  // The scheme's name is case-insensitive (RFC 9110).
  for (std::size_t i = 0; i + 1 < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != std::tolower(kScheme[i])) return Verdict::Denied;
  }
  if (authorization[kScheme.size() - 1] != ' ') return Verdict::Denied;
  const auto decoded = base64_decode(authorization.substr(kScheme.size()));
  if (!decoded) return Verdict::Denied;
  const auto colon = decoded->find(':');
  if (colon == std::string::npos) return Verdict::Denied;
  // libcrypt stops at a NUL and bcrypt reads 72 bytes: a password it would take for another is
  // refused before it is checked, and so is any control character.
  for (const char c : *decoded) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return Verdict::Denied;
  }
  const std::string user = decoded->substr(0, colon);
  const std::string password = decoded->substr(colon + 1);
  if (password.size() > 72) return Verdict::Denied;

  // Loaded when the agent started (Service checks it before it serves): without it, nobody is let in.
  const auto& loaded = openssl();
  if (!loaded.ok()) return Verdict::Denied;
  const OpenSsl& o = *loaded;
  Digest digest{};
  unsigned len = 0;
  std::string keyed = fmt::format("{}:{}", user.size(), *decoded);  // the length first: no two pairs collide
  const int hashed = o.EVP_Digest(keyed.data(), keyed.size(), digest.data(), &len, o.EVP_sha256(), nullptr);
  o.OPENSSL_cleanse(keyed.data(), keyed.size());
  if (hashed != 1) return Verdict::Denied;
  if (const auto it = right_.find(user); it != right_.end() && it->second == digest) return Verdict::Allowed;
  if (wrong_.contains(digest)) return Verdict::Denied;

  if (per_client_.size() >= kMaxClients && !per_client_.contains(peer)) per_client_.clear();
  Bucket& mine = per_client_[peer];
  if (mine.at == Clock::time_point{}) mine.seconds = ration_.per_client_seconds;
  if (!has_time(mine, ration_.per_client_seconds, now) || !has_time(total_, ration_.total_seconds, now)) {
    return Verdict::Busy;
  }
  const auto found = users_.find(user);
  ++bcrypt_checks_;
  const auto started = Clock::now();
  const bool matches = bcrypt_matches(o, password, found != users_.end() ? found->second : decoy_);
  const double spent = std::chrono::duration<double>(Clock::now() - started).count();
  mine.seconds -= spent;
  total_.seconds -= spent;
  const bool right = matches && found != users_.end();
  if (right) {
    right_[user] = digest;
    return Verdict::Allowed;
  }
  if (wrong_.size() >= kMaxRememberedWrong) wrong_.clear();
  wrong_.insert(digest);
  return Verdict::Denied;
}

}  // namespace tarmac::serve
