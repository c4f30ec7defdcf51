// The built libnvidia-ml.so.1 as a C library: what it exports, initialisation, the count
// handshakes, struct versions, and that bad arguments get error codes instead of crashes.
#include <cstring>

#include "entry_points.hpp"
#include "library_fixture.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sim::test {
namespace {

TEST(LibraryExports, EveryTableRowStubAndExtraIsExported) {
  NvmlLibrary lib;
  for (std::string_view name : table_entry_points()) EXPECT_NE(lib.symbol(std::string(name).c_str()), nullptr) << name;
  for (std::string_view name : stub_entry_points()) EXPECT_NE(lib.symbol(std::string(name).c_str()), nullptr) << name;
  for (const char* name : {"nvmlErrorString", "nvmlInternalGetExportTable", "nvmlDeviceGetFieldValues"}) {
    EXPECT_NE(lib.symbol(name), nullptr) << name;
  }
  EXPECT_EQ(lib.symbol("tarmac_anything"), nullptr);
}

TEST(LibraryExports, OnlyNvmlFunctionsAreVisible) {
  const RunResult nm = run({"nm", "-D", "--defined-only", sim_library().string()});
  ASSERT_EQ(nm.status, 0) << nm.out;
  int count = 0;
  for (const std::string& line : util::split(nm.out, '\n')) {
    if (line.empty()) continue;
    const std::string name = line.substr(line.rfind(' ') + 1);
    EXPECT_TRUE(name.starts_with("nvml")) << "exported: " << name;
    ++count;
  }
  EXPECT_GT(count, 200);
}

TEST(LibraryExports, TheOldDriverLacksTheNewerEntryPoints) {
  NvmlLibrary old(old_sim_library());
  for (std::string_view name : newer_entry_points()) EXPECT_EQ(old.symbol(std::string(name).c_str()), nullptr) << name;
  for (const char* name : {"nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMemoryInfo",
                           "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetCurrentClocksThrottleReasons"}) {
    EXPECT_NE(old.symbol(name), nullptr) << name;
  }
}

TEST(LibraryInit, CallsBeforeInitAnswerUninitialized) {
  NvmlLibrary lib;
  unsigned count = 7;
  EXPECT_EQ(NVML(lib, nvmlDeviceGetCount_v2)(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(count, 7U);
  EXPECT_EQ(NVML(lib, nvmlShutdown)(), NVML_ERROR_UNINITIALIZED);
  EXPECT_STREQ(lib.get<PFN_nvmlErrorString>("nvmlErrorString")(NVML_ERROR_GPU_IS_LOST), "GPU is lost");
}

TEST(LibraryInit, WithoutASimulationTheDriverIsNotLoaded) {
  ::unsetenv("TARMAC_SIM_STATE");
  ::unsetenv("TARMAC_SIM_SCENARIO");
  NvmlLibrary lib;
  EXPECT_EQ(NVML(lib, nvmlInit_v2)(), NVML_ERROR_DRIVER_NOT_LOADED);
}

TEST(LibraryInit, AScenarioNameAloneStartsAClockAtLoad) {
  ::setenv("TARMAC_SIM_SCENARIO", "h100x2-log", 1);
  NvmlLibrary lib;
  ASSERT_EQ(NVML(lib, nvmlInitWithFlags)(0), NVML_SUCCESS);
  unsigned count = 0;
  EXPECT_EQ(NVML(lib, nvmlDeviceGetCount_v2)(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 2U);
  NVML(lib, nvmlShutdown)();
  ::unsetenv("TARMAC_SIM_SCENARIO");
}

TEST_F(LibraryTest, InitIsReferenceCounted) {
  ASSERT_EQ(NVML(*lib_, nvmlInit)(), NVML_SUCCESS);
  unsigned count = 0;
  EXPECT_EQ(NVML(*lib_, nvmlShutdown)(), NVML_SUCCESS);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetCount)(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 3U);
  EXPECT_EQ(NVML(*lib_, nvmlShutdown)(), NVML_SUCCESS);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetCount)(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(NVML(*lib_, nvmlShutdown)(), NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(NVML(*lib_, nvmlInit_v2)(), NVML_SUCCESS);  // for TearDown
}

TEST_F(LibraryTest, ExportTableHoldsOnlyItsSize) {
  auto get = lib_->get<nvmlReturn_t (*)(const void**, const void*)>("nvmlInternalGetExportTable");
  const void* table = nullptr;
  const unsigned char uuid[16] = {};
  ASSERT_EQ(get(&table, uuid), NVML_SUCCESS);
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(*static_cast<const unsigned long long*>(table), 8U);
  EXPECT_EQ(get(nullptr, uuid), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(LibraryTest, ProcessListsAnswerTheCountHandshake) {
  Sleeper a;
  Sleeper b;
  register_load(a, 1, 1024, 10);
  register_load(b, 1, 3072, 10);
  const nvmlDevice_t gpu = device(1);
  unsigned count = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v3)(gpu, &count, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2U);
  nvmlProcessInfo_v2_t v2[3];
  count = 1;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v2)(gpu, &count, v2), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2U);
  count = 3;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v3)(gpu, &count, v2), NVML_SUCCESS);
  ASSERT_EQ(count, 2U);
  const bool a_first = v2[0].pid == static_cast<unsigned>(a.pid());
  EXPECT_EQ(v2[a_first ? 0 : 1].usedGpuMemory, 1024ULL << 20);
  EXPECT_EQ(v2[a_first ? 1 : 0].usedGpuMemory, 3072ULL << 20);
  EXPECT_EQ(v2[0].gpuInstanceId, 0xFFFFFFFFu);
  EXPECT_EQ(v2[0].computeInstanceId, 0xFFFFFFFFu);

  // The unversioned function writes 16-byte v1 records and nothing past them.
  static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
  nvmlProcessInfo_v1_t v1[3];
  std::memset(v1, 0xAB, sizeof v1);
  count = 3;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses)(gpu, &count, v1), NVML_SUCCESS);
  EXPECT_EQ(count, 2U);
  EXPECT_TRUE(v1[0].pid == static_cast<unsigned>(a.pid()) || v1[1].pid == static_cast<unsigned>(a.pid()));
  EXPECT_EQ(v1[2].pid, 0xABABABABu);

  // An empty list is SUCCESS with 0, buffer or not; a NULL count is an error.
  count = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v3)(device(0), &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(count, 0U);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetGraphicsRunningProcesses_v3)(gpu, &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetMPSComputeRunningProcesses)(gpu, &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetComputeRunningProcesses_v3)(gpu, nullptr, v2), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(LibraryTest, MemoryInfoV2ChecksItsVersion) {
  nvmlMemory_v2_t m{};
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetMemoryInfo_v2)(device(1), &m), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  m.version = struct_version(sizeof(nvmlMemory_v2_t), 1);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetMemoryInfo_v2)(device(1), &m), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  m.version = nvmlMemory_v2;
  EXPECT_EQ(m.version, 40U | (2U << 24));
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMemoryInfo_v2)(device(1), &m), NVML_SUCCESS);
  EXPECT_EQ(m.total, 81559ULL << 20);
  EXPECT_EQ(m.reserved, 559ULL << 20);
  EXPECT_EQ(m.used, 1000ULL << 20);
  EXPECT_EQ(m.free, (81559ULL - 559 - 1000) << 20);
  nvmlMemory_t v1{};
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMemoryInfo)(device(1), &v1), NVML_SUCCESS);
  EXPECT_EQ(v1.used, (559ULL + 1000) << 20);  // v1 counts reserved memory as used
  EXPECT_EQ(v1.free + v1.used, v1.total);
}

TEST_F(LibraryTest, SmallStringBuffersAreInsufficientSize) {
  char buf[96];
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetName)(device(1), buf, 5), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetName)(device(1), buf, 21), NVML_ERROR_INSUFFICIENT_SIZE);  // no room for NUL
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetName)(device(1), buf, 22), NVML_SUCCESS);
  EXPECT_STREQ(buf, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(NVML(*lib_, nvmlSystemGetDriverVersion)(buf, 3), NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(NVML(*lib_, nvmlSystemGetDriverVersion)(buf, sizeof buf), NVML_SUCCESS);
  EXPECT_STREQ(buf, "535.261.03");
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetUUID)(device(0), nullptr, 80), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(LibraryTest, BadHandlesAndNullPointersAreErrorsNotCrashes) {
  unsigned value = 0;
  int not_a_device = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetPowerUsage)(nullptr, &value), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetPowerUsage)(reinterpret_cast<nvmlDevice_t>(&not_a_device), &value),
            NVML_ERROR_INVALID_ARGUMENT);
  const auto past_the_end = reinterpret_cast<nvmlDevice_t>(reinterpret_cast<char*>(device(2)) + 4);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetPowerUsage)(past_the_end, &value), NVML_ERROR_INVALID_ARGUMENT);
  const auto misaligned = reinterpret_cast<nvmlDevice_t>(reinterpret_cast<char*>(device(0)) + 1);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetPowerUsage)(misaligned, &value), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetPowerUsage)(device(0), nullptr), NVML_ERROR_INVALID_ARGUMENT);
  nvmlDevice_t d = nullptr;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetHandleByIndex_v2)(3, &d), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetHandleByIndex_v2)(0, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetCount_v2)(nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetTemperature)(device(0), 1, &value), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetClockInfo)(device(0), 9, &value), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(NVML(*lib_, nvmlEventSetFree)(reinterpret_cast<nvmlEventSet_t>(&not_a_device)), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(NVML(*lib_, nvmlGpmSampleFree)(reinterpret_cast<nvmlGpmSample_t>(&not_a_device)),
            NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(LibraryTest, WhatTheScenarioDoesNotDefineIsNotSupported) {
  nvmlEnableState_t a = 0;
  nvmlEnableState_t b = 0;
  char buf[64];
  unsigned value = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetEccMode)(device(0), &a, &b), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetSerial)(device(0), buf, sizeof buf), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetFanSpeed)(device(1), &value), NVML_ERROR_NOT_SUPPORTED);  // no fans
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetMigMode)(device(0), &value, &value), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetCurrPcieLinkGeneration)(device(0), &value), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(lib_->get<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetAccountingMode")(device(0), &value),
            NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetFanSpeed)(device(0), &value), NVML_SUCCESS);  // the A6000 has one
}

TEST_F(LibraryTest, HandlesByUuidAndPciBusId) {
  nvmlDevice_t d = nullptr;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetHandleByUUID)("GPU-bbbb2222-2222-3333-4444-555555555555", &d), NVML_SUCCESS);
  EXPECT_EQ(d, device(2));
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetHandleByUUID)("GPU-bbbb2222", &d), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetHandleByUUID)(nullptr, &d), NVML_ERROR_INVALID_ARGUMENT);
  for (const char* id : {"00000000:65:00.0", "0000:65:00.0", "65:00.0", "00000000:65:00"}) {
    d = nullptr;
    ASSERT_EQ(NVML(*lib_, nvmlDeviceGetHandleByPciBusId_v2)(id, &d), NVML_SUCCESS) << id;
    EXPECT_EQ(d, device(1)) << id;
  }
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetHandleByPciBusId_v2)("00000000:66:00.0", &d), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetHandleByPciBusId)("nonsense", &d), NVML_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace tarmac::sim::test
