#include "tarmac/util/dynamic_library.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace tarmac::util {
namespace {

constexpr const char* kEnv = "TARMAC_DYNAMIC_LIBRARY_TEST_LIB";

TEST(DynamicLibrary, AMissingLibraryIsNamedWithWhatToInstall) {
  ::unsetenv(kEnv);
  const auto lib = DynamicLibrary::open("libtarmac-no-such-library.so.7", kEnv, "install it (Debian: apt install x)");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.error().code, Error::Code::NotFound);
  const std::string& m = lib.error().message;
  EXPECT_TRUE(m.starts_with("cannot load libtarmac-no-such-library.so.7 (")) << m;
  EXPECT_TRUE(m.ends_with("): install it (Debian: apt install x)")) << m;
}

TEST(DynamicLibrary, FunctionsAreResolvedAndMissingOnesNamed) {
  ::unsetenv(kEnv);
  auto lib = DynamicLibrary::open("libc.so.6", kEnv, "");
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  decltype(&std::strlen) length = nullptr;
  lib->resolve(length, "strlen");
  ASSERT_NE(length, nullptr);
  EXPECT_EQ(length("four"), 4U);
  EXPECT_TRUE(lib->complete("a usable libc").ok());
  decltype(&std::strlen) absent = &std::strlen;
  lib->resolve(absent, "tarmac_no_such_function");
  lib->resolve(absent, "tarmac_nor_this_one");
  EXPECT_EQ(absent, nullptr);
  const auto done = lib->complete("a usable libc");
  ASSERT_FALSE(done.ok());
  EXPECT_EQ(done.error().message, "libc.so.6 is not a usable libc: it lacks tarmac_no_such_function, tarmac_nor_this_one");
}

TEST(DynamicLibrary, TheEnvironmentNamesAnotherFile) {
  ::setenv(kEnv, "/nonexistent/libother.so.1", 1);
  const auto lib = DynamicLibrary::open("libc.so.6", kEnv, "hint");
  ::unsetenv(kEnv);
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.error().message.find("/nonexistent/libother.so.1"), std::string::npos) << lib.error().message;
  ::setenv(kEnv, "", 1);  // set but empty: the default
  EXPECT_TRUE(DynamicLibrary::open("libc.so.6", kEnv, "hint").ok());
  ::unsetenv(kEnv);
}

}  // namespace
}  // namespace tarmac::util
