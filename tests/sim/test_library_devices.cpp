// What the simulated GPUs report through the library: identity, PCI, power and energy, clocks
// and throttle reasons, topology, NVLink, affinity, ECC, MIG, GPM, events and per-process
// utilization.
#include <chrono>
#include <cstring>
#include <thread>

#include "library_fixture.hpp"

namespace tarmac::sim::test {
namespace {

TEST_F(LibraryTest, IdentityAndPciInfo) {
  unsigned index = 9;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetIndex)(device(1), &index), NVML_SUCCESS);
  EXPECT_EQ(index, 1U);
  char buf[96];
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetSerial)(device(1), buf, sizeof buf), NVML_SUCCESS);
  EXPECT_STREQ(buf, "1654923001234");
  unsigned arch = 0;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetArchitecture)(device(1), &arch), NVML_SUCCESS);
  EXPECT_EQ(arch, 9U);  // Hopper
  int major = 0;
  int minor = 0;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetCudaComputeCapability)(device(0), &major, &minor), NVML_SUCCESS);
  EXPECT_EQ(major * 10 + minor, 86);

  nvmlPciInfo_t pci;
  std::memset(&pci, 0xAB, sizeof pci);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetPciInfo_v3)(device(1), &pci), NVML_SUCCESS);
  EXPECT_STREQ(pci.busId, "00000000:65:00.0");
  EXPECT_STREQ(pci.busIdLegacy, "0000:65:00.0");
  EXPECT_EQ(pci.bus, 0x65U);
  // The unversioned call's caller may hold the shorter v1 struct: nothing past its fields.
  std::memset(&pci, 0xAB, sizeof pci);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetPciInfo)(device(1), &pci), NVML_SUCCESS);
  EXPECT_STREQ(pci.busIdLegacy, "0000:65:00.0");
  EXPECT_EQ(static_cast<unsigned char>(pci.busId[0]), 0xABU);
}

TEST_F(LibraryTest, PowerInMilliwattsAndEnergyInMillijoules) {
  unsigned mw = 0;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetPowerUsage)(device(0), &mw), NVML_SUCCESS);
  EXPECT_EQ(mw, 200000U);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetEnforcedPowerLimit)(device(1), &mw), NVML_SUCCESS);
  EXPECT_EQ(mw, 700000U);
  unsigned long long first = 0;
  unsigned long long second = 0;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetTotalEnergyConsumption)(device(0), &first), NVML_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetTotalEnergyConsumption)(device(0), &second), NVML_SUCCESS);
  EXPECT_GE(second - first, 10000U);  // at least 200 W x 50 ms
}

TEST_F(LibraryTest, ClocksAndClockEventReasons) {
  unsigned mhz = 0;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMaxClockInfo)(device(2), NVML_CLOCK_SM, &mhz), NVML_SUCCESS);
  EXPECT_EQ(mhz, 1410U);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetClockInfo)(device(2), NVML_CLOCK_SM, &mhz), NVML_SUCCESS);
  EXPECT_EQ(mhz, 210U);  // idle
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetClock)(device(2), NVML_CLOCK_MEM, NVML_CLOCK_ID_CUSTOMER_BOOST_MAX, &mhz),
            NVML_SUCCESS);
  EXPECT_EQ(mhz, 1215U);
  nvmlPstates_t pstate = 0;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetPerformanceState)(device(2), &pstate), NVML_SUCCESS);
  EXPECT_EQ(pstate, 8);
  unsigned long long reasons = 0;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetCurrentClocksEventReasons)(device(2), &reasons), NVML_SUCCESS);
  EXPECT_EQ(reasons, nvmlClocksThrottleReasonGpuIdle);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetCurrentClocksThrottleReasons)(device(0), &reasons), NVML_SUCCESS);
  EXPECT_EQ(reasons, 0U);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetSupportedClocksThrottleReasons)(device(0), &reasons), NVML_SUCCESS);
  EXPECT_EQ(reasons, 0x1FFU);
}

TEST_F(LibraryTest, TopologyFromTheScenario) {
  nvmlGpuTopologyLevel_t level = -1;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetTopologyCommonAncestor)(device(0), device(2), &level), NVML_SUCCESS);
  EXPECT_EQ(level, NVML_TOPOLOGY_MULTIPLE);  // PXB
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetTopologyCommonAncestor)(device(1), device(2), &level), NVML_SUCCESS);
  EXPECT_EQ(level, NVML_TOPOLOGY_NODE);  // NVLinked, same NUMA node
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetTopologyCommonAncestor)(device(0), device(1), &level), NVML_SUCCESS);
  EXPECT_EQ(level, NVML_TOPOLOGY_SYSTEM);
  nvmlGpuP2PStatus_t status = -1;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetP2PStatus)(device(1), device(2), NVML_P2P_CAPS_INDEX_NVLINK, &status), NVML_SUCCESS);
  EXPECT_EQ(status, NVML_P2P_STATUS_OK);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetP2PStatus)(device(0), device(1), NVML_P2P_CAPS_INDEX_NVLINK, &status), NVML_SUCCESS);
  EXPECT_EQ(status, NVML_P2P_STATUS_NOT_SUPPORTED);

  unsigned long cpus[2] = {~0UL, ~0UL};
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetCpuAffinity)(device(1), 2, cpus), NVML_SUCCESS);
  EXPECT_EQ(cpus[0], 0xFFFF0000UL);
  EXPECT_EQ(cpus[1], 0UL);
  unsigned long nodes = 0;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMemoryAffinity)(device(0), 1, &nodes, NVML_AFFINITY_SCOPE_NODE), NVML_SUCCESS);
  EXPECT_EQ(nodes, 1UL);
}

TEST_F(LibraryTest, NvLinkStateAndRemoteEnds) {
  nvmlEnableState_t active = -1;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetNvLinkState)(device(1), 3, &active), NVML_SUCCESS);
  EXPECT_EQ(active, NVML_FEATURE_ENABLED);  // NV4 to GPU 2: links 0-3
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetNvLinkState)(device(1), 4, &active), NVML_SUCCESS);
  EXPECT_EQ(active, NVML_FEATURE_DISABLED);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetNvLinkState)(device(1), 18, &active), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetNvLinkState)(device(0), 0, &active), NVML_ERROR_NOT_SUPPORTED);
  unsigned version = 0;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetNvLinkVersion)(device(1), 0, &version), NVML_SUCCESS);
  EXPECT_EQ(version, 4U);
  nvmlPciInfo_t remote{};
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetNvLinkRemotePciInfo_v2)(device(2), 1, &remote), NVML_SUCCESS);
  EXPECT_STREQ(remote.busId, "00000000:65:00.0");
  unsigned p2p = 9;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetNvLinkCapability)(device(2), 0, NVML_NVLINK_CAP_P2P_SUPPORTED, &p2p), NVML_SUCCESS);
  EXPECT_EQ(p2p, 1U);
}

TEST_F(LibraryTest, EccRetiredPagesRemappedRowsAndMig) {
  nvmlEnableState_t current = -1;
  nvmlEnableState_t pending = -1;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetEccMode)(device(1), &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, NVML_FEATURE_ENABLED);
  unsigned long long errors = 0;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetTotalEccErrors)(device(1), NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC,
                                                     &errors),
            NVML_SUCCESS);
  EXPECT_EQ(errors, 7U);
  inject("gpu=1,ecc=single_bit,at=0");  // an ECC error event counts in both counters
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetTotalEccErrors)(device(1), NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC,
                                                     &errors),
            NVML_SUCCESS);
  EXPECT_EQ(errors, 8U);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMemoryErrorCounter)(device(1), NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
                                                         NVML_MEMORY_LOCATION_DEVICE_MEMORY, &errors),
            NVML_SUCCESS);
  EXPECT_EQ(errors, 1U);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetTotalEccErrors)(device(2), NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
                                                     &errors),
            NVML_ERROR_NOT_SUPPORTED);  // ECC disabled

  unsigned count = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetRetiredPages)(device(2), NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                                                   &count, nullptr),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2U);
  unsigned long long pages[2] = {};
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetRetiredPages)(device(2), NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                                                   &count, pages),
            NVML_SUCCESS);
  EXPECT_EQ(pages[1], 8192U);
  unsigned corr = 0;
  unsigned unc = 9;
  unsigned is_pending = 0;
  unsigned failure = 9;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetRemappedRows)(device(1), &corr, &unc, &is_pending, &failure), NVML_SUCCESS);
  EXPECT_EQ(corr, 2U);
  EXPECT_EQ(unc, 0U);
  EXPECT_EQ(is_pending, 1U);
  EXPECT_EQ(failure, 0U);
  unsigned mig = 9;
  unsigned mig_pending = 9;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetMigMode)(device(1), &mig, &mig_pending), NVML_SUCCESS);
  EXPECT_EQ(mig, NVML_DEVICE_MIG_DISABLE);
}

TEST_F(LibraryTest, GpmOnlyOnHopper) {
  nvmlGpmSupport_t support{};
  EXPECT_EQ(NVML(*lib_, nvmlGpmQueryDeviceSupport)(device(1), &support), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  support.version = NVML_GPM_SUPPORT_VERSION;
  ASSERT_EQ(NVML(*lib_, nvmlGpmQueryDeviceSupport)(device(1), &support), NVML_SUCCESS);
  EXPECT_EQ(support.isSupportedDevice, 1U);
  ASSERT_EQ(NVML(*lib_, nvmlGpmQueryDeviceSupport)(device(0), &support), NVML_SUCCESS);
  EXPECT_EQ(support.isSupportedDevice, 0U);

  nvmlGpmSample_t s1 = nullptr;
  nvmlGpmSample_t s2 = nullptr;
  ASSERT_EQ(NVML(*lib_, nvmlGpmSampleAlloc)(&s1), NVML_SUCCESS);
  ASSERT_EQ(NVML(*lib_, nvmlGpmSampleAlloc)(&s2), NVML_SUCCESS);
  EXPECT_EQ(NVML(*lib_, nvmlGpmSampleGet)(device(0), s1), NVML_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(NVML(*lib_, nvmlGpmSampleGet)(device(1), s1), NVML_SUCCESS);
  ASSERT_EQ(NVML(*lib_, nvmlGpmSampleGet)(device(1), s2), NVML_SUCCESS);
  auto metrics = std::make_unique<nvmlGpmMetricsGet_t>();
  metrics->version = NVML_GPM_METRICS_GET_VERSION;
  metrics->numMetrics = 4;
  metrics->sample1 = s1;
  metrics->sample2 = s2;
  metrics->metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL;
  metrics->metrics[1].metricId = NVML_GPM_METRIC_ANY_TENSOR_UTIL;
  metrics->metrics[2].metricId = NVML_GPM_METRIC_SM_OCCUPANCY;
  metrics->metrics[3].metricId = 4;  // integer utilization: not simulated
  ASSERT_EQ(NVML(*lib_, nvmlGpmMetricsGet)(metrics.get()), NVML_SUCCESS);
  EXPECT_EQ(metrics->metrics[0].nvmlReturn, NVML_SUCCESS);
  EXPECT_DOUBLE_EQ(metrics->metrics[0].value, 37.5);
  EXPECT_DOUBLE_EQ(metrics->metrics[1].value, 12.5);
  EXPECT_DOUBLE_EQ(metrics->metrics[2].value, 18.75);  // unset occupancy: half the SM utilization
  EXPECT_EQ(metrics->metrics[3].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
  metrics->version = 2;
  EXPECT_EQ(NVML(*lib_, nvmlGpmMetricsGet)(metrics.get()), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  EXPECT_EQ(NVML(*lib_, nvmlGpmSampleFree)(s1), NVML_SUCCESS);
  EXPECT_EQ(NVML(*lib_, nvmlGpmSampleFree)(s1), NVML_ERROR_INVALID_ARGUMENT);  // already freed
  EXPECT_EQ(NVML(*lib_, nvmlGpmSampleFree)(s2), NVML_SUCCESS);
}

TEST_F(LibraryTest, EventWaitTimesOutThenDeliversAnInjectedXid) {
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(NVML(*lib_, nvmlEventSetCreate)(&set), NVML_SUCCESS);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceRegisterEvents)(device(1), nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  EXPECT_EQ(NVML(*lib_, nvmlDeviceRegisterEvents)(device(0), nvmlEventTypeSingleBitEccError, set),
            NVML_ERROR_NOT_SUPPORTED);  // no ECC on the A6000
  nvmlEventData_t data{};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(NVML(*lib_, nvmlEventSetWait_v2)(set, &data, 50), NVML_ERROR_TIMEOUT);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));

  std::thread injector([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    auto clock = read_clock_file(StateDir(dir_.path()).clock());
    inject("gpu=1,xid=48", SimClock(*clock).seconds());
  });
  const nvmlReturn_t rc = NVML(*lib_, nvmlEventSetWait_v2)(set, &data, 5000);
  injector.join();
  ASSERT_EQ(rc, NVML_SUCCESS);
  EXPECT_EQ(data.device, device(1));
  EXPECT_EQ(data.eventType, nvmlEventTypeXidCriticalError);
  EXPECT_EQ(data.eventData, 48U);
  EXPECT_EQ(NVML(*lib_, nvmlEventSetWait_v2)(set, &data, 0), NVML_ERROR_TIMEOUT);  // delivered once
  EXPECT_EQ(NVML(*lib_, nvmlEventSetFree)(set), NVML_SUCCESS);
}

TEST_F(LibraryTest, PerProcessUtilizationSamples) {
  Sleeper load;
  Sleeper idle;
  register_load(load, 2, 1024, 30);
  register_load(idle, 2, 1024, 0);  // no utilization: no sample, as the driver documents
  unsigned count = 0;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetProcessUtilization)(device(2), nullptr, &count, 0), NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(count, 1U);
  nvmlProcessUtilizationSample_t samples[2]{};
  count = 2;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetProcessUtilization)(device(2), samples, &count, 0), NVML_SUCCESS);
  ASSERT_EQ(count, 1U);
  EXPECT_EQ(samples[0].pid, static_cast<unsigned>(load.pid()));
  EXPECT_EQ(samples[0].smUtil, 30U);
  EXPECT_EQ(samples[0].memUtil, 15U);
  EXPECT_GT(samples[0].timeStamp, 0U);
  count = 2;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetProcessUtilization)(device(2), samples, &count, samples[0].timeStamp + 3'600'000'000ULL),
            NVML_ERROR_NOT_FOUND);  // nothing newer than lastSeen
  nvmlUtilization_t rates{};
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetUtilizationRates)(device(2), &rates), NVML_SUCCESS);
  EXPECT_EQ(rates.gpu, 30U);
}

// The newer function: the struct's version, the count handshake through processSamplesCount, the
// 40-byte records, lastSeen, and the same samples as the older function (load programs included).
TEST_F(LibraryTest, ProcessesUtilizationInfoSpeaksNvidiasVersionedStruct) {
  Sleeper load;
  Sleeper idle;
  register_load(load, 2, 1024, 30);
  register_load(idle, 2, 2048, 0);  // a zombie: listed, holding memory, no sample
  auto get = NVML(*lib_, nvmlDeviceGetProcessesUtilizationInfo);
  EXPECT_EQ(get(device(2), nullptr), NVML_ERROR_INVALID_ARGUMENT);
  nvmlProcessesUtilizationInfo_v1_t info{};
  info.version = struct_version(sizeof(info), 2);
  EXPECT_EQ(get(device(2), &info), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  info.version = nvmlProcessesUtilizationInfo_v1;
  EXPECT_EQ(get(device(2), &info), NVML_ERROR_INSUFFICIENT_SIZE);  // no array: the count needed
  ASSERT_EQ(info.processSamplesCount, 1U);
  nvmlProcessUtilizationInfo_v1_t records[2]{};
  info.procUtilArray = records;
  info.processSamplesCount = 2;
  ASSERT_EQ(get(device(2), &info), NVML_SUCCESS);
  ASSERT_EQ(info.processSamplesCount, 1U);
  EXPECT_EQ(records[0].pid, static_cast<unsigned>(load.pid()));
  EXPECT_EQ(records[0].smUtil, 30U);
  EXPECT_EQ(records[0].memUtil, 15U);
  EXPECT_EQ(records[0].jpgUtil, 0U);
  // Stamped with real time (what a driver's CPU timestamps are), within a sample period of now.
  const auto now_us = static_cast<unsigned long long>(realtime_ns() / 1000);
  EXPECT_LE(records[0].timeStamp, now_us);
  EXPECT_GT(records[0].timeStamp + 1'000'000ULL, now_us);

  nvmlProcessUtilizationSample_t old[2]{};
  unsigned count = 2;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetProcessUtilization)(device(2), old, &count, 0), NVML_SUCCESS);
  ASSERT_EQ(count, 1U);
  EXPECT_EQ(old[0].pid, records[0].pid);
  EXPECT_EQ(old[0].smUtil, records[0].smUtil);

  info.lastSeenTimeStamp = records[0].timeStamp + 3'600'000'000ULL;
  info.processSamplesCount = 2;
  EXPECT_EQ(get(device(2), &info), NVML_ERROR_NOT_FOUND);  // nothing newer than lastSeen
}

// Registers a child as a load on GPU 2 whose samples say `sample`.
void register_sampled(const fs::path& state, const Sleeper& child, UtilSample sample) {
  LiveProcess p;
  p.pid = child.pid();
  p.gpus = {2};
  p.memory_mib = 1024;
  p.util_sample = sample;
  ASSERT_TRUE(register_process(StateDir(state).procs(), p).ok());
}

TEST_F(LibraryTest, AGarbageSampleIsReturnedEvenAtZeroPercent) {
  Sleeper garbled;
  register_sampled(dir_.path(), garbled, UtilSample::Garbage);
  nvmlProcessUtilizationSample_t samples[2]{};
  unsigned count = 2;
  ASSERT_EQ(NVML(*lib_, nvmlDeviceGetProcessUtilization)(device(2), samples, &count, 0), NVML_SUCCESS);
  ASSERT_EQ(count, 1U);
  EXPECT_EQ(samples[0].pid, static_cast<unsigned>(garbled.pid()));
  EXPECT_GT(samples[0].smUtil, 100U);
  EXPECT_GT(samples[0].memUtil, 100U);
}

TEST_F(LibraryTest, AnUnreadableProcessMakesItsGpusSamplesUnreadable) {
  Sleeper unreadable;
  register_sampled(dir_.path(), unreadable, UtilSample::Unreadable);
  nvmlProcessUtilizationSample_t samples[2]{};
  unsigned count = 2;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetProcessUtilization)(device(2), samples, &count, 0), NVML_ERROR_UNKNOWN);
  nvmlProcessesUtilizationInfo_v1_t info{};
  info.version = nvmlProcessesUtilizationInfo_v1;
  EXPECT_EQ(NVML(*lib_, nvmlDeviceGetProcessesUtilizationInfo)(device(2), &info), NVML_ERROR_UNKNOWN);
  count = 2;  // other GPUs are not concerned
  EXPECT_NE(NVML(*lib_, nvmlDeviceGetProcessUtilization)(device(0), samples, &count, 0), NVML_ERROR_UNKNOWN);
}

}  // namespace
}  // namespace tarmac::sim::test

namespace tarmac::sim::test {
namespace {

// A scenario whose timeline has an XID at 10 simulated seconds, run 20 times faster than real time
// (half a second: room for a slow set-up to create the event set before it).
class ScenarioEvent : public LibraryTest {
 public:
  ScenarioEvent() {
    speed_ = 20;
    scenario_ = dir_.path() / "events.toml";
    write_text(scenario_, read_text(test_data("mixed-models.toml")) + "\n[[event]]\ngpu = 0\nat = \"10s\"\nxid = 31\n");
  }
};

TEST_F(ScenarioEvent, TimelineEventsArriveAtTheirSimulatedTime) {
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(NVML(*lib_, nvmlEventSetCreate)(&set), NVML_SUCCESS);
  ASSERT_EQ(NVML(*lib_, nvmlDeviceRegisterEvents)(device(0), nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  nvmlEventData_t data{};
  ASSERT_EQ(NVML(*lib_, nvmlEventSetWait)(set, &data, 5000), NVML_SUCCESS);
  const auto clock = read_clock_file(StateDir(dir_.path()).clock());
  ASSERT_TRUE(clock.ok());
  EXPECT_GE(SimClock(*clock).seconds(), 10.0);  // not before its time
  EXPECT_EQ(data.eventData, 31U);
  EXPECT_EQ(data.device, device(0));
  NVML(*lib_, nvmlEventSetFree)(set);
}

}  // namespace
}  // namespace tarmac::sim::test
