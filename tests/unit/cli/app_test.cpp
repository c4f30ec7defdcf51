#include "tarmac/cli/app.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_test_support.hpp"

namespace tarmac::cli {
namespace {

// argv as main() gets it, from strings the test keeps alive.
class Argv {
 public:
  explicit Argv(std::vector<std::string> args) : args_(std::move(args)) {
    args_.insert(args_.begin(), "tarmac");
    for (auto& a : args_) pointers_.push_back(a.data());
    pointers_.push_back(nullptr);
  }
  [[nodiscard]] int argc() const { return static_cast<int>(args_.size()); }
  [[nodiscard]] char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> pointers_;
};

int sim_word(std::vector<std::string> args) {
  Argv a(std::move(args));
  return detail::find_sim_word(a.argc(), a.argv());
}

testing::Ran run_app_with(std::vector<std::string> args) {
  Argv a(std::move(args));
  return testing::run_captured([&] { return run(a.argc(), a.argv()); });
}

TEST(FindSimWord, OnlyAsTheSubcommand) {
  EXPECT_EQ(sim_word({"sim", "--scenario", "x"}), 1);
  EXPECT_EQ(sim_word({"--json", "--no-color", "sim", "--", "tarmac"}), 3);
  EXPECT_EQ(sim_word({"--config", "sim", "status"}), 0);      // "sim" is --config's value
  EXPECT_EQ(sim_word({"--nvml-lib", "/x.so", "sim"}), 3);
  EXPECT_EQ(sim_word({"status", "sim"}), 0);                  // another subcommand's argument
  EXPECT_EQ(sim_word({"--", "sim"}), 0);
  EXPECT_EQ(sim_word({}), 0);
  EXPECT_EQ(sim_word({"--config"}), 0);                       // a value that is missing
}

TEST(Run, VersionAndHelpExitZero) {
  const auto version = run_app_with({"--version"});
  EXPECT_EQ(version.code, kExitOk);
  EXPECT_TRUE(version.out.starts_with("tarmac ")) << version.out;
  EXPECT_EQ(run_app_with({"--help"}).code, kExitOk);
}

TEST(Run, ABadCommandLineIsExitTwo) {
  EXPECT_EQ(run_app_with({"--frobnicate"}).code, kExitUsage);
  EXPECT_EQ(run_app_with({"no-such-command"}).code, kExitUsage);
  EXPECT_EQ(run_app_with({"status", "--holding-after", "soon"}).code, kExitUsage);
  EXPECT_EQ(run_app_with({"watch", "-n", "0"}).code, kExitUsage);
  EXPECT_EQ(run_app_with({"export", "--format", "xml"}).code, kExitUsage);
  EXPECT_EQ(run_app_with({"history", "--level", "seconds"}).code, kExitUsage);
}

TEST(Run, AConfigurationThatCannotBeReadIsExitTwo) {
  testing::TempDir dir;
  const auto r = run_app_with({"--config", dir / "absent.toml", "status"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("absent.toml"), std::string::npos) << r.err;
  EXPECT_EQ(run_app_with({"--config", dir / "absent.toml"}).code, kExitUsage);  // plain `tarmac` is status
}

TEST(Run, ConfigDefaultsNeedNoFile) {
  const auto r = run_app_with({"config", "--defaults"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(r.out.starts_with("# tarmac configuration: the defaults\n")) << r.out;
}

TEST(Run, SimWithoutItsLauncherIsExitThree) {
  testing::ScopedEnv launcher("TARMAC_SIM_LAUNCHER", "/nonexistent/tarmac-sim");
  const auto r = run_app_with({"sim", "list"});
  EXPECT_EQ(r.code, kExitCouldNotLook);
  EXPECT_NE(r.err.find("/nonexistent/tarmac-sim"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tarmac::cli
