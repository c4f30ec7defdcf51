// tarmac's own declarations of the NVML C ABI: the types, structs and constants that tarmac and
// the simulator use, with NVIDIA's names, kept in namespace tarmac::nvml so that no nvml.h is
// needed to build. tests/abi checks every size, offset and value against NVIDIA's header.
#pragma once

#include <cstddef>

namespace tarmac::nvml {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEventSet_t = struct nvmlEventSet_st*;
using nvmlGpmSample_t = struct nvmlGpmSample_st*;

// Return codes (nvmlReturn_t).
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
inline constexpr nvmlReturn_t NVML_ERROR_ALREADY_INITIALIZED = 5;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_POWER = 8;
inline constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
inline constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
inline constexpr nvmlReturn_t NVML_ERROR_IRQ_ISSUE = 11;
inline constexpr nvmlReturn_t NVML_ERROR_LIBRARY_NOT_FOUND = 12;
inline constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
inline constexpr nvmlReturn_t NVML_ERROR_CORRUPTED_INFOROM = 14;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
inline constexpr nvmlReturn_t NVML_ERROR_RESET_REQUIRED = 16;
inline constexpr nvmlReturn_t NVML_ERROR_OPERATING_SYSTEM = 17;
inline constexpr nvmlReturn_t NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18;
inline constexpr nvmlReturn_t NVML_ERROR_IN_USE = 19;
inline constexpr nvmlReturn_t NVML_ERROR_MEMORY = 20;
inline constexpr nvmlReturn_t NVML_ERROR_NO_DATA = 21;
inline constexpr nvmlReturn_t NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_RESOURCES = 23;
inline constexpr nvmlReturn_t NVML_ERROR_FREQ_NOT_SUPPORTED = 24;
inline constexpr nvmlReturn_t NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
inline constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

// Enumerations are passed as C enums (int-sized); tarmac uses plain ints with named constants.
using nvmlEnableState_t = int;
inline constexpr nvmlEnableState_t NVML_FEATURE_DISABLED = 0;
inline constexpr nvmlEnableState_t NVML_FEATURE_ENABLED = 1;

using nvmlBrandType_t = int;
inline constexpr nvmlBrandType_t NVML_BRAND_UNKNOWN = 0;
inline constexpr nvmlBrandType_t NVML_BRAND_TESLA = 2;
inline constexpr nvmlBrandType_t NVML_BRAND_NVIDIA = 14;

using nvmlTemperatureSensors_t = int;
inline constexpr nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU = 0;

using nvmlTemperatureThresholds_t = int;
inline constexpr nvmlTemperatureThresholds_t NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0;
inline constexpr nvmlTemperatureThresholds_t NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1;
inline constexpr nvmlTemperatureThresholds_t NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2;
inline constexpr nvmlTemperatureThresholds_t NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3;

using nvmlClockType_t = int;
inline constexpr nvmlClockType_t NVML_CLOCK_GRAPHICS = 0;
inline constexpr nvmlClockType_t NVML_CLOCK_SM = 1;
inline constexpr nvmlClockType_t NVML_CLOCK_MEM = 2;
inline constexpr nvmlClockType_t NVML_CLOCK_VIDEO = 3;
inline constexpr nvmlClockType_t NVML_CLOCK_COUNT = 4;

using nvmlClockId_t = int;
inline constexpr nvmlClockId_t NVML_CLOCK_ID_CURRENT = 0;
inline constexpr nvmlClockId_t NVML_CLOCK_ID_APP_CLOCK_TARGET = 1;
inline constexpr nvmlClockId_t NVML_CLOCK_ID_APP_CLOCK_DEFAULT = 2;
inline constexpr nvmlClockId_t NVML_CLOCK_ID_CUSTOMER_BOOST_MAX = 3;

using nvmlPstates_t = int;
inline constexpr nvmlPstates_t NVML_PSTATE_0 = 0;
inline constexpr nvmlPstates_t NVML_PSTATE_15 = 15;
inline constexpr nvmlPstates_t NVML_PSTATE_UNKNOWN = 32;

using nvmlComputeMode_t = int;
inline constexpr nvmlComputeMode_t NVML_COMPUTEMODE_DEFAULT = 0;
inline constexpr nvmlComputeMode_t NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1;
inline constexpr nvmlComputeMode_t NVML_COMPUTEMODE_PROHIBITED = 2;
inline constexpr nvmlComputeMode_t NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3;

using nvmlPcieUtilCounter_t = int;
inline constexpr nvmlPcieUtilCounter_t NVML_PCIE_UTIL_TX_BYTES = 0;
inline constexpr nvmlPcieUtilCounter_t NVML_PCIE_UTIL_RX_BYTES = 1;

using nvmlMemoryErrorType_t = int;
inline constexpr nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
inline constexpr nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;

using nvmlEccCounterType_t = int;
inline constexpr nvmlEccCounterType_t NVML_VOLATILE_ECC = 0;
inline constexpr nvmlEccCounterType_t NVML_AGGREGATE_ECC = 1;

using nvmlMemoryLocation_t = int;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_L1_CACHE = 0;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_L2_CACHE = 1;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_DEVICE_MEMORY = 2;
inline constexpr nvmlMemoryLocation_t NVML_MEMORY_LOCATION_REGISTER_FILE = 3;

using nvmlPageRetirementCause_t = int;
inline constexpr nvmlPageRetirementCause_t NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0;
inline constexpr nvmlPageRetirementCause_t NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1;

using nvmlGpuTopologyLevel_t = int;
inline constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_INTERNAL = 0;
inline constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_SINGLE = 10;
inline constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_MULTIPLE = 20;
inline constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_HOSTBRIDGE = 30;
inline constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_NODE = 40;
inline constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_SYSTEM = 50;

using nvmlGpuP2PCapsIndex_t = int;
inline constexpr nvmlGpuP2PCapsIndex_t NVML_P2P_CAPS_INDEX_READ = 0;
inline constexpr nvmlGpuP2PCapsIndex_t NVML_P2P_CAPS_INDEX_NVLINK = 2;
using nvmlGpuP2PStatus_t = int;
inline constexpr nvmlGpuP2PStatus_t NVML_P2P_STATUS_OK = 0;
inline constexpr nvmlGpuP2PStatus_t NVML_P2P_STATUS_NOT_SUPPORTED = 5;

using nvmlNvLinkCapability_t = int;
inline constexpr nvmlNvLinkCapability_t NVML_NVLINK_CAP_P2P_SUPPORTED = 0;

using nvmlAffinityScope_t = unsigned int;
inline constexpr nvmlAffinityScope_t NVML_AFFINITY_SCOPE_NODE = 0;
inline constexpr nvmlAffinityScope_t NVML_AFFINITY_SCOPE_SOCKET = 1;

using nvmlGpmMetricId_t = int;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_GRAPHICS_UTIL = 1;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_SM_UTIL = 2;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_SM_OCCUPANCY = 3;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5;
inline constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_DRAM_BW_UTIL = 10;
inline constexpr int NVML_GPM_METRIC_MAX = 98;
inline constexpr unsigned int NVML_GPM_METRICS_GET_VERSION = 1;
inline constexpr unsigned int NVML_GPM_SUPPORT_VERSION = 1;

inline constexpr unsigned int NVML_INIT_FLAG_NO_GPUS = 1;
inline constexpr unsigned int NVML_INIT_FLAG_NO_ATTACH = 2;
inline constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0;
inline constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;
inline constexpr unsigned int NVML_NVLINK_MAX_LINKS = 18;
inline constexpr unsigned int NVML_VALUE_NOT_AVAILABLE_UINT = 0xFFFFFFFFu;

// Buffer sizes.
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
inline constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;
inline constexpr unsigned int NVML_DEVICE_UUID_BUFFER_SIZE = 80;
inline constexpr unsigned int NVML_DEVICE_NAME_BUFFER_SIZE = 64;
inline constexpr unsigned int NVML_DEVICE_SERIAL_BUFFER_SIZE = 30;
inline constexpr unsigned int NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE = 32;
inline constexpr unsigned int NVML_DEVICE_PART_NUMBER_BUFFER_SIZE = 80;
inline constexpr unsigned int NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
inline constexpr unsigned int NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE = 80;

// Clock event (throttle) reason bits.
inline constexpr unsigned long long nvmlClocksThrottleReasonGpuIdle = 0x1ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonApplicationsClocksSetting = 0x2ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonSwPowerCap = 0x4ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwSlowdown = 0x8ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonSyncBoost = 0x10ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonSwThermalSlowdown = 0x20ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwThermalSlowdown = 0x40ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonDisplayClockSetting = 0x100ULL;
inline constexpr unsigned long long nvmlClocksThrottleReasonNone = 0x0ULL;

// Event types.
inline constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x1ULL;
inline constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2ULL;
inline constexpr unsigned long long nvmlEventTypePState = 0x4ULL;
inline constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;
inline constexpr unsigned long long nvmlEventTypeClock = 0x10ULL;
inline constexpr unsigned long long nvmlEventTypePowerSourceChange = 0x80ULL;
inline constexpr unsigned long long nvmlEventTypeNone = 0x0ULL;

struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

struct nvmlEccErrorCounts_t {
  unsigned long long l1Cache;
  unsigned long long l2Cache;
  unsigned long long deviceMemory;
  unsigned long long registerFile;
};

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct nvmlMemory_v2_t {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};

// NVML_STRUCT_VERSION(Memory, 2): the struct's size ORed with the version in the top byte.
inline constexpr unsigned int struct_version(std::size_t size, unsigned int version) {
  return static_cast<unsigned int>(size) | (version << 24U);
}
inline constexpr unsigned int nvmlMemory_v2 = struct_version(sizeof(nvmlMemory_v2_t), 2);

struct nvmlBAR1Memory_t {
  unsigned long long bar1Total;
  unsigned long long bar1Free;
  unsigned long long bar1Used;
};

// v1 record (16 bytes): what the unversioned process functions fill.
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};

// v2 record (24 bytes): what the _v2 and _v3 process functions fill.
struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};

// What nvmlDeviceGetProcessesUtilizationInfo fills (drivers 550 and later): one record per process
// with a sample newer than the caller's lastSeenTimeStamp, now with JPEG and OFA engines. 40 bytes
// (the 8-byte timestamp first, so 4 bytes of tail padding).
struct nvmlProcessUtilizationInfo_v1_t {
  unsigned long long timeStamp;  // CPU time of the sample, microseconds since the epoch
  unsigned int pid;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
  unsigned int jpgUtil;
  unsigned int ofaUtil;
};

// The versioned argument of nvmlDeviceGetProcessesUtilizationInfo: the caller sets version, the
// array's capacity (processSamplesCount) and lastSeenTimeStamp; the driver writes the count back.
struct nvmlProcessesUtilizationInfo_v1_t {
  unsigned int version;
  unsigned int processSamplesCount;
  unsigned long long lastSeenTimeStamp;
  nvmlProcessUtilizationInfo_v1_t* procUtilArray;
};

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// NVML_STRUCT_VERSION(ProcessesUtilizationInfo, 1).
inline constexpr unsigned int nvmlProcessesUtilizationInfo_v1 =
    struct_version(sizeof(nvmlProcessesUtilizationInfo_v1_t), 1);

struct nvmlGpmMetric_t {
  unsigned int metricId;
  nvmlReturn_t nvmlReturn;
  double value;
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;
};

struct nvmlGpmMetricsGet_t {
  unsigned int version;
  unsigned int numMetrics;
  nvmlGpmSample_t sample1;
  nvmlGpmSample_t sample2;
  nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
};

struct nvmlGpmSupport_t {
  unsigned int version;
  unsigned int isSupportedDevice;
};

// What a device (or a MIG device) is made of: a MIG device's slices of its board (docs/mig.md).
struct nvmlDeviceAttributes_t {
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB;
};

}  // namespace tarmac::nvml
