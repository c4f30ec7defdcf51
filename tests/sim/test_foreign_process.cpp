// A scenario process with `host_pid`: a GPU process of another PID namespace (another container's),
// which NVML lists under a host PID that no local process has. The parser validates the key, the
// device model lists the process without a live entry, and the library reports it to clients.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "device_model.hpp"
#include "library_fixture.hpp"
#include "scenario_parser.hpp"
#include "test_support.hpp"

namespace tarmac::sim::test {
namespace {

constexpr unsigned kForeignPid = 4'200'001;

// The test GPUs (tests/sim/data/mixed-models.toml), GPU 2 at 10 %, and a [[process]] on GPU 2
// whose last lines are `process_keys`.
std::string scenario_with(const std::string& process_keys) {
  return read_text(test_data("mixed-models.toml")) +
         "\n[[timeline]]\ngpu = 2\nutil_gpu = 10\n\n[[process]]\ngpu = 2\nname = \"python\"\nmemory_mib = 30000\n" +
         process_keys;
}

// The line of `scenario_with(...)` at which `process_keys` start, and of the [[process]] table.
int first_key_line() {
  const std::string before = scenario_with("");
  return static_cast<int>(std::count(before.begin(), before.end(), '\n')) + 1;
}
int process_line() { return first_key_line() - 4; }

// The parser's error for `text`: "FILE:LINE:COL: message".
std::string parse_error(const std::string& text) {
  auto s = parse_scenario(text, "bad.toml");
  EXPECT_FALSE(s.ok()) << "accepted:\n" << text;
  return s.ok() ? std::string() : s.error().message;
}

TEST(ForeignProcess, HostPidIsParsed) {
  auto s = parse_scenario(scenario_with("host_pid = 4200001\n"), "ok.toml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_EQ(s->processes.size(), 1U);
  EXPECT_EQ(s->processes[0].host_pid, kForeignPid);
  auto plain = parse_scenario(scenario_with(""), "ok.toml");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_FALSE(plain->processes[0].host_pid.has_value());
}

TEST(ForeignProcess, APidThisMachineCouldHaveIsRefusedWithItsLine) {
  const std::string msg = parse_error(scenario_with("host_pid = 4194304\n"));
  EXPECT_EQ(msg.rfind(fmt::format("bad.toml:{}:", first_key_line()), 0), 0U) << msg;
  EXPECT_NE(msg.find("process[0].host_pid: 4194304 could be a PID of this machine"), std::string::npos) << msg;
}

TEST(ForeignProcess, BadValuesAreRefused) {
  EXPECT_NE(parse_error(scenario_with("host_pid = \"4200001\"\n")).find("process[0].host_pid: expected an integer"),
            std::string::npos);
  EXPECT_NE(parse_error(scenario_with("host_pid = 2147483648\n")).find("out of range"), std::string::npos);
  EXPECT_NE(parse_error(scenario_with("host_pid = 0\n")).find("out of range"), std::string::npos);
}

TEST(ForeignProcess, KeysOfAStartedProcessAreRefused) {
  const std::string user = parse_error(scenario_with("host_pid = 4200001\nuser = \"alice\"\n"));
  EXPECT_EQ(user.rfind(fmt::format("bad.toml:{}:", first_key_line() + 1), 0), 0U) << user;
  EXPECT_NE(user.find("process[0].user: a process with host_pid is never started here"), std::string::npos) << user;
  EXPECT_NE(parse_error(scenario_with("host_pid = 4200001\ncmdline = \"python x.py\"\n")).find("process[0].cmdline"),
            std::string::npos);
}

TEST(ForeignProcess, TwoProcessesCannotShareAHostPid) {
  const std::string msg = parse_error(scenario_with("host_pid = 4200001\n") +
                                      "\n[[process]]\ngpu = 0\nname = \"other\"\nmemory_mib = 10\nhost_pid = 4200001\n");
  EXPECT_NE(msg.find(fmt::format("process[1].host_pid: 4200001 is already the host_pid of the process at line {}",
                                 process_line())),
            std::string::npos)
      << msg;
}

TEST(ForeignProcess, ListedUnderItsHostPidWithoutALiveEntry) {
  auto s = parse_scenario(scenario_with("host_pid = 4200001\nsm_util = 7\n"), "ok.toml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  for (const ProcessMode mode : {ProcessMode::Live, ProcessMode::Static}) {
    const DeviceView view = evaluate_device(*s, 2, 60, {}, mode);
    ASSERT_EQ(view.processes.size(), 1U);
    EXPECT_EQ(view.processes[0].pid, kForeignPid);
    EXPECT_EQ(view.processes[0].used_bytes, 30000 * kMiB);
    EXPECT_EQ(view.processes[0].sm_util, 7U);
    EXPECT_EQ(view.used_bytes, 30000 * kMiB);
    EXPECT_EQ(view.sample.util_gpu, 10U) << "a foreign process keeps its GPU's workload alive";
  }
}

TEST(ForeignProcess, OnlyWhileItsWindowIsOpen) {
  auto s = parse_scenario(scenario_with("host_pid = 4200001\nstart = \"1h\"\n"), "ok.toml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(evaluate_device(*s, 2, 60, {}, ProcessMode::Live).processes.empty());
  EXPECT_EQ(evaluate_device(*s, 2, 3600, {}, ProcessMode::Live).processes.size(), 1U);
}

// The library under a state directory, as under the launcher: nothing registered in procs/.
class ForeignProcessLibrary : public LibraryTest {
 public:
  ForeignProcessLibrary() {
    scenario_ = dir_.path() / "foreign.toml";
    write_text(scenario_, scenario_with("host_pid = 4200001\nsm_util = 40\n"));
  }
};

TEST_F(ForeignProcessLibrary, ReportedWithItsHostPidAndMemoryButNoName) {
  nvmlProcessInfo_v2_t procs[4]{};
  unsigned count = 4;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v3)(device(2), &count, procs), NVML_SUCCESS);
  ASSERT_EQ(count, 1U);
  EXPECT_EQ(procs[0].pid, kForeignPid);
  EXPECT_EQ(procs[0].usedGpuMemory, 30000 * kMiB);
  count = 4;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v3)(device(0), &count, procs), NVML_SUCCESS);
  EXPECT_EQ(count, 0U);

  nvmlMemory_v2_t mem{};
  mem.version = nvmlMemory_v2;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMemoryInfo_v2)(device(2), &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, 30000 * kMiB);

  nvmlProcessUtilizationSample_t samples[2]{};
  count = 2;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetProcessUtilization)(device(2), samples, &count, 0), NVML_SUCCESS);
  ASSERT_EQ(count, 1U);
  EXPECT_EQ(samples[0].pid, kForeignPid);
  EXPECT_EQ(samples[0].smUtil, 40U);

  char name[64] = {};
  EXPECT_EQ(NVML(*lib_, nvmlSystemGetProcessName)(kForeignPid, name, sizeof name), NVML_ERROR_NOT_FOUND);
}

}  // namespace
}  // namespace tarmac::sim::test
