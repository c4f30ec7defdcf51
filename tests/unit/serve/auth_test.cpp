#include "tarmac/serve/auth.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tarmac::serve {
namespace {

using Verdict = BasicAuth::Verdict;
using namespace std::chrono_literals;

// bcrypt of "s3cret" at cost 4.
constexpr const char* kHash = "$2b$04$7BzZ2GX2nUXOFxZbL4YGZOUK49/tAOa6XvDILWBi/sa/d83VqNcWy";

std::string basic(std::string_view credentials) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out = "Basic ";
  for (std::size_t i = 0; i < credentials.size(); i += 3) {
    unsigned v = static_cast<unsigned char>(credentials[i]) << 16;
    if (i + 1 < credentials.size()) v |= static_cast<unsigned char>(credentials[i + 1]) << 8;
    if (i + 2 < credentials.size()) v |= static_cast<unsigned char>(credentials[i + 2]);
    out += kDigits[(v >> 18) & 63];
    out += kDigits[(v >> 12) & 63];
    out += i + 1 < credentials.size() ? kDigits[(v >> 6) & 63] : '=';
    out += i + 2 < credentials.size() ? kDigits[v & 63] : '=';
  }
  return out;
}

TEST(Base64, StrictRfc4648) {
  EXPECT_EQ(base64_decode("cHJvbTpzM2NyZXQ="), "prom:s3cret");
  EXPECT_EQ(base64_decode(""), "");
  EXPECT_EQ(base64_decode("YQ=="), "a");
  EXPECT_EQ(base64_decode("YWI="), "ab");
  EXPECT_FALSE(base64_decode("YQ"));       // no padding
  EXPECT_FALSE(base64_decode("Y==="));     // too much
  EXPECT_FALSE(base64_decode("YQ==YWI="));  // padding in the middle
  EXPECT_FALSE(base64_decode("YW=I"));
  EXPECT_FALSE(base64_decode("YW I"));
  EXPECT_FALSE(base64_decode("YW-_"));     // the URL alphabet is not Basic's
}

TEST(BasicAuth, RightWrongUnknownAndMalformed) {
  BasicAuth auth({{"prom", kHash}}, 100);
  const auto now = BasicAuth::Clock::now();
  EXPECT_EQ(auth.check(basic("prom:s3cret"), now), Verdict::Allowed);
  EXPECT_EQ(auth.check("basic " + basic("prom:s3cret").substr(6), now), Verdict::Allowed) << "the scheme's case";
  EXPECT_EQ(auth.check(basic("prom:s3cret!"), now), Verdict::Denied);
  EXPECT_EQ(auth.check(basic("prom:"), now), Verdict::Denied);
  EXPECT_EQ(auth.check(basic("eve:s3cret"), now), Verdict::Denied);
  EXPECT_EQ(auth.check(basic("proms3cret"), now), Verdict::Denied);
  EXPECT_EQ(auth.check("", now), Verdict::Denied);
  EXPECT_EQ(auth.check("Bearer abc", now), Verdict::Denied);
  EXPECT_EQ(auth.check("Basic !!!!", now), Verdict::Denied);
  EXPECT_EQ(auth.check("Basic", now), Verdict::Denied);
}

TEST(BasicAuth, ARememberedCredentialCostsNoBcrypt) {
  BasicAuth auth({{"prom", kHash}}, 100);
  const auto now = BasicAuth::Clock::now();
  ASSERT_EQ(auth.check(basic("prom:s3cret"), now), Verdict::Allowed);
  ASSERT_EQ(auth.check(basic("prom:nope"), now), Verdict::Denied);
  const long long checks = auth.bcrypt_checks();
  EXPECT_EQ(checks, 2);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(auth.check(basic("prom:s3cret"), now), Verdict::Allowed);
    EXPECT_EQ(auth.check(basic("prom:nope"), now), Verdict::Denied);
  }
  EXPECT_EQ(auth.bcrypt_checks(), checks);
}

TEST(BasicAuth, NewGuessesAreRationedButKnownUsersStillGetIn) {
  BasicAuth auth({{"prom", kHash}}, 2);
  auto now = BasicAuth::Clock::now();
  ASSERT_EQ(auth.check(basic("prom:s3cret"), now), Verdict::Allowed);  // remembered from now on
  EXPECT_EQ(auth.check(basic("prom:guess1"), now), Verdict::Denied);
  EXPECT_EQ(auth.check(basic("prom:guess2"), now), Verdict::Busy) << "two checks a second, both spent";
  EXPECT_EQ(auth.check(basic("prom:s3cret"), now), Verdict::Allowed) << "a remembered password is not rationed";
  EXPECT_EQ(auth.bcrypt_checks(), 2);
  now += 500ms;  // one check's worth refilled
  EXPECT_EQ(auth.check(basic("prom:guess2"), now), Verdict::Denied);
  EXPECT_EQ(auth.check(basic("prom:guess3"), now), Verdict::Busy);
}

TEST(BasicAuth, ManyWrongGuessesDoNotEvictTheRightOne) {
  BasicAuth auth({{"prom", kHash}}, 1'000'000);
  const auto now = BasicAuth::Clock::now();
  ASSERT_EQ(auth.check(basic("prom:s3cret"), now), Verdict::Allowed);
  for (int i = 0; i < 1100; ++i) (void)auth.check(basic("prom:g" + std::to_string(i)), now);
  const long long checks = auth.bcrypt_checks();
  EXPECT_EQ(auth.check(basic("prom:s3cret"), now), Verdict::Allowed);
  EXPECT_EQ(auth.bcrypt_checks(), checks);
}

TEST(BcryptHash, RoundTripsThroughTheChecker) {
  auto hash = bcrypt_hash("pa'ss word", 4);
  ASSERT_TRUE(hash.ok()) << hash.error().message;
  EXPECT_TRUE(hash->starts_with("$2b$04$"));
  BasicAuth auth({{"u", *hash}}, 100);
  EXPECT_EQ(auth.check(basic("u:pa'ss word"), BasicAuth::Clock::now()), Verdict::Allowed);
  EXPECT_FALSE(bcrypt_hash(std::string(73, 'x')).ok()) << "bcrypt would silently drop the rest";
}

}  // namespace
}  // namespace tarmac::serve
