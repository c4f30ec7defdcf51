#include "tarmac/cli/table.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cli_test_support.hpp"

namespace tarmac::cli {
namespace {

std::string render(const Table& t, bool color) {
  return testing::printed([&](std::FILE* out) { t.print(out, color); });
}

TEST(Table, AlignsColumnsWithoutTrailingSpaces) {
  Table t({{"GPU", Align::Right}, {"NAME"}, {"UTIL", Align::Right}});
  t.add_row({{"0"}, {"NVIDIA A100-SXM4-40GB"}, {"96 %"}});
  t.add_row({{"10"}, {"H100"}, {""}});
  EXPECT_EQ(render(t, false),
            "GPU  NAME                   UTIL\n"
            "  0  NVIDIA A100-SXM4-40GB  96 %\n"
            " 10  H100\n");
}

TEST(Table, ColourOnlyWhenAskedAndWidthIgnoresEscapes) {
  Table t({{"A"}, {"B"}});
  t.add_row({{"busy", Style::Good}, {"x"}});
  EXPECT_EQ(render(t, false), "A     B\nbusy  x\n");
  const std::string colored = render(t, true);
  EXPECT_NE(colored.find("\033[32mbusy\033[0m  x"), std::string::npos);
}

TEST(Table, CountsUtf8AsOneCell) {
  Table t({{"T"}, {"X"}});
  t.add_row({{"68°C"}, {"y"}});
  EXPECT_EQ(render(t, false), "T     X\n68°C  y\n");
}

// A job named with terminal escapes (retitle the window, clear the screen) is shown, not obeyed.
TEST(TableEscape, ControlCharactersInCellsAreShownEscaped) {
  Table t({{"PID", Align::Right}, {"USER"}, {"COMMAND"}});
  t.add_row({{"42"}, {"mallory"}, {"\x1b]0;owned\x07\x1b[2J python\ttrain.py"}});
  const std::string text = render(t, false);
  EXPECT_FALSE(testing::has_raw_control(text)) << text;
  EXPECT_EQ(text,
            "PID  USER     COMMAND\n"
            " 42  mallory  \\x1b]0;owned\\x07\\x1b[2J python\\x09train.py\n");
}

TEST(TableEscape, InvalidUtf8AndC1ControlsAreShownEscaped) {
  Table t({{"NAME"}});
  t.add_row({{"job\x9b" "31m\xC2\x9b" "1m"}});
  EXPECT_EQ(render(t, true).find('\x9b'), std::string::npos);
  EXPECT_EQ(render(t, false), "NAME\njob\\x9b31m\\u009b1m\n");
}

}  // namespace
}  // namespace tarmac::cli
