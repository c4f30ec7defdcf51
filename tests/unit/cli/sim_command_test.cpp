#include "tarmac/cli/sim_command.hpp"
#include "tarmac/cli/sim_capture.hpp"

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

// A captured command line is another user's words: TOML-escaped, never able to end its string.
TEST(SimCapture, CommandLinesAreEscapedAndReducedToTheirProgramByDefault) {
  gpu::Snapshot snap;
  snap.driver_version = "550.54.15";
  gpu::Device d;
  d.id.index = 0;
  d.id.name = "NVIDIA A100-SXM4-40GB";
  d.id.architecture = "Ada Lovelace";
  d.id.cpu_affinity = {0, 1, 2, 3, 8, 10, 11};
  d.sample.clock_event_reasons = 0x1 | 0x40;
  gpu::GpuProcess p;
  p.pid = 7;
  p.used_mem_bytes = 2048ULL << 20;
  p.host.name = "python";
  p.host.command_line = "/usr/bin/python3 x.py --token \"s3cret\"\n[[gpu]]";
  d.processes.push_back(p);
  snap.devices.push_back(d);
  const std::string plain = detail::scenario_of(snap, false, "node-1");
  EXPECT_NE(plain.find("cmdline = \"python3 [args removed]\""), std::string::npos) << plain;
  EXPECT_EQ(plain.find("s3cret"), std::string::npos);
  EXPECT_NE(plain.find("architecture = \"ada\""), std::string::npos);
  EXPECT_NE(plain.find("cpus = \"0-3,8,10-11\""), std::string::npos) << plain;
  EXPECT_NE(plain.find("throttle_reasons = [\"gpu_idle\", \"hw_thermal\"]"), std::string::npos) << plain;
  EXPECT_NE(plain.find("memory_mib = 2048"), std::string::npos);
  const std::string kept = detail::scenario_of(snap, true, "node-1");
  EXPECT_NE(kept.find("cmdline = \"/usr/bin/python3 x.py --token \\\"s3cret\\\"\\u000A[[gpu]]\""), std::string::npos) << kept;
}

}  // namespace
}  // namespace tarmac::cli
