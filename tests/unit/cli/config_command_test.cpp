#include "tarmac/cli/config_command.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "cli_test_support.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::cli {
namespace {

using testing::ConfigFixture;

// A file that sets a key of each kind, and one key that does not exist.
constexpr const char* kSomeSettings =
    "[agent]\ninterval = \"2s\"\n[activity]\nbusy_util_pct = 40\n[alerts]\ncommand = \"/usr/bin/notify --to ops\"\n"
    "[bogus]\nx = 1\n";

// The configuration of `fixture` (its warning about [bogus] kept off the test's output).
config::Loaded load_fixture(const ConfigFixture& fixture) {
  auto [loaded, err] = testing::load_printing(fixture.global);
  if (!loaded.ok()) throw std::runtime_error(loaded.error().message);
  return std::move(*loaded);
}

TEST(ConfigToml, TheDefaultsWithTheirDocumentation) {
  const std::string text = detail::config_toml(config::Config{}, {});
  EXPECT_TRUE(text.starts_with("# tarmac configuration: the defaults\n# Every key is documented")) << text;
  EXPECT_NE(text.find("\n[activity]\n# "), std::string::npos) << text;
  EXPECT_NE(text.find("\nholding_after = \"10m\"\n"), std::string::npos) << text;
}

// What `tarmac config` prints is a configuration file: read back, it gives the same values.
TEST(ConfigToml, ReadsBackToTheSameValues) {
  ConfigFixture first(kSomeSettings);
  const auto loaded = load_fixture(first);
  const std::string toml = detail::config_toml(loaded.config, loaded.files);
  EXPECT_NE(toml.find("# tarmac configuration: the defaults, then " + first.global.config + "\n"), std::string::npos);
  ConfigFixture second(toml);
  const auto again = load_fixture(second);
  EXPECT_TRUE(again.warnings.empty()) << again.warnings.front();
  for (const auto& key : config::keys()) {
    EXPECT_EQ(config::value_text(again.config, key), config::value_text(loaded.config, key)) << key.name;
  }
  EXPECT_EQ(again.config.activity.busy_util_pct, 40U);
}

// A configuration file is hostile input too: a value written with TOML's \u escapes held control
// characters that `tarmac config` printed raw to the terminal, and that made `tarmac --json config`
// die on its own output (nlohmann refuses a raw control character in a string).
TEST(ConfigToml, ControlCharactersInValuesAreEscapesNotBytes) {
  ConfigFixture fixture("[alerts]\ncommand = \"notify \\u001b]0;owned\\u0007\\u009b2J \\u202e\\tx\"\n");
  const auto loaded = load_fixture(fixture);
  const std::string expected_value = "notify \x1b]0;owned\x07\xC2\x9b" "2J \xE2\x80\xAE\tx";
  ASSERT_EQ(loaded.config.alerts.command, expected_value);

  const std::string toml = detail::config_toml(loaded.config, loaded.files);
  EXPECT_EQ(toml.find('\x1b'), std::string::npos) << toml;
  EXPECT_EQ(toml.find('\x07'), std::string::npos) << toml;
  EXPECT_EQ(toml.find("\xC2\x9b"), std::string::npos) << toml;
  EXPECT_EQ(toml.find("\xE2\x80\xAE"), std::string::npos) << toml;
  ConfigFixture reread(toml);
  EXPECT_EQ(load_fixture(reread).config.alerts.command, expected_value);

  nlohmann::json j;
  ASSERT_NO_THROW(j = detail::config_json(loaded));
  EXPECT_EQ(j["values"]["alerts.command"], expected_value);
}

TEST(ConfigJson, FilesWarningsAndTypedValues) {
  ConfigFixture fixture(kSomeSettings);
  const auto loaded = load_fixture(fixture);
  const auto j = detail::config_json(loaded);
  EXPECT_EQ(j["files"], nlohmann::json::array({fixture.global.config}));
  ASSERT_EQ(j["warnings"].size(), 1U);
  EXPECT_NE(j["warnings"][0].get<std::string>().find("unknown section 'bogus'"), std::string::npos);
  EXPECT_EQ(j["values"]["agent.interval"], "2s");
  EXPECT_EQ(j["values"]["activity.busy_util_pct"], 40);
  EXPECT_EQ(j["values"].size(), config::keys().size());
  EXPECT_NO_THROW((void)detail::config_json(config::Loaded{}));
}

TEST(ConfigCheck, WhichFilesAndHowManyWarnings) {
  EXPECT_EQ(detail::config_check_text(config::Loaded{}),
            "no configuration file (looked for /etc/tarmac/tarmac.toml and $XDG_CONFIG_HOME/tarmac/tarmac.toml): the "
            "defaults apply\n");
  ConfigFixture fixture(kSomeSettings);
  auto loaded = load_fixture(fixture);
  EXPECT_EQ(detail::config_check_text(loaded), "configuration ok: " + fixture.global.config + " (1 warning)\n");
  loaded.warnings.push_back("another");
  EXPECT_EQ(detail::config_check_text(loaded), "configuration ok: " + fixture.global.config + " (2 warnings)\n");
  loaded.warnings.clear();
  EXPECT_EQ(detail::config_check_text(loaded), "configuration ok: " + fixture.global.config + "\n");
}

TEST(ConfigCommand, ABadFileIsAUsageError) {
  ConfigFixture fixture("[activity]\nbusy_util_pct = \"lots\"\n");
  const auto ran = testing::run_captured(
      [&] { return testing::run_command_line(add_config_command, fixture.global, {"config", "--check"}); });
  EXPECT_EQ(ran.code, kExitUsage);
  EXPECT_NE(ran.err.find("busy_util_pct"), std::string::npos) << ran.err;
}

}  // namespace
}  // namespace tarmac::cli
