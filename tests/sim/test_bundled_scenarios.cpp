// The bundled scenarios that show one launch mistake each (docs/simulator.md, "Bundled
// scenarios"): their key values as a client of the built library sees them, and, for the
// scenarios that change over time, the exact moments of the change through the device model.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <memory>

#include "clock.hpp"
#include "cuda_visible.hpp"
#include "device_model.hpp"
#include "registry.hpp"
#include "scenario_parser.hpp"
#include "state_dir.hpp"
#include "test_support.hpp"

namespace tarmac::sim::test {
namespace {

using namespace tarmac::nvml;

Scenario load(const std::string& name) {
  auto s = load_scenario_file(bundled_scenario(name).string());
  EXPECT_TRUE(s.ok()) << name << ": " << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(*s) : Scenario{};
}

// A bundled scenario as under the launcher: a state directory whose clock stands at simulated
// time `t0` (and then runs at `speed`, slow enough for a test to read one moment), every scenario
// process due then running as a real (sleeping) child registered on its GPUs, and the built
// library initialised against it.
class Bundled {
 public:
  explicit Bundled(const std::string& name, double t0 = 0, double speed = 0.01) {
    make_state_dir(dir_.path(), bundled_scenario(name));
    const StateDir state(dir_.path());
    const long long now = realtime_ns();
    const auto back_ns = static_cast<long long>(t0 / speed * 1e9);
    if (!write_clock_file(state.clock(), ClockSpec{now - back_ns, speed, now - back_ns})) ADD_FAILURE() << "clock";
    scenario_ = load(name);
    for (unsigned i = 0; i < scenario_.processes.size(); ++i) {
      const ProcessSpec& spec = scenario_.processes[i];
      if (!spec.window.contains(t0)) continue;
      children_.push_back(std::make_unique<Sleeper>());
      LiveProcess p;
      p.pid = children_.back()->pid();
      p.gpus = spec.gpus;
      p.memory_mib = spec.memory_mib;
      p.type = spec.type;
      p.scenario_process = i;
      EXPECT_TRUE(register_process(state.procs(), p).ok());
    }
    ::setenv("TARMAC_SIM_STATE", dir_.path().c_str(), 1);
    lib_ = std::make_unique<NvmlLibrary>();
    init_rc_ = NVML(*lib_, nvmlInit_v2)();
  }
  ~Bundled() {
    if (init_rc_ == NVML_SUCCESS) NVML(*lib_, nvmlShutdown)();
    ::unsetenv("TARMAC_SIM_STATE");
  }
  Bundled(const Bundled&) = delete;
  Bundled& operator=(const Bundled&) = delete;

  [[nodiscard]] nvmlReturn_t init_rc() const { return init_rc_; }
  [[nodiscard]] const NvmlLibrary& lib() const { return *lib_; }
  [[nodiscard]] const Scenario& scenario() const { return scenario_; }

  nvmlDevice_t device(unsigned index) {
    nvmlDevice_t d = nullptr;
    EXPECT_EQ(NVML(*lib_, nvmlDeviceGetHandleByIndex_v2)(index, &d), NVML_SUCCESS) << "GPU " << index;
    return d;
  }
  unsigned long long used_mib(unsigned index) {
    nvmlMemory_v2_t m{};
    m.version = nvmlMemory_v2;
    EXPECT_EQ(NVML(*lib_, nvmlDeviceGetMemoryInfo_v2)(device(index), &m), NVML_SUCCESS);
    return m.used / kMiB;
  }
  unsigned util(unsigned index) {
    nvmlUtilization_t u{};
    EXPECT_EQ(NVML(*lib_, nvmlDeviceGetUtilizationRates)(device(index), &u), NVML_SUCCESS);
    return u.gpu;
  }
  unsigned temp(unsigned index) {
    unsigned c = 0;
    EXPECT_EQ(NVML(*lib_, nvmlDeviceGetTemperature)(device(index), NVML_TEMPERATURE_GPU, &c), NVML_SUCCESS);
    return c;
  }
  unsigned long long clock_events(unsigned index) {
    unsigned long long reasons = 0;
    EXPECT_EQ(NVML(*lib_, nvmlDeviceGetCurrentClocksEventReasons)(device(index), &reasons), NVML_SUCCESS);
    return reasons;
  }
  // The compute processes' memory, in MiB, in pid order.
  std::vector<unsigned long long> compute_mib(unsigned index) {
    std::array<nvmlProcessInfo_v2_t, 16> infos{};
    unsigned count = infos.size();
    EXPECT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v3)(device(index), &count, infos.data()), NVML_SUCCESS);
    std::vector<unsigned long long> out;
    for (unsigned i = 0; i < count; ++i) out.push_back(infos[i].usedGpuMemory / kMiB);
    return out;
  }
  nvmlGpuTopologyLevel_t path(unsigned a, unsigned b) {
    nvmlGpuTopologyLevel_t level = 0;
    EXPECT_EQ(NVML(*lib_, nvmlDeviceGetTopologyCommonAncestor)(device(a), device(b), &level), NVML_SUCCESS);
    return level;
  }

 private:
  TempDir dir_;
  Scenario scenario_;
  std::vector<std::unique_ptr<Sleeper>> children_;
  std::unique_ptr<NvmlLibrary> lib_;
  nvmlReturn_t init_rc_ = NVML_ERROR_UNKNOWN;
};

using U = std::vector<unsigned long long>;

TEST(BundledScenarios, NoDriverContainerFailsEveryInit) {
  const Scenario s = load("no-driver-container");
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_EQ(s.init_error, 9);
  Bundled sim("no-driver-container");
  EXPECT_EQ(sim.init_rc(), NVML_ERROR_DRIVER_NOT_LOADED);
  EXPECT_EQ(NVML(sim.lib(), nvmlInit)(), NVML_ERROR_DRIVER_NOT_LOADED);
  EXPECT_EQ(NVML(sim.lib(), nvmlInitWithFlags)(0), NVML_ERROR_DRIVER_NOT_LOADED);
  unsigned count = 7;
  EXPECT_EQ(NVML(sim.lib(), nvmlDeviceGetCount_v2)(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(NVML(sim.lib(), nvmlShutdown)(), NVML_ERROR_UNINITIALIZED);  // nothing was counted
  // The old driver has only nvmlInit, and it fails the same way.
  NvmlLibrary old(old_sim_library());
  EXPECT_EQ(NVML(old, nvmlInit)(), NVML_ERROR_DRIVER_NOT_LOADED);
}

TEST(BundledScenarios, MixedWorkstationCudaOrderIsTheReverseOfNvidiaSmis) {
  const Scenario s = load("mixed-gpus-workstation");
  EXPECT_EQ(cuda_order(s, DeviceOrder::FastestFirst), (std::vector<unsigned>{1, 0}));
  EXPECT_EQ(cuda_order(s, DeviceOrder::PciBusId), (std::vector<unsigned>{0, 1}));
  EXPECT_EQ(visible_gpus(s, "0", DeviceOrder::FastestFirst), (std::vector<unsigned>{1}));  // cuda:0 is the 4090

  Bundled sim("mixed-gpus-workstation");
  ASSERT_EQ(sim.init_rc(), NVML_SUCCESS);
  char name[96];
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetName)(sim.device(0), name, sizeof name), NVML_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA RTX A4000");
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetName)(sim.device(1), name, sizeof name), NVML_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA GeForce RTX 4090");
  int major = 0;
  int minor = 0;
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetCudaComputeCapability)(sim.device(1), &major, &minor), NVML_SUCCESS);
  EXPECT_EQ(major * 10 + minor, 89);
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetCudaComputeCapability)(sim.device(0), &major, &minor), NVML_SUCCESS);
  EXPECT_EQ(major * 10 + minor, 86);
  // train.py on the 4090; the A4000 only drives the desktop (Xorg, a graphics process).
  EXPECT_EQ(sim.compute_mib(1), U{21504});
  EXPECT_EQ(sim.compute_mib(0), U{});
  EXPECT_EQ(sim.used_mib(0), 470U);
  EXPECT_EQ(sim.used_mib(1), 21804U);
  EXPECT_EQ(sim.util(1), 97U);
  nvmlEnableState_t active{};
  EXPECT_EQ(NVML(sim.lib(), nvmlDeviceGetNvLinkState)(sim.device(1), 0, &active), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(sim.path(0, 1), NVML_TOPOLOGY_NODE);
}

TEST(BundledScenarios, MemoryImbalanceRankZeroHoldsMost) {
  Bundled sim("a100x4-memory-imbalance");
  ASSERT_EQ(sim.init_rc(), NVML_SUCCESS);
  const unsigned long long used[] = {37400, 21400, 21400, 21400};
  const unsigned util[] = {91, 89, 90, 88};
  for (unsigned i = 0; i < 4; ++i) {
    EXPECT_EQ(sim.used_mib(i), used[i]) << "GPU " << i;
    EXPECT_EQ(sim.util(i), util[i]) << "GPU " << i;
    EXPECT_EQ(sim.compute_mib(i), U{i == 0 ? 37000ULL : 21000ULL}) << "GPU " << i;
  }
}

TEST(BundledScenarios, RanksCollideTwoOnGpuZeroNoneOnGpuThree) {
  Bundled sim("a100x4-ranks-collide");
  ASSERT_EQ(sim.init_rc(), NVML_SUCCESS);
  EXPECT_EQ(sim.compute_mib(0), (U{18000, 18000}));
  EXPECT_EQ(sim.compute_mib(1), U{18000});
  EXPECT_EQ(sim.compute_mib(2), U{18000});
  EXPECT_EQ(sim.compute_mib(3), U{});
  EXPECT_EQ(sim.used_mib(0), 36400U);
  EXPECT_EQ(sim.used_mib(3), 4U);
  EXPECT_EQ(sim.util(0), 95U);
  EXPECT_EQ(sim.util(1), 60U);
  EXPECT_EQ(sim.util(3), 0U);
  const Scenario& s = sim.scenario();
  ASSERT_EQ(s.processes.size(), 4U);
  EXPECT_EQ(s.processes[3].gpus, std::vector<unsigned>{0});  // rank 3's command line, GPU 0
  EXPECT_NE(s.processes[3].argv.back(), s.processes[0].argv.back());
}

TEST(BundledScenarios, L40sArePciePairsWithoutNvLink) {
  Bundled sim("l40s-x4-pcie");
  ASSERT_EQ(sim.init_rc(), NVML_SUCCESS);
  char name[96];
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetName)(sim.device(3), name, sizeof name), NVML_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA L40S");
  nvmlMemory_v2_t m{};
  m.version = nvmlMemory_v2;
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetMemoryInfo_v2)(sim.device(0), &m), NVML_SUCCESS);
  EXPECT_EQ(m.total / kMiB, 46068U);
  unsigned mw = 0;
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetEnforcedPowerLimit)(sim.device(0), &mw), NVML_SUCCESS);
  EXPECT_EQ(mw, 350000U);
  EXPECT_EQ(sim.path(0, 1), NVML_TOPOLOGY_MULTIPLE);  // PXB
  EXPECT_EQ(sim.path(2, 3), NVML_TOPOLOGY_MULTIPLE);
  EXPECT_EQ(sim.path(0, 2), NVML_TOPOLOGY_SYSTEM);
  EXPECT_EQ(sim.path(1, 3), NVML_TOPOLOGY_SYSTEM);
  nvmlEnableState_t active{};
  EXPECT_EQ(NVML(sim.lib(), nvmlDeviceGetNvLinkState)(sim.device(0), 0, &active), NVML_ERROR_NOT_SUPPORTED);
  const unsigned util[] = {71, 69, 70, 68};
  for (unsigned i = 0; i < 4; ++i) {
    EXPECT_EQ(sim.util(i), util[i]) << "GPU " << i;
    EXPECT_EQ(sim.compute_mib(i), U{32768}) << "GPU " << i;
    EXPECT_EQ(sim.used_mib(i), 33268U) << "GPU " << i;
  }
}

TEST(BundledScenarios, GpuFaultLostGpuAndADoubleBitError) {
  Bundled sim("a100x4-gpu-fault");
  ASSERT_EQ(sim.init_rc(), NVML_SUCCESS);
  unsigned count = 0;
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetCount_v2)(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 4U);  // a lost GPU stays counted
  nvmlDevice_t lost = nullptr;
  EXPECT_EQ(NVML(sim.lib(), nvmlDeviceGetHandleByIndex_v2)(2, &lost), NVML_ERROR_GPU_IS_LOST);

  unsigned long long n = 7;
  const nvmlDevice_t gpu1 = sim.device(1);
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetTotalEccErrors)(gpu1, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &n),
            NVML_SUCCESS);
  EXPECT_EQ(n, 1U);
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetTotalEccErrors)(gpu1, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &n),
            NVML_SUCCESS);
  EXPECT_EQ(n, 1U);
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetTotalEccErrors)(sim.device(0), NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                          NVML_VOLATILE_ECC, &n),
            NVML_SUCCESS);
  EXPECT_EQ(n, 0U);
  unsigned corr = 9;
  unsigned unc = 9;
  unsigned pending = 9;
  unsigned failure = 9;
  ASSERT_EQ(NVML(sim.lib(), nvmlDeviceGetRemappedRows)(gpu1, &corr, &unc, &pending, &failure), NVML_SUCCESS);
  EXPECT_EQ(corr, 0U);
  EXPECT_EQ(unc, 1U);
  EXPECT_EQ(pending, 1U);
  EXPECT_EQ(failure, 0U);
  EXPECT_EQ(sim.compute_mib(0), U{38000});
  EXPECT_EQ(sim.compute_mib(1), U{38000});
  EXPECT_EQ(sim.compute_mib(3), U{38000});
}

TEST(BundledScenarios, StallMidwayBeforeTheStall) {
  Bundled sim("a100x4-stall-midway", 2.0);
  ASSERT_EQ(sim.init_rc(), NVML_SUCCESS);
  EXPECT_EQ(sim.util(0), 96U);
  EXPECT_EQ(sim.util(3), 93U);
  EXPECT_EQ(sim.used_mib(0), 38400U);
}

TEST(BundledScenarios, StallMidwayAfterTheStallMemoryStaysHeld) {
  Bundled sim("a100x4-stall-midway", 3.5);
  ASSERT_EQ(sim.init_rc(), NVML_SUCCESS);
  for (unsigned i = 0; i < 4; ++i) {
    EXPECT_EQ(sim.util(i), 4U) << "GPU " << i;
    EXPECT_EQ(sim.used_mib(i), 38400U) << "GPU " << i;
    EXPECT_EQ(sim.compute_mib(i), U{38000}) << "GPU " << i;
  }
}

TEST(BundledScenarios, StallMidwayStartsAtExactlyThreeSecondsForEver) {
  const Scenario s = load("a100x4-stall-midway");
  ASSERT_EQ(s.gpus.size(), 4U);
  auto at = [&](unsigned gpu, double t) {
    LiveProcess p;
    p.pid = 4242;
    p.gpus = {gpu};
    p.scenario_process = gpu;  // process i runs on GPU i
    return evaluate_device(s, gpu, t, {p}, ProcessMode::Live);
  };
  for (unsigned g = 0; g < 4; ++g) {
    const DeviceView before = at(g, 2.999);
    EXPECT_GE(before.sample.util_gpu, 93U);
    ASSERT_EQ(before.processes.size(), 1U);
    EXPECT_EQ(before.processes[0].sm_util, before.sample.util_gpu);
    for (double t : {3.0, 60.0, 86400.0 * 30}) {
      const DeviceView after = at(g, t);
      EXPECT_EQ(after.sample.util_gpu, 4U) << "GPU " << g << " at " << t;
      EXPECT_EQ(after.used_bytes, 38400 * kMiB);
      ASSERT_EQ(after.processes.size(), 1U);
      EXPECT_EQ(after.processes[0].sm_util, 4U);  // per-process utilization follows
    }
  }
}

TEST(BundledScenarios, ThermalSpikeDuringTheSpike) {
  Bundled sim("a100x4-thermal-spike", 3.5);
  ASSERT_EQ(sim.init_rc(), NVML_SUCCESS);
  EXPECT_EQ(sim.temp(1), 90U);
  EXPECT_EQ(sim.clock_events(1), nvmlClocksThrottleReasonHwThermalSlowdown | nvmlClocksThrottleReasonSwThermalSlowdown);
  EXPECT_EQ(sim.temp(0), 70U);
  EXPECT_EQ(sim.clock_events(0), 0U);
}

TEST(BundledScenarios, ThermalSpikeAfterTheSpike) {
  Bundled sim("a100x4-thermal-spike", 4.5);
  ASSERT_EQ(sim.init_rc(), NVML_SUCCESS);
  EXPECT_EQ(sim.temp(1), 71U);
  EXPECT_EQ(sim.clock_events(1), 0U);
}

TEST(BundledScenarios, ThermalSpikeLastsExactlyOneSecond) {
  const Scenario s = load("a100x4-thermal-spike");
  ASSERT_EQ(s.gpus.size(), 4U);
  auto at = [&](unsigned gpu, double t) { return evaluate_device(s, gpu, t, {}, ProcessMode::Static).sample; };
  for (double t : {0.0, 2.999, 4.0, 4.001, 3600.0, 86400.0 * 30}) {
    EXPECT_EQ(at(1, t).temp_c, 71U) << t;
    EXPECT_EQ(at(1, t).throttle_reasons, 0U) << t;
    EXPECT_EQ(at(1, t).clocks.sm, 1410U) << t;
  }
  for (double t : {3.0, 3.5, 3.999}) {
    EXPECT_EQ(at(1, t).temp_c, 90U) << t;
    EXPECT_EQ(at(1, t).throttle_reasons, 0x60U) << t;
    EXPECT_EQ(at(1, t).clocks.sm, 1095U) << t;
    EXPECT_EQ(at(1, t).util_gpu, 95U) << t;
    for (unsigned g : {0U, 2U, 3U}) {
      EXPECT_LE(at(g, t).temp_c, 71U);
      EXPECT_EQ(at(g, t).throttle_reasons, 0U);
    }
  }
}

}  // namespace
}  // namespace tarmac::sim::test
