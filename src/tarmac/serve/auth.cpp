#include "tarmac/serve/auth.hpp"

#include <crypt.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <fmt/format.h>
#include <memory>

namespace tarmac::serve {

namespace {

// Wrong credentials remembered; past this the memory is dropped (right ones are one per user).
constexpr std::size_t kMaxRememberedWrong = 1024;
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
bool bcrypt_matches(const std::string& password, const std::string& hash) {
  auto data = std::make_unique<crypt_data>();
  const char* out = crypt_rn(password.c_str(), hash.c_str(), data.get(), sizeof(crypt_data));
  if (out == nullptr || out[0] == '*') return false;
  const std::string_view got(out);
  return got.size() == hash.size() && CRYPTO_memcmp(got.data(), hash.data(), hash.size()) == 0;
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

BasicAuth::BasicAuth(std::map<std::string, std::string> users, int checks_per_second)
    : users_(std::move(users)), checks_per_second_(std::max(1, checks_per_second)),
      budget_(std::max(1, checks_per_second)) {}

BasicAuth::Verdict BasicAuth::check(std::string_view authorization, Clock::time_point now) {
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
  const std::string user = decoded->substr(0, colon);
  const std::string password = decoded->substr(colon + 1);

  Digest digest{};
  unsigned len = 0;
  std::string keyed = user;
  keyed += '\0';
  keyed += password;
  if (EVP_Digest(keyed.data(), keyed.size(), digest.data(), &len, EVP_sha256(), nullptr) != 1) return Verdict::Denied;
  OPENSSL_cleanse(keyed.data(), keyed.size());
  if (const auto it = remembered_.find(digest); it != remembered_.end()) {
    return it->second ? Verdict::Allowed : Verdict::Denied;
  }

  const double elapsed = std::chrono::duration<double>(now - refilled_).count();
  if (refilled_ != Clock::time_point{} && elapsed > 0) {
    budget_ = std::min<double>(checks_per_second_, budget_ + elapsed * checks_per_second_);
  }
  refilled_ = now;
  if (budget_ < 1) return Verdict::Busy;
  budget_ -= 1;

  const auto found = users_.find(user);
  ++bcrypt_checks_;
  const bool right = bcrypt_matches(password, found != users_.end() ? found->second : std::string(kDecoyHash)) &&
                     found != users_.end();
  if (!right && ++remembered_wrong_ > kMaxRememberedWrong) {
    std::erase_if(remembered_, [](const auto& e) { return !e.second; });
    remembered_wrong_ = 1;
  }
  remembered_[digest] = right;
  return right ? Verdict::Allowed : Verdict::Denied;
}

}  // namespace tarmac::serve
