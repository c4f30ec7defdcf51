#include "tarmac/util/strings.hpp"

#include <gtest/gtest.h>

#include <climits>

namespace tarmac::util {
namespace {

TEST(ParseInt, TakesTheWholeStringOrNothing) {
  EXPECT_EQ(parse_int("1234"), 1234);
  EXPECT_EQ(parse_int("-7"), -7);
  for (const char* bad : {"", " 1", "1 ", "+1", "0x10", "12abc", "1.5", "-", "1\n", "99999999999999999999"}) {
    EXPECT_FALSE(parse_int(bad).has_value()) << '"' << bad << '"';
  }
}

TEST(ParseInt, ChecksTheRangeWhenGivenOne) {
  // A pid read from a file: 0 and 1 (kill(0) signals the caller's group, 1 is init) are refused.
  EXPECT_EQ(parse_int("2", 2, INT_MAX), 2);
  EXPECT_EQ(parse_int(std::to_string(INT_MAX), 2, INT_MAX), INT_MAX);
  EXPECT_FALSE(parse_int("1", 2, INT_MAX).has_value());
  EXPECT_FALSE(parse_int("0", 2, INT_MAX).has_value());
  EXPECT_FALSE(parse_int("-1", 2, INT_MAX).has_value());
  EXPECT_FALSE(parse_int(std::to_string(static_cast<long long>(INT_MAX) + 1), 2, INT_MAX).has_value());
  EXPECT_FALSE(parse_int("12x", 0, 100).has_value());
}

}  // namespace
}  // namespace tarmac::util
