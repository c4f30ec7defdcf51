// Root's configuration must be a file only root can change (issue 13, item 14).
#include "tarmac/config/config.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>  // mkdtemp, setenv
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace tarmac::config {
namespace {

TEST(ConfigTrust, RootRefusesAUsersFileNamingItAndWhy) {
  if (::geteuid() != 0) GTEST_SKIP() << "the checks apply to root";
  std::string pattern = (std::filesystem::temp_directory_path() / "tarmac-cfg-XXXXXX").string();
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  const std::string dir = pattern;
  const std::string file = dir + "/tarmac.toml";
  std::ofstream(file) << "[alerts]\ncommand = \"/bin/sh -c id\"\n";
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);

  auto loaded = load(file);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().code, Error::Code::Invalid);
  EXPECT_NE(loaded.error().message.find("refusing the configuration file " + file +
                                        ": it is owned by uid 65534, not by root"),
            std::string::npos)
      << loaded.error().message;

  // The same file through XDG_CONFIG_HOME (sudo -E) is refused the same way.
  std::filesystem::create_directory(dir + "/tarmac");
  std::filesystem::rename(file, dir + "/tarmac/tarmac.toml");
  const char* old = std::getenv("XDG_CONFIG_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CONFIG_HOME", dir.c_str(), 1);
  auto defaults = load(std::nullopt);
  if (old) ::setenv("XDG_CONFIG_HOME", saved.c_str(), 1); else ::unsetenv("XDG_CONFIG_HOME");
  ASSERT_FALSE(defaults.ok());
  EXPECT_NE(defaults.error().message.find(dir + "/tarmac/tarmac.toml: it is owned by uid 65534"), std::string::npos)
      << defaults.error().message;

  // Given back to root, it is read.
  ASSERT_EQ(::chown((dir + "/tarmac/tarmac.toml").c_str(), 0, 0), 0);
  auto ok = load(dir + "/tarmac/tarmac.toml");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->config.alerts.command, "/bin/sh -c id");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace tarmac::config
