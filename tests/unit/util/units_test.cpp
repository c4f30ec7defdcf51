#include "tarmac/util/units.hpp"

#include <gtest/gtest.h>

#include "tarmac/util/strings.hpp"

namespace tarmac::util {
namespace {

TEST(Units, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512 * kMiB), "512 MiB");
  EXPECT_EQ(format_bytes(38500 * kMiB), "37.6 GiB");
  EXPECT_EQ(format_bytes(40 * kGiB), "40.0 GiB");
}

TEST(Units, FormatsAgesCompactly) {
  EXPECT_EQ(format_age(45), "45s");
  EXPECT_EQ(format_age(12 * 60 + 5), "12m");
  EXPECT_EQ(format_age(3 * 3600 + 5 * 60), "3h05m");
  EXPECT_EQ(format_age(2 * 86400 + 4 * 3600), "2d04h");
  EXPECT_EQ(format_age(-5), "0s");
}

TEST(Units, ParsesDurations) {
  EXPECT_EQ(parse_duration_s("30"), 30);
  EXPECT_EQ(parse_duration_s("10m"), 600);
  EXPECT_EQ(parse_duration_s("1h30m"), 5400);
  EXPECT_EQ(parse_duration_s("7d"), 7 * 86400);
  EXPECT_EQ(parse_duration_s("2w"), 14 * 86400);
  EXPECT_FALSE(parse_duration_s(""));
  EXPECT_FALSE(parse_duration_s("10x"));
  EXPECT_FALSE(parse_duration_s("m"));
  EXPECT_FALSE(parse_duration_s("-5"));
  EXPECT_FALSE(parse_duration_s("10m5"));
  // Too long to be milliseconds in a long long: refused, not wrapped around.
  EXPECT_FALSE(parse_duration_s("99999999999999w"));
  EXPECT_FALSE(parse_duration_s("9223372036854775807"));
  EXPECT_EQ(parse_duration_s("9223372036854775s"), 9223372036854775LL);
  EXPECT_FALSE(parse_duration_s("9223372036854776s"));
  EXPECT_FALSE(parse_duration_s("9223372036854776"));
  EXPECT_FALSE(parse_duration_s("9223372036854775s1s"));
}

TEST(Units, ParsesSizes) {
  EXPECT_EQ(parse_size_bytes("20GiB"), 20 * kGiB);
  EXPECT_EQ(parse_size_bytes("512MiB"), 512 * kMiB);
  EXPECT_EQ(parse_size_bytes("1.5G"), 1536 * kMiB);
  EXPECT_EQ(parse_size_bytes("1024"), 1024 * kMiB);  // a bare number is MiB, as nvidia-smi reports
  EXPECT_FALSE(parse_size_bytes("lots"));
  EXPECT_FALSE(parse_size_bytes("5 parsecs"));
  EXPECT_FALSE(parse_size_bytes(""));
}

TEST(Strings, SplitKeepsEmptyFields) {
  EXPECT_EQ(split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(split("", ','), (std::vector<std::string>{""}));
}

TEST(Strings, ParseIntRejectsTrailingGarbage) {
  EXPECT_EQ(parse_int("42"), 42);
  EXPECT_FALSE(parse_int("42x"));
  EXPECT_FALSE(parse_int(""));
  EXPECT_FALSE(parse_int("99999999999999999999999"));
}

TEST(Strings, TrimAndCase) {
  EXPECT_EQ(trim("  x y \n"), "x y");
  EXPECT_EQ(to_lower("GPU-AbC"), "gpu-abc");
  EXPECT_TRUE(starts_with_ci("GPU-123", "gpu-"));
  const char buffer[8] = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'};  // full, no terminator
  EXPECT_EQ(from_c_buffer(buffer, sizeof buffer), "abcdefgh");
}

}  // namespace
}  // namespace tarmac::util

TEST(Units, ParsesDurationsInMilliseconds) {
  EXPECT_EQ(tarmac::util::parse_duration_ms("500ms"), 500);
  EXPECT_EQ(tarmac::util::parse_duration_ms("2.5s"), 2500);
  EXPECT_EQ(tarmac::util::parse_duration_ms("0.25"), 250);
  EXPECT_EQ(tarmac::util::parse_duration_ms("9999999999999999h"), std::nullopt);  // would overflow
  EXPECT_EQ(tarmac::util::parse_duration_ms("99999999999999999999"), std::nullopt);
  EXPECT_EQ(tarmac::util::parse_duration_ms("3"), 3000);
  EXPECT_EQ(tarmac::util::parse_duration_ms("1m30s"), 90000);
  EXPECT_EQ(tarmac::util::parse_duration_ms("0"), 0);
  EXPECT_EQ(tarmac::util::parse_duration_ms(""), std::nullopt);
  EXPECT_EQ(tarmac::util::parse_duration_ms("-1"), std::nullopt);
  EXPECT_EQ(tarmac::util::parse_duration_ms("5x"), std::nullopt);
  EXPECT_EQ(tarmac::util::parse_duration_ms("ms"), std::nullopt);
  EXPECT_EQ(tarmac::util::parse_duration_ms("5 s"), std::nullopt);
}

TEST(Units, FormatsDurationsBackToText) {
  EXPECT_EQ(tarmac::util::format_duration_ms(250), "250ms");
  EXPECT_EQ(tarmac::util::format_duration_ms(2500), "2.5s");
  EXPECT_EQ(tarmac::util::format_duration_ms(3000), "3s");
  EXPECT_EQ(tarmac::util::format_duration_ms(600000), "10m");
  EXPECT_EQ(tarmac::util::format_duration_ms(90000), "90s");
  EXPECT_EQ(tarmac::util::format_duration_ms(0), "0s");
  for (long long ms : {1LL, 999LL, 1500LL, 61000LL, 3600000LL, 86400000LL * 7}) {
    EXPECT_EQ(tarmac::util::parse_duration_ms(tarmac::util::format_duration_ms(ms)), ms) << ms;
  }
}
