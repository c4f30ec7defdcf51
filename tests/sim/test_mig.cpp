// MIG in the simulator (docs/mig.md): the profile tables and placement, the scenario keys, CUDA's
// view of MIG devices, and the library's MIG entry points on the bundled h200x8-mig-mixed.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "cuda_visible.hpp"
#include "lib/mig_types.hpp"
#include "library_fixture.hpp"
#include "mig.hpp"
#include "scenario_parser.hpp"

namespace tarmac::sim::test {
namespace {

std::vector<unsigned> ids(const std::vector<MigInstance>& list) {
  std::vector<unsigned> out;
  for (const MigInstance& m : list) out.push_back(m.gi_id);
  return out;
}

TEST(MigLayout, InstancesAreNumberedByTheirPlaceInTheMemorySlices) {
  const auto profiles = mig_profiles("NVIDIA A100-SXM4-40GB", 40960);
  ASSERT_FALSE(profiles.empty());
  auto seven = place_mig_instances(profiles, std::vector<std::string>(7, "1g.5gb"), "GPU-x");
  ASSERT_TRUE(seven.error.empty()) << seven.error;
  EXPECT_EQ(ids(seven.instances), (std::vector<unsigned>{7, 8, 9, 10, 11, 12, 13}));
  auto halves = place_mig_instances(profiles, {"3g.20gb", "3g.20gb"}, "GPU-x");
  EXPECT_EQ(ids(halves.instances), (std::vector<unsigned>{1, 2}));
  auto whole = place_mig_instances(profiles, {"7g.40gb"}, "GPU-x");
  EXPECT_EQ(ids(whole.instances), (std::vector<unsigned>{0}));
}

TEST(MigLayout, AMixThatFitsOnlyOneWayIsPlacedThatWay) {
  // 3g first at slice 0 would leave no room for two 1g after the 2g: the driver puts it at 4.
  auto mixed = place_mig_instances(mig_profiles("NVIDIA H200", 143771), {"3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"},
                                   "GPU-x");
  ASSERT_TRUE(mixed.error.empty()) << mixed.error;
  ASSERT_EQ(mixed.instances.size(), 4U);
  EXPECT_EQ(std::string(mixed.instances[0].profile->name), "3g.71gb");
  EXPECT_EQ(mixed.instances[0].start, 4U);
  EXPECT_EQ(ids(mixed.instances), (std::vector<unsigned>{2, 3, 9, 10}));
}

TEST(MigLayout, WhatDoesNotFitOrDoesNotExistIsAnError) {
  const auto profiles = mig_profiles("NVIDIA A100-SXM4-40GB", 40960);
  EXPECT_NE(place_mig_instances(profiles, {"7g.40gb", "1g.5gb"}, "GPU-x").error, "");
  EXPECT_NE(place_mig_instances(profiles, {"1g.5gb+me", "1g.5gb+me"}, "GPU-x").error, "");
  const std::string unknown = place_mig_instances(profiles, {"1g.18gb"}, "GPU-x").error;
  EXPECT_NE(unknown.find("'1g.18gb' is not a MIG profile"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("1g.5gb"), std::string::npos) << unknown;
  EXPECT_TRUE(mig_profiles("NVIDIA L40S", 46068).empty());
}

TEST(MigLayout, UuidsAreStableDistinctAndShapedLikeTheDrivers) {
  const auto profiles = mig_profiles("NVIDIA H100 80GB HBM3", 81559);
  auto a = place_mig_instances(profiles, {"1g.10gb", "1g.10gb"}, "GPU-a");
  auto again = place_mig_instances(profiles, {"1g.10gb", "1g.10gb"}, "GPU-a");
  auto b = place_mig_instances(profiles, {"1g.10gb", "1g.10gb"}, "GPU-b");
  ASSERT_EQ(a.instances.size(), 2U);
  EXPECT_EQ(a.instances[0].uuid, again.instances[0].uuid);
  EXPECT_NE(a.instances[0].uuid, a.instances[1].uuid);
  EXPECT_NE(a.instances[0].uuid, b.instances[0].uuid);
  // MIG-xxxxxxxx-xxxx-5xxx-[89ab]xxx-xxxxxxxxxxxx
  const std::string& u = a.instances[0].uuid;
  ASSERT_EQ(u.size(), 40U) << u;
  EXPECT_EQ(u.substr(0, 4), "MIG-");
  EXPECT_EQ(u[18], '5') << u;
  EXPECT_NE(std::string("89ab").find(u[23]), std::string::npos) << u;
}

const char* const kMigA100 = R"(
[[gpu]]
name = "NVIDIA A100-SXM4-40GB"
architecture = "ampere"
uuid = "GPU-11111111-2222-3333-4444-555555555555"
pci_bus_id = "00000000:07:00.0"
memory_mib = 40960
)";

// The parser's error for a MIG layout, "" when it is accepted.
std::string layout_error(const std::string& text) {
  auto s = parse_scenario(text, "mig.toml");
  return s.ok() ? std::string() : s.error().message;
}

TEST(MigScenario, KeysAreCheckedWithTheirLine) {
  EXPECT_NE(layout_error(std::string(kMigA100) + "mig = [\"1g.5gb\"]\n").find("need mig_mode = true"), std::string::npos);
  EXPECT_NE(layout_error(std::string(kMigA100) + "mig_mode_pending = true\n").find("needs mig_mode"), std::string::npos);
  EXPECT_NE(layout_error(std::string(kMigA100) + "mig_mode = true\nmig = [\"9g.1tb\"]\n").find("'9g.1tb'"),
            std::string::npos);
  const std::string layout = std::string(kMigA100) + "mig_mode = true\nmig = [\"3g.20gb\", \"1g.5gb\"]\n";
  EXPECT_EQ(layout_error(layout), "");
  // A process on a GPU in MIG mode names its MIG device, which must exist and hold its memory.
  const std::string proc = "\n[[process]]\ngpu = 0\nname = \"python\"\nmemory_mib = 1000\n";
  EXPECT_NE(layout_error(layout + proc).find("mig_device = N"), std::string::npos);
  EXPECT_NE(layout_error(layout + proc + "mig_device = 2\n").find("has 2 MIG devices"), std::string::npos);
  EXPECT_NE(layout_error(layout + "\n[[process]]\ngpu = 0\nname = \"python\"\nmemory_mib = 6000\nmig_device = 1\n")
                .find("does not fit in MIG device 1"),
            std::string::npos);
  EXPECT_EQ(layout_error(layout + proc + "mig_device = 1\n"), "");
}

TEST(MigCuda, AMigUuidNamesOneMigDeviceAndTheParentIsNoDevice) {
  auto s = load_scenario_file(bundled_scenario("h200x8-mig-mixed").string());
  ASSERT_TRUE(s.ok()) << s.error().message;
  const std::string uuid = s->gpus[5].mig[3].uuid;
  auto one = visible_devices(*s, uuid, DeviceOrder::PciBusId);
  ASSERT_EQ(one.size(), 1U);
  EXPECT_EQ(one[0], (VisibleDevice{5, 3U}));
  // A unique prefix works as for GPU UUIDs; a second MIG device is not enumerated.
  EXPECT_EQ(visible_devices(*s, uuid.substr(0, 12) + "," + s->gpus[4].mig[0].uuid, DeviceOrder::PciBusId).size(), 1U);
  // GPU 4 is in MIG mode: naming it whole gives CUDA no device, and stops enumeration.
  EXPECT_TRUE(visible_devices(*s, "GPU-5d8a1c37", DeviceOrder::PciBusId).empty());
  // Indices count the GPUs CUDA can use whole (0-3 and 7 here): cuda:4 is GPU 7.
  EXPECT_EQ(visible_gpus(*s, "0,4,1", DeviceOrder::PciBusId), (std::vector<unsigned>{0, 7, 1}));
  // Unset: the whole GPUs that are not in MIG mode.
  EXPECT_EQ(visible_gpus(*s, std::nullopt, DeviceOrder::PciBusId), (std::vector<unsigned>{0, 1, 2, 3, 7}));
}

class MigLibraryTest : public LibraryTest {
 protected:
  MigLibraryTest() { scenario_ = bundled_scenario("h200x8-mig-mixed"); }

  nvmlDevice_t mig(unsigned gpu, unsigned index) {
    nvmlDevice_t d = nullptr;
    EXPECT_EQ(NVML(*lib_, nvmlDeviceGetMigDeviceHandleByIndex)(device(gpu), index, &d), NVML_SUCCESS);
    return d;
  }
  std::string text(nvmlReturn_t (*fn)(nvmlDevice_t, char*, unsigned), nvmlDevice_t d) {
    char buf[96] = {};
    EXPECT_EQ(fn(d, buf, sizeof buf), NVML_SUCCESS);
    return buf;
  }
  template <typename Fn>
  Fn sym(const char* name) {
    auto* f = lib_->get<Fn>(name);
    EXPECT_NE(f, nullptr) << name;
    return f;
  }
};

TEST_F(MigLibraryTest, MigDevicesAreEnumeratedUnderTheirParent) {
  unsigned count = 99;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMaxMigDeviceCount)(device(4), &count), NVML_SUCCESS);
  EXPECT_EQ(count, 7U);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMaxMigDeviceCount)(device(0), &count), NVML_SUCCESS);
  EXPECT_EQ(count, 0U);  // MIG disabled
  nvmlDevice_t d = nullptr;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetMigDeviceHandleByIndex)(device(4), 4, &d), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetMigDeviceHandleByIndex)(device(0), 0, &d), NVML_ERROR_NOT_SUPPORTED);

  nvmlDevice_t slice = mig(4, 1);
  EXPECT_EQ(text(NVML(*lib_, nvmlDeviceGetName), slice), "NVIDIA H200 MIG 2g.35gb");
  EXPECT_EQ(text(NVML(*lib_, nvmlDeviceGetUUID), slice).substr(0, 4), "MIG-");
  unsigned is_mig = 9;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceIsMigDeviceHandle)(slice, &is_mig), NVML_SUCCESS);
  EXPECT_EQ(is_mig, 1U);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceIsMigDeviceHandle)(device(4), &is_mig), NVML_SUCCESS);
  EXPECT_EQ(is_mig, 0U);
  unsigned gi = 0, ci = 9;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetGpuInstanceId)(slice, &gi), NVML_SUCCESS);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetComputeInstanceId)(slice, &ci), NVML_SUCCESS);
  EXPECT_EQ(gi, 3U);
  EXPECT_EQ(ci, 0U);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetGpuInstanceId)(device(4), &gi), NVML_ERROR_NOT_SUPPORTED);
  nvmlDevice_t parent = nullptr;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(slice, &parent), NVML_SUCCESS);
  EXPECT_EQ(parent, device(4));

  nvmlMemory_v2_t mem{};
  mem.version = nvmlMemory_v2;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMemoryInfo_v2)(slice, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.total, 33024ULL << 20);
  nvmlDeviceAttributes_t attr{};
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetAttributes_v2)(slice, &attr), NVML_SUCCESS);
  EXPECT_EQ(attr.gpuInstanceSliceCount, 2U);
  EXPECT_EQ(attr.multiprocessorCount, 32U);
  EXPECT_EQ(attr.memorySizeMB, 33024ULL);
}

TEST_F(MigLibraryTest, UtilizationIsNotSupportedInMigModeAndOtherCallsRefuseMigHandles) {
  nvmlUtilization_t u{};
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetUtilizationRates)(device(4), &u), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetUtilizationRates)(mig(4, 0), &u), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetUtilizationRates)(device(0), &u), NVML_SUCCESS);
  unsigned temp = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetTemperature)(mig(4, 0), NVML_TEMPERATURE_GPU, &temp), NVML_ERROR_NOT_SUPPORTED);
  unsigned current = 9, pending = 9;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMigMode)(device(3), &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, NVML_DEVICE_MIG_DISABLE);
  EXPECT_EQ(pending, NVML_DEVICE_MIG_ENABLE);
}

TEST_F(MigLibraryTest, GpuInstancesCarryTheirProfileAndPlacement) {
  auto by_id = sym<decltype(&nvmlDeviceGetGpuInstanceById)>("nvmlDeviceGetGpuInstanceById");
  auto info = sym<decltype(&nvmlGpuInstanceGetInfo)>("nvmlGpuInstanceGetInfo");
  auto profile = sym<decltype(&nvmlDeviceGetGpuInstanceProfileInfoV)>("nvmlDeviceGetGpuInstanceProfileInfoV");
  auto instances = sym<decltype(&nvmlGpuInstanceGetComputeInstances)>("nvmlGpuInstanceGetComputeInstances");
  auto ci_info = sym<decltype(&nvmlComputeInstanceGetInfo_v2)>("nvmlComputeInstanceGetInfo_v2");
  nvmlGpuInstance_t gi = nullptr;
  ASSERT_EQ(by_id(device(4), 2, &gi), NVML_SUCCESS);
  nvmlGpuInstanceInfo_t i{};
  ASSERT_EQ(info(gi, &i), NVML_SUCCESS);
  EXPECT_EQ(i.device, device(4));
  EXPECT_EQ(i.profileId, 9U);  // 3g
  EXPECT_EQ(i.placement.start, 4U);
  EXPECT_EQ(i.placement.size, 4U);
  EXPECT_EQ(by_id(device(4), 5, &gi), NVML_ERROR_NOT_FOUND);

  nvmlGpuInstanceProfileInfo_v2_t p{};
  p.version = nvmlGpuInstanceProfileInfo_v2;
  ASSERT_EQ(profile(device(5), 0 /* 1_SLICE */, &p), NVML_SUCCESS);
  EXPECT_STREQ(p.name, "MIG 1g.18gb");
  EXPECT_EQ(p.id, 19U);
  EXPECT_EQ(p.instanceCount, 7U);
  EXPECT_EQ(p.memorySizeMB, 16384ULL);
  p.version = 1;
  EXPECT_EQ(profile(device(5), 0, &p), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

  ASSERT_EQ(by_id(device(4), 2, &gi), NVML_SUCCESS);
  nvmlComputeInstance_t ci = nullptr;
  unsigned n = 1;
  ASSERT_EQ(instances(gi, 2 /* 3-slice compute profile */, &ci, &n), NVML_SUCCESS);
  ASSERT_EQ(n, 1U);
  nvmlComputeInstanceInfo_t c{};
  ASSERT_EQ(ci_info(ci, &c), NVML_SUCCESS);
  EXPECT_EQ(c.gpuInstance, gi);
  EXPECT_EQ(c.placement.size, 3U);
  EXPECT_EQ(ci_info(reinterpret_cast<nvmlComputeInstance_t>(gi), &c), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(MigLibraryTest, ALoadOnAMigDeviceIsListedThereWithItsInstanceIdsAndDrivesItsGpm) {
  Sleeper child;
  LiveProcess p;
  p.pid = child.pid();
  p.gpus = {5};
  p.mig_device = 2;
  p.memory_mib = 5000;
  p.sm_util = 60;
  p.mem_util = 30;
  ASSERT_TRUE(register_process(StateDir(dir_.path()).procs(), p).ok());

  nvmlProcessInfo_v2_t infos[4]{};
  unsigned n = 4;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v3)(mig(5, 2), &n, infos), NVML_SUCCESS);
  ASSERT_EQ(n, 1U);
  EXPECT_EQ(infos[0].pid, static_cast<unsigned>(child.pid()));
  EXPECT_EQ(infos[0].gpuInstanceId, 9U);
  EXPECT_EQ(infos[0].computeInstanceId, 0U);
  n = 4;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v3)(mig(5, 3), &n, infos), NVML_SUCCESS);
  EXPECT_EQ(n, 0U);
  n = 4;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v3)(device(5), &n, infos), NVML_SUCCESS);
  EXPECT_EQ(n, 1U);  // the parent lists every MIG device's processes
  nvmlMemory_v2_t mem{};
  mem.version = nvmlMemory_v2;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMemoryInfo_v2)(mig(5, 2), &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, 5000ULL << 20);

  nvmlGpmSample_t a = nullptr, b = nullptr;
  ASSERT_EQ(NVML(*lib_, nvmlGpmSampleAlloc)(&a), NVML_SUCCESS);
  ASSERT_EQ(NVML(*lib_, nvmlGpmSampleAlloc)(&b), NVML_SUCCESS);
  EXPECT_EQ(NVML(*lib_, nvmlGpmMigSampleGet)(device(5), 4, a), NVML_ERROR_INVALID_ARGUMENT);  // no GI 4 there
  ASSERT_EQ(NVML(*lib_, nvmlGpmMigSampleGet)(device(5), 9, a), NVML_SUCCESS);
  ASSERT_EQ(NVML(*lib_, nvmlGpmMigSampleGet)(device(5), 9, b), NVML_SUCCESS);
  nvmlGpmMetricsGet_t m{};
  m.version = NVML_GPM_METRICS_GET_VERSION;
  m.numMetrics = 1;
  m.sample1 = a;
  m.sample2 = b;
  m.metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL;
  ASSERT_EQ(NVML(*lib_, nvmlGpmMetricsGet)(&m), NVML_SUCCESS);
  EXPECT_EQ(m.metrics[0].value, 60.0);
  ASSERT_EQ(NVML(*lib_, nvmlGpmMigSampleGet)(device(5), 10, b), NVML_SUCCESS);  // an empty slice
  EXPECT_EQ(NVML(*lib_, nvmlGpmMetricsGet)(&m), NVML_ERROR_INVALID_ARGUMENT);    // samples of two instances
  ASSERT_EQ(NVML(*lib_, nvmlGpmMigSampleGet)(device(5), 10, a), NVML_SUCCESS);
  m.sample1 = b;  // the earlier one first
  m.sample2 = a;
  ASSERT_EQ(NVML(*lib_, nvmlGpmMetricsGet)(&m), NVML_SUCCESS);
  EXPECT_EQ(m.metrics[0].value, 0.0);
  NVML(*lib_, nvmlGpmSampleFree)(a);
  NVML(*lib_, nvmlGpmSampleFree)(b);
}

}  // namespace
}  // namespace tarmac::sim::test
