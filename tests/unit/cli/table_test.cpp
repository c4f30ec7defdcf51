#include "tarmac/cli/table.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace tarmac::cli {
namespace {

std::string render(const Table& t, bool color) {
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  t.print(out, color);
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
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

}  // namespace
}  // namespace tarmac::cli
