// The shared clock (speed, file round trip) and the timeline: layered segments, repeating
// windows, idle defaults, killed workloads, load programs, energy.
#include <gtest/gtest.h>

#include "clock.hpp"
#include "device_model.hpp"
#include "registry.hpp"
#include "scenario_parser.hpp"
#include "test_support.hpp"
#include "timeline.hpp"

namespace tarmac::sim::test {
namespace {

long long g_fake_now = 0;
long long fake_now() { return g_fake_now; }

constexpr long long kSecond = 1'000'000'000LL;

TEST(SimClock, RunsSpeedTimesFasterThanRealTime) {
  g_fake_now = 1000 * kSecond;
  const SimClock clock(ClockSpec{1000 * kSecond, 60.0, 5 * kSecond}, &fake_now);
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.0);
  g_fake_now += 2 * kSecond;
  EXPECT_DOUBLE_EQ(clock.seconds(), 120.0);
  EXPECT_EQ(clock.wall_ns(), 125 * kSecond);  // the simulated wall clock starts at the epoch
  EXPECT_EQ(clock.real_ns_until(180.0), kSecond);
  EXPECT_EQ(clock.real_ns_until(60.0), 0);
  g_fake_now = 0;  // before the start: time does not run backwards past 0
  EXPECT_DOUBLE_EQ(clock.seconds(), 0.0);
}

TEST(SimClock, FileRoundTripSharesTheClock) {
  TempDir dir;
  const ClockSpec spec{123456789LL * kSecond, 3600.0, 42 * kSecond};
  ASSERT_TRUE(write_clock_file(dir.path() / "clock", spec).ok());
  auto read = read_clock_file(dir.path() / "clock");
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(read->start_real_ns, spec.start_real_ns);
  EXPECT_DOUBLE_EQ(read->speed, 3600.0);
  EXPECT_EQ(read->epoch_ns, spec.epoch_ns);
  write_text(dir.path() / "bad", "speed=fast\n");
  EXPECT_FALSE(read_clock_file(dir.path() / "bad").ok());
}

TEST(Timeline, LaterSegmentsOverrideOnlyTheirKeys) {
  auto s = parse_scenario(R"([[gpu]]
name = "x"
architecture = "ampere"
uuid = "GPU-16aaab6a-6e43-4884-a60d-b64116853b1d"
pci_bus_id = "07:00.0"
memory_mib = 1000
[[timeline]]
util_gpu = 50
temp_c = 60
[[timeline]]
from = "10m"
to = "20m"
util_gpu = 90
)", "t.toml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(merged_values(*s, 0, 0).util_gpu, 50U);
  EXPECT_EQ(merged_values(*s, 0, 15 * 60).util_gpu, 90U);
  EXPECT_EQ(merged_values(*s, 0, 15 * 60).temp_c, 60U);  // kept from the first segment
  EXPECT_EQ(merged_values(*s, 0, 20 * 60).util_gpu, 50U);  // `to` is exclusive
}

TEST(Timeline, RepeatingWindowsFollowTheirPeriod) {
  const Scenario s = mixed_models();
  const double day = 86400;
  EXPECT_FALSE(merged_values(s, 2, 0.5 * 3600).util_gpu.has_value());
  EXPECT_EQ(merged_values(s, 2, 1.5 * 3600).util_gpu, 90U);
  EXPECT_EQ(merged_values(s, 2, 3 * day + 1.5 * 3600).util_gpu, 90U);
  EXPECT_FALSE(merged_values(s, 2, 3 * day + 2.5 * 3600).util_gpu.has_value());
  const Window w{3600, 7200, day};
  EXPECT_EQ(w.occurrence(3 * day + 4000), 3);
  EXPECT_FALSE(w.occurrence(3 * day + 100).has_value());
}

TEST(Timeline, UnsetValuesFallBackToTheIdleState) {
  const Scenario s = mixed_models();
  const GpuSample idle = resolve_sample(s.gpus[2], merged_values(s, 2, 0), Activity{});
  EXPECT_EQ(idle.util_gpu, 0U);
  EXPECT_DOUBLE_EQ(idle.power_w, 55.0);
  EXPECT_EQ(idle.pstate, 8U);
  EXPECT_EQ(idle.throttle_reasons, 0x1ULL);  // GPU idle
  EXPECT_EQ(idle.clocks.sm, 210U);
  const GpuSample busy = resolve_sample(s.gpus[2], merged_values(s, 2, 5400), Activity{});
  EXPECT_EQ(busy.util_gpu, 90U);
  EXPECT_EQ(busy.pstate, 0U);
  EXPECT_EQ(busy.throttle_reasons, 0ULL);
  EXPECT_EQ(busy.clocks.sm, 1410U);  // busy without explicit clocks: the maximum
}

TEST(Timeline, EnergyIntegratesThePowerTimeline) {
  const Scenario s = mixed_models();
  EXPECT_DOUBLE_EQ(timeline_energy_j(s, 0, 0, 10), 2000.0);  // 200 W for 10 s
  // GPU 2: 350 W from 1 h to 2 h of every day, 55 W otherwise; two days.
  const double expected = 2 * 3600 * 350.0 + (2 * 86400 - 2 * 3600) * 55.0;
  EXPECT_NEAR(timeline_energy_j(s, 2, 0, 2 * 86400), expected, 1e-6 * expected);
  EXPECT_NEAR(timeline_energy_j(s, 2, 0, 3000) + timeline_energy_j(s, 2, 3000, 9000), timeline_energy_j(s, 2, 0, 9000),
              1e-6);
}

TEST(DeviceModel, AKilledWorkloadLeavesItsGpuIdle) {
  auto s = load_scenario_file(bundled_scenario("a100x4-balanced").string());
  ASSERT_TRUE(s.ok());
  Sleeper worker;
  LiveProcess entry;
  entry.pid = worker.pid();
  entry.gpus = {0};
  entry.memory_mib = 38500;
  entry.scenario_process = 0;
  TempDir dir;
  ASSERT_TRUE(register_process(dir.path(), entry).ok());
  DeviceView busy = evaluate_device(*s, 0, 1, read_live_processes(dir.path()), ProcessMode::Live);
  EXPECT_EQ(busy.sample.util_gpu, 96U);
  EXPECT_EQ(busy.used_bytes, 38900ULL << 20);
  ASSERT_EQ(busy.processes.size(), 1U);
  EXPECT_EQ(busy.processes[0].pid, static_cast<unsigned>(worker.pid()));
  EXPECT_EQ(busy.processes[0].sm_util, 96U);  // the GPU's utilization, shared by its processes

  worker.kill_and_reap();
  DeviceView gone = evaluate_device(*s, 0, 1, read_live_processes(dir.path()), ProcessMode::Live);
  EXPECT_EQ(gone.sample.util_gpu, 0U);
  EXPECT_DOUBLE_EQ(gone.sample.power_w, 55.0);
  EXPECT_EQ(gone.used_bytes, 400ULL << 20);  // only the fixed overhead
  EXPECT_TRUE(gone.processes.empty());

  // Without real processes (no state directory) the scenario's numbers stand, unlisted.
  DeviceView stat = evaluate_device(*s, 0, 1, {}, ProcessMode::Static);
  EXPECT_EQ(stat.used_bytes, 38900ULL << 20);
  EXPECT_TRUE(stat.processes.empty());
}

TEST(DeviceModel, LoadProgramsAddMemoryAndUtilization) {
  const Scenario s = mixed_models();
  Sleeper load;
  LiveProcess entry;
  entry.pid = load.pid();
  entry.gpus = {2};
  entry.memory_mib = 2048;
  entry.sm_util = 30;
  DeviceView v = evaluate_device(s, 2, 0, {entry}, ProcessMode::Live);
  EXPECT_EQ(v.sample.util_gpu, 30U);
  EXPECT_GT(v.sample.power_w, 55.0);
  EXPECT_EQ(v.sample.pstate, 0U);
  EXPECT_EQ(v.used_bytes, 2048ULL << 20);
  EXPECT_EQ(v.free_bytes, (40960ULL - 2048) << 20);
}

// [[process.timeline]]: a process's own utilization over time, key by key, and what its samples say.
TEST(DeviceModel, AProcessFollowsItsOwnUtilizationTimeline) {
  auto s = parse_scenario(R"([[gpu]]
name = "NVIDIA A100-SXM4-40GB"
architecture = "ampere"
uuid = "GPU-16aaab6a-6e43-4884-a60d-b64116853b1d"
pci_bus_id = "00000000:07:00.0"
memory_mib = 40960
[[timeline]]
util_gpu = 80
[[process]]
gpu = 0
name = "python"
host_pid = 4200001
memory_mib = 6144
sm_util = 90
mem_util = 40
[[process.timeline]]
from = "10m"
to = "20m"
sm_util = 0
[[process.timeline]]
from = "15m"
mem_util = 0
util_sample = "garbage"
)", "timeline.toml");
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto at = [&](double t) { return evaluate_device(*s, 0, t, {}, ProcessMode::Static).processes.at(0); };
  EXPECT_EQ(at(60).sm_util, 90U);
  EXPECT_EQ(at(60).mem_util, 40U);
  EXPECT_EQ(at(60).util_sample, UtilSample::Normal);
  EXPECT_EQ(at(12 * 60).sm_util, 0U);   // the first entry
  EXPECT_EQ(at(12 * 60).mem_util, 40U);  // ... overrides only its keys
  EXPECT_EQ(at(16 * 60).mem_util, 0U);
  EXPECT_EQ(at(16 * 60).util_sample, UtilSample::Garbage);
  EXPECT_EQ(at(25 * 60).sm_util, 90U);  // the first entry ended; the second has no end
  EXPECT_EQ(at(25 * 60).mem_util, 0U);
}

}  // namespace
}  // namespace tarmac::sim::test
