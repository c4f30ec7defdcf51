// `tarmac agent` through its public entry (add_agent_command): the flags that are refused before
// anything starts, and --check-config, which prints the effective settings and starts nothing.
#include "tarmac/cli/agent_command.hpp"

#include <gtest/gtest.h>

#include <string>

#include "cli_test_support.hpp"
#include "tarmac/store/recorder.hpp"

namespace tarmac::cli {
namespace {

using testing::ConfigFixture;
using testing::ScopedEnv;

class AgentCommand : public ::testing::Test {
 protected:
  testing::Ran agent(std::vector<std::string> args) {
    args.insert(args.begin(), "agent");
    return testing::run_captured([&] { return testing::run_command_line(add_agent_command, config_.global, args); });
  }
  ConfigFixture config_;
  ScopedEnv socket_{"TARMAC_SOCKET", std::nullopt};
  ScopedEnv sim_state_{"TARMAC_SIM_STATE", std::nullopt};
};

TEST_F(AgentCommand, DurationsBelowTheirMinimumAreRefused) {
  EXPECT_EQ(agent({"--interval", "50ms"}).err, "tarmac: --interval 50ms: expected a duration of at least 100ms\n");
  EXPECT_EQ(agent({"--interval", "50ms"}).code, kExitUsage);
  EXPECT_EQ(agent({"--process-interval", "often"}).code, kExitUsage);
  EXPECT_EQ(agent({"--flush", "0"}).code, kExitUsage);
  EXPECT_EQ(agent({"--duration", "0"}).err, "tarmac: --duration 0: expected a duration of at least 1ms\n");
}

TEST_F(AgentCommand, ListenMustBeHostPortOrOff) {
  const auto r = agent({"--listen", "nowhere"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "tarmac: --listen nowhere: expected host:port (like 127.0.0.1:9478) or off\n");
  EXPECT_EQ(agent({"--listen", "127.0.0.1:0"}).code, kExitUsage);  // port 1 to 65535
}

TEST_F(AgentCommand, ClockIsRealOrSimAndSimNeedsTheSimulator) {
  EXPECT_EQ(agent({"--clock", "wall"}).code, kExitUsage);
  const auto r = agent({"--clock", "sim"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--clock sim needs the simulator's state directory (TARMAC_SIM_STATE)"), std::string::npos)
      << r.err;
}

TEST_F(AgentCommand, CheckConfigPrintsTheEffectiveSettings) {
  const auto r = agent({"--check-config", "--interval", "2s", "--flush", "10s", "--state-dir", "/srv/tarmac-state",
                        "--listen", "off", "--socket", "off"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("configuration ok: " + config_.global.config + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("agent: every 2s (processes every "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("flush every 10s, real clock\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("store: " + store::database_path("/srv/tarmac-state") + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("http: off\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("scheduler: off\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("retention: samples "), std::string::npos) << r.out;
}

TEST_F(AgentCommand, CheckConfigNamesTheListenerAndTheSocket) {
  const auto r = agent({"--check-config", "--listen", "127.0.0.1:9478", "--socket", "/srv/agent.sock", "--clock", "sim"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("http: http://127.0.0.1:9478/ (/metrics, /api/v1, /healthz)\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("scheduler: socket /srv/agent.sock, leases in "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", simulator clock\n"), std::string::npos) << r.out;
}

TEST_F(AgentCommand, ABadConfigurationIsRefused) {
  ConfigFixture bad("[agent]\ninterval = \"often\"\n");
  config_.global = bad.global;
  const auto r = agent({"--check-config"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("interval"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tarmac::cli
