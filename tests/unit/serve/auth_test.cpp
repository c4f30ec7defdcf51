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

// Enough time for every check a test makes.
constexpr BasicAuth::Ration kPlenty{1e6, 1e6};

TEST(BasicAuth, RightWrongUnknownAndMalformed) {
  BasicAuth auth({{"prom", kHash}}, kPlenty);
  const auto now = BasicAuth::Clock::now();
  const auto check = [&](const std::string& header) { return auth.check(header, "10.0.0.1", now); };
  EXPECT_EQ(check(basic("prom:s3cret")), Verdict::Allowed);
  EXPECT_EQ(check("basic " + basic("prom:s3cret").substr(6)), Verdict::Allowed) << "the scheme's case";
  EXPECT_EQ(check(basic("prom:s3cret!")), Verdict::Denied);
  EXPECT_EQ(check(basic("prom:")), Verdict::Denied);
  EXPECT_EQ(check(basic("eve:s3cret")), Verdict::Denied);
  EXPECT_EQ(check(basic("proms3cret")), Verdict::Denied);
  EXPECT_EQ(check(""), Verdict::Denied);
  EXPECT_EQ(check("Bearer abc"), Verdict::Denied);
  EXPECT_EQ(check("Basic !!!!"), Verdict::Denied);
  EXPECT_EQ(check("Basic"), Verdict::Denied);
}

TEST(BasicAuth, WhatLibcryptWouldCutIsRefusedNotChecked) {
  BasicAuth auth({{"prom", kHash}}, kPlenty);
  const auto now = BasicAuth::Clock::now();
  // libcrypt reads up to a NUL: "s3cret\0anything" would match "s3cret".
  EXPECT_EQ(auth.check(basic(std::string("prom:s3cret\0x", 13)), "p", now), Verdict::Denied);
  EXPECT_EQ(auth.check(basic("prom:s3cret\n"), "p", now), Verdict::Denied);
  EXPECT_EQ(auth.check(basic("prom:s3cret" + std::string(70, 'x')), "p", now), Verdict::Denied) << "over 72 bytes";
  EXPECT_EQ(auth.bcrypt_checks(), 0);
}

TEST(BasicAuth, ARememberedCredentialCostsNoBcrypt) {
  BasicAuth auth({{"prom", kHash}}, kPlenty);
  const auto now = BasicAuth::Clock::now();
  ASSERT_EQ(auth.check(basic("prom:s3cret"), "p", now), Verdict::Allowed);
  ASSERT_EQ(auth.check(basic("prom:nope"), "p", now), Verdict::Denied);
  const long long checks = auth.bcrypt_checks();
  EXPECT_EQ(checks, 2);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(auth.check(basic("prom:s3cret"), "q", now), Verdict::Allowed);
    EXPECT_EQ(auth.check(basic("prom:nope"), "q", now), Verdict::Denied);
  }
  EXPECT_EQ(auth.bcrypt_checks(), checks);
}

TEST(BasicAuth, EachClientHasItsOwnTimeForNewPasswords) {
  // Any check spends more than no time: one new password per client until its time refills.
  BasicAuth auth({{"prom", kHash}}, {0.0, 1e6});
  auto now = BasicAuth::Clock::now();
  EXPECT_EQ(auth.check(basic("prom:guess1"), "10.0.0.66", now), Verdict::Denied);
  EXPECT_EQ(auth.check(basic("prom:guess2"), "10.0.0.66", now), Verdict::Busy) << "its time is spent";
  EXPECT_EQ(auth.check(basic("prom:s3cret"), "10.0.0.9", now), Verdict::Allowed) << "another client is not";
  EXPECT_EQ(auth.check(basic("prom:s3cret"), "10.0.0.66", now), Verdict::Allowed)
      << "a remembered password is not rationed";
  EXPECT_EQ(auth.bcrypt_checks(), 2);
}

TEST(BasicAuth, AllClientsTogetherSpendAtMostTheirTotal) {
  BasicAuth auth({{"prom", kHash}}, {1e6, 0.0});
  const auto now = BasicAuth::Clock::now();
  EXPECT_EQ(auth.check(basic("prom:guess1"), "a", now), Verdict::Denied);
  EXPECT_EQ(auth.check(basic("prom:guess2"), "b", now), Verdict::Busy);
  EXPECT_EQ(auth.check(basic("prom:guess3"), "c", now), Verdict::Busy);
}

TEST(BasicAuth, TimeRefillsTheRation) {
  BasicAuth auth({{"prom", kHash}}, {0.5, 1e6});
  auto now = BasicAuth::Clock::now();
  int checked = 0;
  while (auth.check(basic("prom:g" + std::to_string(checked)), "a", now) != Verdict::Busy) ++checked;
  EXPECT_GE(checked, 1);
  now += std::chrono::seconds(3);  // more than enough to refill 0.5 s of bcrypt
  EXPECT_EQ(auth.check(basic("prom:again"), "a", now), Verdict::Denied);
}

TEST(BasicAuth, ManyWrongGuessesDoNotEvictTheRightOne) {
  BasicAuth auth({{"prom", kHash}}, kPlenty);
  const auto now = BasicAuth::Clock::now();
  ASSERT_EQ(auth.check(basic("prom:s3cret"), "p", now), Verdict::Allowed);
  for (int i = 0; i < 1100; ++i) (void)auth.check(basic("prom:g" + std::to_string(i)), "p", now);
  const long long checks = auth.bcrypt_checks();
  EXPECT_EQ(auth.check(basic("prom:s3cret"), "p", now), Verdict::Allowed);
  EXPECT_EQ(auth.bcrypt_checks(), checks);
}

TEST(BcryptHash, RoundTripsThroughTheChecker) {
  auto hash = bcrypt_hash("pa'ss word", 4);
  ASSERT_TRUE(hash.ok()) << hash.error().message;
  EXPECT_TRUE(hash->starts_with("$2b$04$"));
  BasicAuth auth({{"u", *hash}}, kPlenty);
  EXPECT_EQ(auth.check(basic("u:pa'ss word"), "p", BasicAuth::Clock::now()), Verdict::Allowed);
  EXPECT_FALSE(bcrypt_hash(std::string(73, 'x')).ok()) << "bcrypt would silently drop the rest";
}

}  // namespace
}  // namespace tarmac::serve
