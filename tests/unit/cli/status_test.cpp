#include "tarmac/cli/status.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include "../alerts/test_support.hpp"
#include "cli_test_support.hpp"
#include "tarmac/cli/status_source.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {
namespace {

using alerts::testing::device;
using testing::printed;
using testing::ScopedEnv;

constexpr long long kStatusNowMs = 1736154000000;  // 2025-01-06 09:00:00 UTC

gpu::GpuProcess status_process(unsigned pid, const std::string& user, const std::string& command) {
  auto p = alerts::testing::process(pid, 1024, user, command);
  p.host.visibility = host::PidVisibility::Visible;
  return p;
}

// GPU 0 at `util` %, holding 20000 MiB, at kStatusNowMs.
gpu::Snapshot one_gpu_at(unsigned util) {
  gpu::Snapshot snap;
  snap.timestamp_unix_ms = kStatusNowMs;
  snap.devices.push_back(device(0, util, 20000));
  return snap;
}

std::string status_text(const gpu::Snapshot& snap) {
  const auto classes = classify_all(snap, gpu::ActivityThresholds{});
  return printed([&](std::FILE* out) { print_status(out, snap, classes, false); });
}

TEST(StatusCells, MissingReadingsAreADash) {
  const gpu::Device bare;
  EXPECT_EQ(detail::memory_cell(bare), "-");
  EXPECT_EQ(detail::power_cell(bare), "-");
  EXPECT_EQ(detail::events_cell(bare), "-");
  EXPECT_EQ(detail::short_bus_id(std::nullopt), "-");
  EXPECT_EQ(detail::container_cell(host::ProcessInfo{}), "-");
}

TEST(StatusCells, MemoryBarAndGiB) {
  auto d = device(0, 50, 20480, 60, 40960);
  EXPECT_EQ(detail::memory_cell(d), "[#####-----] 20.0/40.0 GiB");
  d.sample.mem_used_bytes = 0;
  EXPECT_EQ(detail::memory_cell(d), "[----------] 0.0/40.0 GiB");
  d.id.mem_total_bytes = 0;  // a total of zero is no total: no division by it
  EXPECT_EQ(detail::memory_cell(d), "-");
}

// A device (or a scenario) that reports more used than total shows a full bar. The old code turned
// the fraction into an int before clamping it: out of range, undefined, and an empty bar on x86.
TEST(StatusCells, MoreUsedThanTotalIsAFullBarNotAnOverflow) {
  auto d = device(0, 50, 0, 60, 1);
  d.sample.mem_used_bytes = std::numeric_limits<std::uint64_t>::max();
  const std::string cell = detail::memory_cell(d);
  EXPECT_TRUE(cell.starts_with("[##########] ")) << cell;
}

TEST(StatusCells, PowerWithAndWithoutItsLimit) {
  gpu::Device d;
  d.sample.power_mw = 251'400;
  EXPECT_EQ(detail::power_cell(d), "251 W");
  d.modes.power_limit_mw = 400'000;
  EXPECT_EQ(detail::power_cell(d), "251/400 W");
  d.modes.enforced_power_limit_mw = 300'000;  // the enforced limit wins over the configured one
  EXPECT_EQ(detail::power_cell(d), "251/300 W");
  d.sample.power_mw.reset();
  EXPECT_EQ(detail::power_cell(d), "-/300 W");
}

TEST(StatusCells, ClockEventsLeaveOutIdle) {
  gpu::Device d;
  d.sample.clock_event_reasons = 0x1;
  EXPECT_EQ(detail::events_cell(d), "-");
  d.sample.clock_event_reasons = 0x1 | 0x4 | 0x40;
  EXPECT_EQ(detail::events_cell(d), "power cap,HW thermal");
  d.sample.clock_event_reasons = std::numeric_limits<std::uint64_t>::max();  // unknown bits are ignored
  EXPECT_NE(detail::events_cell(d).find("power brake"), std::string::npos);
}

TEST(StatusCells, BusIdDropsAZeroDomainOnly) {
  EXPECT_EQ(detail::short_bus_id("00000000:07:00.0"), "07:00.0");
  EXPECT_EQ(detail::short_bus_id("00000001:07:00.0"), "00000001:07:00.0");
  EXPECT_EQ(detail::short_bus_id("weird"), "weird");
  EXPECT_EQ(detail::short_bus_id(""), "");
}

TEST(StatusCells, ContainerPodAndSlurm) {
  host::ProcessInfo h;
  h.container = host::ContainerRef{.runtime = "docker", .id = "0123456789abcdef0123", .pod_uid = std::nullopt};
  EXPECT_EQ(detail::container_cell(h), "docker 0123456789ab");
  h.container->pod_uid = "deadbeef-1234-5678";
  h.slurm_job_id = "4242";
  EXPECT_EQ(detail::container_cell(h), "pod deadbeef slurm 4242");
  h.container.reset();
  EXPECT_EQ(detail::container_cell(h), "slurm 4242");
}

TEST(PrintStatus, NoGpuSaysSo) {
  gpu::Snapshot snap;
  snap.timestamp_unix_ms = kStatusNowMs;
  const std::string text = status_text(snap);
  EXPECT_NE(text.find("driver -  CUDA -  0 GPUs  "), std::string::npos) << text;
  EXPECT_NE(text.find("No NVIDIA GPU is visible"), std::string::npos) << text;
}

TEST(PrintStatus, ABareDeviceShowsDashesAndNoProcesses) {
  gpu::Snapshot snap;
  snap.timestamp_unix_ms = kStatusNowMs;
  snap.driver_version = "550.54.15";
  snap.cuda_driver_version = 12040;
  snap.devices.push_back(gpu::Device{});
  const std::string text = status_text(snap);
  EXPECT_NE(text.find("driver 550.54.15  CUDA 12.4  1 GPU  "), std::string::npos) << text;
  EXPECT_NE(text.find("\n  0  -     -    -"), std::string::npos) << text;
  EXPECT_NE(text.find("No processes on any GPU."), std::string::npos) << text;
}

TEST(PrintStatus, ALostGpuIsAFault) {
  auto snap = one_gpu_at(0);
  snap.devices[0].lost = "fell off the bus";
  const std::string text = status_text(snap);
  EXPECT_NE(text.find("GPU lost: fell off the bus"), std::string::npos) << text;
  EXPECT_NE(text.find("fault"), std::string::npos) << text;
}

// Every input is hostile: users pick their process names and command lines.
TEST(PrintStatus, HostileProcessNamesAndUsersAreShownEscaped) {
  auto snap = one_gpu_at(90);
  snap.devices[0].processes.push_back(status_process(4242, "mal\x1b[31mlory", "\x1b]0;owned\x07python\rtrain.py"));
  const std::string text = status_text(snap);
  EXPECT_FALSE(testing::has_raw_control(text)) << text;
  EXPECT_NE(text.find("\\x1b]0;owned\\x07python\\x0dtrain.py"), std::string::npos) << text;
  EXPECT_NE(text.find("mal\\x1b[31mlory"), std::string::npos) << text;
}

TEST(PrintStatus, AProcessOfAnotherNamespaceSaysSo) {
  auto snap = one_gpu_at(90);
  auto p = alerts::testing::process(77, 1024, "alice", "python secret.py");
  p.host.visibility = host::PidVisibility::NotInNamespace;
  snap.devices[0].processes.push_back(p);
  const std::string text = status_text(snap);
  EXPECT_NE(text.find("(PID not visible here"), std::string::npos) << text;
  EXPECT_EQ(text.find("secret.py"), std::string::npos) << text;
}

TEST(PrintStatus, ProcessAgeAndMemory) {
  auto snap = one_gpu_at(90);
  auto p = status_process(10, "alice", "python train.py");
  p.host.start_time_unix = kStatusNowMs / 1000 - 3 * 3600;
  snap.devices[0].processes.push_back(p);
  const std::string text = status_text(snap);
  EXPECT_NE(text.find(util::format_bytes(1024 * util::kMiB)), std::string::npos) << text;
  EXPECT_NE(text.find(util::format_age(3 * 3600)), std::string::npos) << text;
}

TEST(PrintCudaVisibility, UnsetPrintsNothing) {
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpu::Snapshot snap;
  snap.devices.push_back(device(0, 0, 0));
  EXPECT_EQ(printed([&](std::FILE* out) { print_cuda_visibility(out, snap, false); }), "");
}

TEST(PrintCudaVisibility, MapsCudaOrdinalsToGpus) {
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", "1");
  ScopedEnv order("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  gpu::Snapshot snap;
  snap.devices = {device(0, 0, 0), device(1, 0, 0)};
  EXPECT_EQ(printed([&](std::FILE* out) { print_cuda_visibility(out, snap, false); }),
            "CUDA_VISIBLE_DEVICES=1 (PCI_BUS_ID order): a CUDA program started here sees cuda:0 = GPU 1\n");
}

// The variable comes from whatever environment the shell inherited (a job script, a module file).
TEST(PrintCudaVisibility, AHostileValueIsShownEscaped) {
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", "\x1b]0;owned\x07");
  ScopedEnv order("CUDA_DEVICE_ORDER", std::nullopt);
  gpu::Snapshot snap;
  snap.devices.push_back(device(0, 0, 0));
  const std::string text = printed([&](std::FILE* out) { print_cuda_visibility(out, snap, false); });
  EXPECT_FALSE(testing::has_raw_control(text)) << text;
  EXPECT_NE(text.find("CUDA_VISIBLE_DEVICES=\\x1b]0;owned\\x07"), std::string::npos) << text;
}

TEST(StatusJson, MissingValuesAreNullAndEveryGpuHasItsClass) {
  gpu::Snapshot snap;
  snap.timestamp_unix_ms = kStatusNowMs;
  snap.devices = {gpu::Device{}, device(1, 95, 30000)};
  const auto classes = classify_all(snap, gpu::ActivityThresholds{});
  const auto j = detail::status_json(snap, classes, std::nullopt, std::nullopt);
  EXPECT_EQ(j["timestamp_unix_ms"], kStatusNowMs);
  EXPECT_TRUE(j["driver_version"].is_null());
  EXPECT_TRUE(j["cuda_driver_version"].is_null());
  EXPECT_TRUE(j["cuda_visible_devices"].is_null());
  ASSERT_EQ(j["gpus"].size(), 2U);
  EXPECT_TRUE(j["gpus"][0]["util_gpu_pct"].is_null());
  EXPECT_EQ(j["gpus"][1]["activity"], gpu::to_string(classes[1]));
  EXPECT_TRUE(j["verdicts"].is_array());
}

TEST(StatusJson, ZeroGpus) {
  gpu::Snapshot snap;
  const auto j = detail::status_json(snap, {}, std::nullopt, std::nullopt);
  EXPECT_TRUE(j["gpus"].is_array());
  EXPECT_TRUE(j["gpus"].empty());
}

TEST(StatusJson, CudaVisibleDevicesWithAProblem) {
  gpu::Snapshot snap;
  snap.devices = {device(0, 0, 0), device(1, 0, 0)};
  const auto j = detail::status_json(snap, classify_all(snap, {}), std::string("1,7"), std::string("PCI_BUS_ID"));
  const auto& cuda = j["cuda_visible_devices"];
  EXPECT_EQ(cuda["value"], "1,7");
  EXPECT_EQ(cuda["pci_bus_order"], true);
  EXPECT_EQ(cuda["gpu_of_cuda"], nlohmann::json::array({1}));
  EXPECT_TRUE(cuda["problem"].is_string());
}

// Invalid UTF-8 in a process's command line must not make the JSON document throw.
TEST(StatusJson, InvalidUtf8IsReplacedWhenWritten) {
  gpu::Snapshot snap;
  snap.devices.push_back(device(0, 90, 20000));
  snap.devices[0].processes.push_back(status_process(5, "bob", "python \xff\xfe.py"));
  const auto j = detail::status_json(snap, classify_all(snap, {}), std::nullopt, std::nullopt);
  const std::string text = util::json_text(j);
  EXPECT_NE(text.find("python \xEF\xBF\xBD\xEF\xBF\xBD.py"), std::string::npos) << text;
}

TEST(StatusThresholds, ConfigurationThenCommandLine) {
  testing::ConfigFixture config("[activity]\nholding_after = \"20m\"\nbusy_util_pct = 40\n");
  StatusOptions options;
  ASSERT_TRUE(resolve_thresholds(config.global, options));
  EXPECT_EQ(options.thresholds.holding_after_s, 20 * 60);
  EXPECT_EQ(options.thresholds.busy_util_pct, 40U);
  options.holding_after_s = 90;
  ASSERT_TRUE(resolve_thresholds(config.global, options));
  EXPECT_EQ(options.thresholds.holding_after_s, 90);
}

TEST(StatusThresholds, ABadConfigurationFails) {
  testing::ConfigFixture config("[activity]\nbusy_util_pct = \"lots\"\n");
  StatusOptions options;
  EXPECT_FALSE(resolve_thresholds(config.global, options));
}

TEST(StatusCommand, HoldingAfterMustBeADuration) {
  testing::ConfigFixture config;
  EXPECT_EQ(testing::run_command_line(add_status_command, config.global, {"status", "--holding-after", "soon"}),
            kExitUsage);
  EXPECT_EQ(testing::run_command_line(add_status_command, config.global, {"status", "--holding-after", "-5m"}),
            kExitUsage);
}

}  // namespace
}  // namespace tarmac::cli

namespace tarmac::cli {
namespace {

TEST(LeaseLabel, NamesTheFilesOwnerUnlessRootWroteIt) {
  sched::Lease lease;
  lease.job_id = "12";
  lease.user = "alice";
  lease.file_uid = 0;  // the agent's, for the user it serves
  EXPECT_EQ(lease_label(lease), "job 12 alice");
  lease.job_id.clear();
  EXPECT_EQ(lease_label(lease), "lease alice");
  lease.job_id = "-";  // a lease file's "no job"
  EXPECT_EQ(lease_label(lease), "lease alice");
  // Any other writer's word for who it is, is not taken: "root" in uid 4000123's file is uid 4000123.
  lease.user = "root";
  lease.job_id = "7";
  lease.file_uid = 4000123;
  EXPECT_EQ(lease_label(lease), "job 7 4000123");
}

}  // namespace
}  // namespace tarmac::cli
