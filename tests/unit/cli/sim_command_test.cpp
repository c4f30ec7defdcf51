#include "tarmac/cli/sim_command.hpp"

#include <gtest/gtest.h>

#include <string>

#include "cli_test_support.hpp"

namespace tarmac::cli {
namespace {

using testing::ScopedEnv;

TEST(FindSimLauncher, TheEnvironmentFirst) {
  ScopedEnv launcher("TARMAC_SIM_LAUNCHER", "/opt/sim/tarmac-sim");
  EXPECT_EQ(find_sim_launcher(), "/opt/sim/tarmac-sim");
}

TEST(FindSimLauncher, ElseBesideTheBinaryElseTheSearchPath) {
  ScopedEnv unset("TARMAC_SIM_LAUNCHER", std::nullopt);
  const std::string found = find_sim_launcher();
  EXPECT_TRUE(found == "tarmac-sim" || (found.starts_with("/") && found.ends_with("/tarmac-sim"))) << found;
  ScopedEnv empty("TARMAC_SIM_LAUNCHER", "");  // empty is unset
  EXPECT_EQ(find_sim_launcher(), found);
}

TEST(ExecSim, ALauncherThatIsNotThereIsExitThreeWithAMessage) {
  ScopedEnv launcher("TARMAC_SIM_LAUNCHER", "/nonexistent/dir/tarmac-sim");
  const auto [code, err] = testing::run_captured([] { return exec_sim({"--scenario", "x", "--", "true"}); }).code_and_err();
  EXPECT_EQ(code, 3);
  EXPECT_NE(err.find("cannot start the NVML simulator launcher /nonexistent/dir/tarmac-sim"), std::string::npos) << err;
  EXPECT_NE(err.find("TARMAC_SIM_LAUNCHER"), std::string::npos) << err;
}

}  // namespace
}  // namespace tarmac::cli
