// Scenario files: every bundled one parses with the values the issue fixes; each kind of bad
// file gets an error that names the file, the line, the column and the problem.
#include <gtest/gtest.h>

#include <regex>

#include "scenario_parser.hpp"
#include "scenario_paths.hpp"
#include "test_support.hpp"

namespace tarmac::sim::test {
namespace {

// A minimal valid GPU table, for the bad-file cases to break one thing at a time.
const char* const kGpu = R"([[gpu]]
name = "NVIDIA A100-SXM4-40GB"
architecture = "ampere"
uuid = "GPU-16aaab6a-6e43-4884-a60d-b64116853b1d"
pci_bus_id = "00000000:07:00.0"
memory_mib = 40960
)";

Scenario parse_ok(const std::string& text) {
  auto s = parse_scenario(text, "ok.toml");
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(*s) : Scenario{};
}

// Writes `text` to a file and expects its error at `line`, mentioning `fragment`.
void expect_error(const std::string& text, int line, const std::string& fragment) {
  TempDir dir;
  const fs::path file = dir.path() / "bad.toml";
  write_text(file, text);
  auto s = load_scenario_file(file.string());
  ASSERT_FALSE(s.ok()) << "accepted:\n" << text;
  const std::string& msg = s.error().message;
  const std::regex where("^" + file.string() + ":" + std::to_string(line) + ":[0-9]+: ");
  EXPECT_TRUE(std::regex_search(msg, where)) << "expected " << file.string() << ":" << line << ":COL, got: " << msg;
  EXPECT_NE(msg.find(fragment), std::string::npos) << "expected '" << fragment << "' in: " << msg;
}

TEST(ScenarioParser, EveryBundledScenarioParses) {
  const auto bundled = bundled_scenarios({});
  ASSERT_GE(bundled.size(), 17U);
  for (const auto& b : bundled) {
    auto s = load_scenario_file(b.file.string());
    EXPECT_TRUE(s.ok()) << b.name << ": " << (s.ok() ? "" : s.error().message);
    if (s.ok()) {
      EXPECT_EQ(s->name, b.name);
    }
  }
}

TEST(ScenarioParser, BalancedA100HasTheIssuesValues) {
  auto s = load_scenario_file(bundled_scenario("a100x4-balanced").string());
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_EQ(s->gpus.size(), 4U);
  const unsigned long long used[] = {38900, 38850, 39010, 38790};
  const unsigned long long procs[] = {38500, 38600, 38400, 38700};
  for (unsigned i = 0; i < 4; ++i) {
    const GpuSpec& g = s->gpus[i];
    EXPECT_EQ(g.name, "NVIDIA A100-SXM4-40GB");
    EXPECT_EQ(g.memory_mib, 40960U);
    EXPECT_EQ(g.power_limit_w, 400.0);
    EXPECT_EQ(s->processes[i].memory_mib, procs[i]);
    EXPECT_EQ(s->processes[i].name, "python");
    EXPECT_EQ(g.memory_overhead_mib + procs[i], used[i]);
    if (i > 0) {
      EXPECT_LT(s->gpus[i - 1].pci, g.pci);  // bus order
    }
  }
  EXPECT_EQ(s->gpus[2].pci_bus_id, "00000000:47:00.0");
  EXPECT_EQ(s->topology[0][3].nvlinks, 4U);
  EXPECT_EQ(s->driver_version, "535.261.03");
  EXPECT_EQ(s->cuda_version, 12020);
}

TEST(ScenarioParser, WeeklyFleetHasItsEpochAndPeriodicWindows) {
  auto s = load_scenario_file(bundled_scenario("h100x8-idle-fleet").string());
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->gpus.size(), 8U);
  EXPECT_TRUE(s->nvswitch);
  ASSERT_TRUE(s->epoch_ns.has_value());
  EXPECT_EQ(*s->epoch_ns, 1736121600LL * 1'000'000'000LL);  // Monday 2025-01-06 00:00 UTC
  const ProcessSpec& first = s->processes.front();
  EXPECT_EQ(first.window.every, 7.0 * 86400);
  EXPECT_TRUE(first.window.contains(7 * 86400 + 10 * 3600));  // the next Monday, 10:00
  EXPECT_FALSE(first.window.contains(7 * 86400 + 18 * 3600));
}

TEST(ScenarioParser, DefaultsFillEveryGpuAndCanBeOverridden) {
  auto s = parse_ok(std::string("[gpu_defaults]\nmemory_mib = 1000\nname = \"X\"\narchitecture = \"hopper\"\n") +
                    "[[gpu]]\nuuid = \"GPU-16aaab6a-6e43-4884-a60d-b64116853b1d\"\npci_bus_id = \"07:00.0\"\n"
                    "[[gpu]]\nuuid = \"GPU-16aaab6a-6e43-4884-a60d-b64116853b1e\"\npci_bus_id = \"08:00.0\"\n"
                    "memory_mib = 2000\n");
  ASSERT_EQ(s.gpus.size(), 2U);
  EXPECT_EQ(s.gpus[0].memory_mib, 1000U);
  EXPECT_EQ(s.gpus[1].memory_mib, 2000U);
  EXPECT_EQ(s.gpus[1].pci_bus_id, "00000000:08:00.0");
  EXPECT_EQ(s.gpus[0].cc_major, 9);
  EXPECT_EQ(s.topology[0][1].level, 50);  // no NUMA nodes given: SYS
}

TEST(ScenarioParser, ReservedMemoryInBytesAsARealGpuHasIt) {
  const std::string gpu = "[[gpu]]\nname = \"X\"\narchitecture = \"hopper\"\nmemory_mib = 1000\n"
                          "uuid = \"GPU-16aaab6a-6e43-4884-a60d-b64116853b1d\"\npci_bus_id = \"07:00.0\"\n";
  auto s = parse_ok(gpu + "memory_reserved_bytes = 644939776\n");
  EXPECT_EQ(s.gpus[0].memory_reserved_bytes, 644939776ULL);
  EXPECT_EQ(s.gpus[0].memory_reserved_mib, 616U);  // rounded up, for the checks of what fits
  EXPECT_EQ(s.gpus[0].display_active, s.gpus[0].display_mode);
  expect_error(gpu + "memory_reserved_mib = 600\nmemory_reserved_bytes = 644939776\n", 8, "not both");
}

TEST(ScenarioParser, BadTomlSyntax) { expect_error("name = \"unterminated\n", 1, "Error while parsing"); }

TEST(ScenarioParser, UnknownKey) {
  expect_error(std::string(kGpu) + "memroy_mib = 5\n", 7, "unknown key 'memroy_mib'");
}

TEST(ScenarioParser, WrongType) {
  expect_error(std::string(kGpu) + "power_limit_w = \"lots\"\n", 7, "gpu[0].power_limit_w: expected a number");
}

TEST(ScenarioParser, MissingRequiredKeyPointsAtTheTable) {
  expect_error("# first line\n[[gpu]]\nname = \"x\"\narchitecture = \"ampere\"\npci_bus_id = \"07:00.0\"\n"
               "memory_mib = 1\n",
               2, "missing 'uuid'");
}

TEST(ScenarioParser, MalformedUuid) {
  expect_error("[[gpu]]\nname = \"x\"\narchitecture = \"ampere\"\nuuid = \"GPU-1234\"\npci_bus_id = \"07:00.0\"\n"
               "memory_mib = 1\n",
               4, "is not a GPU UUID");
}

TEST(ScenarioParser, GpusOutOfBusOrder) {
  std::string second(kGpu);
  second.replace(second.find("07:00.0"), 7, "05:00.0");
  second.replace(second.find("b1d\""), 4, "b1e\"");
  expect_error(std::string(kGpu) + second, 11, "list GPUs in PCI bus order");
}

TEST(ScenarioParser, ProcessOnAMissingGpu) {
  expect_error(std::string(kGpu) + "\n[[process]]\ngpu = 3\nname = \"python\"\nmemory_mib = 10\n", 9,
               "GPU 3 does not exist");
}

TEST(ScenarioParser, ProcessTooBigForItsGpu) {
  expect_error(std::string(kGpu) + "\n[[process]]\ngpu = 0\nname = \"python\"\nmemory_mib = 50000\n", 11,
               "does not fit on GPU 0");
}

TEST(ScenarioParser, RepeatingWindowNeedsAnEnd) {
  expect_error(std::string(kGpu) + "\n[[timeline]]\nfrom = \"1h\"\nevery = \"1d\"\nutil_gpu = 5\n", 10,
               "a repeating window needs 'to'");
}

TEST(ScenarioParser, BadDuration) {
  expect_error(std::string(kGpu) + "\n[[timeline]]\nfrom = \"2 hours\"\n", 9, "expected a duration");
}

TEST(ScenarioParser, UtilizationOutOfRange) {
  expect_error(std::string(kGpu) + "\n[[timeline]]\nutil_gpu = 101\n", 9, "out of range");
}

TEST(ScenarioParser, TopologyPairOutOfRange) {
  expect_error(std::string(kGpu) + "\n[topology]\nlinks = { \"0-1\" = \"NV4\" }\n", 9, "not a pair of two GPUs");
}

TEST(ScenarioParser, NvLinksBeyondTheGpusLinks) {
  std::string second(kGpu);
  second.replace(second.find("07:00.0"), 7, "08:00.0");
  second.replace(second.find("b1d\""), 4, "b1e\"");
  expect_error(std::string(kGpu) + "nvlink_links = 2\n" + second + "nvlink_links = 2\n\n[topology]\n" +
                   "links = { \"0-1\" = \"NV4\" }\n",
               16, "needs 4 NVLinks");
}

TEST(ScenarioParser, FaultWithAnUnknownReturnCode) {
  expect_error(std::string(kGpu) + "\n[[fault]]\nfunction = \"nvmlDeviceGetPowerUsage\"\nreturn = \"EXPLODED\"\n", 8,
               "not an NVML return code");
}

TEST(ScenarioParser, FaultOnAnUnknownFunction) {
  expect_error(std::string(kGpu) + "\n[[fault]]\nfunction = \"nvmlDeviceGetWarpDrive\"\nreturn = \"UNKNOWN\"\n", 8,
               "not an NVML function");
}

TEST(ScenarioParser, NoGpuAtAll) { expect_error("name = \"empty\"\n", 1, "no [[gpu]] tables"); }

TEST(ScenarioParser, InitErrorNamesAnNvmlCodeAndAllowsNoGpu) {
  const Scenario s = parse_ok("[driver]\ninit_error = \"DRIVER_NOT_LOADED\"\n");
  ASSERT_TRUE(s.init_error.has_value());
  EXPECT_EQ(*s.init_error, 9);
  EXPECT_TRUE(s.gpus.empty());
  // NVIDIA's full names are accepted too, and GPUs may still be listed.
  const Scenario t = parse_ok(std::string("[driver]\ninit_error = \"NVML_ERROR_LIB_RM_VERSION_MISMATCH\"\n") + kGpu);
  EXPECT_EQ(t.init_error, 18);
  EXPECT_EQ(t.gpus.size(), 1U);
  EXPECT_FALSE(parse_ok(kGpu).init_error.has_value());
}

TEST(ScenarioParser, InitErrorMustBeAnErrorCode) {
  expect_error("[driver]\nversion = \"535.261.03\"\ninit_error = \"NO_DRIVER\"\n", 3,
               "driver.init_error: 'NO_DRIVER' is not an NVML return code");
  expect_error("[driver]\ninit_error = \"SUCCESS\"\n", 2, "driver.init_error: SUCCESS is not an error");
  expect_error("[driver]\ninit_error = 9\n", 2, "driver.init_error: expected a string");
}

TEST(ScenarioParser, UnknownDefaultsKey) {
  expect_error(std::string("[gpu_defaults]\nfanz = 2\n") + kGpu, 2, "gpu_defaults: unknown key 'fanz'");
}

TEST(ScenarioParser, UtilSampleMustBeNamed) {
  expect_error(std::string(kGpu) + "\n[[process]]\ngpu = 0\nname = \"p\"\nmemory_mib = 1\nutil_sample = \"weird\"\n", 12,
               "is not normal, garbage or unreadable");
}

TEST(ScenarioParser, ProcessTimelineKeysAreChecked) {
  expect_error(std::string(kGpu) + "\n[[process]]\ngpu = 0\nname = \"p\"\nmemory_mib = 1\n[[process.timeline]]\n"
                                   "from = \"1m\"\nsm_util = 101\n",
               14, "sm_util");
  expect_error(std::string(kGpu) + "\n[[process]]\ngpu = 0\nname = \"p\"\nmemory_mib = 1\n[[process.timeline]]\n"
                                   "from = \"1m\"\nutil_gpu = 5\n",
               14, "util_gpu");
}

TEST(ScenarioParser, EventNeedsExactlyOneKind) {
  expect_error(std::string(kGpu) + "\n[[event]]\ngpu = 0\nat = \"1m\"\n", 8, "exactly one of");
}

}  // namespace
}  // namespace tarmac::sim::test
