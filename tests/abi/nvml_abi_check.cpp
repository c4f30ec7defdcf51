// Compile-time check of tarmac's own NVML declarations (src/tarmac/nvml) against NVIDIA's nvml.h
// (CUDA 11.8, Debian's libnvidia-ml-dev, fetched by scripts/peers.sh). Every size, alignment,
// field offset, constant and function signature that tarmac declares is a static_assert here: if
// this file compiles, tarmac and the simulator speak the real driver's ABI. The program only prints
// how many checks passed.
//
// tests/abi/check_coverage.py keeps the lists below complete: a type, constant, struct or field
// added to nvml_types.hpp without a line here fails that test. Functions need no list: they come
// from the X-macro table nvml_functions.def.
//
// Two phases, because nvml.h defines many of tarmac's names as macros (nvmlMemory_v2, the buffer
// sizes, the throttle-reason and event bits): tarmac's constant values are copied under a pasted
// name (t_<name>, never expanded) *before* nvml.h is included, and compared with the expansion of
// <name> after it.

#include <cstddef>
#include <cstdio>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tarmac/nvml/nvml_api.hpp"
#include "tarmac/nvml/nvml_types.hpp"

// ---------------------------------------------------------------------------------------------
// The lists (by hand, from nvml_types.hpp, top to bottom).

// Type aliases (enums, handles, return code): size and alignment.
#define TARMAC_ABI_TYPES(T)                                                                       \
  T(nvmlReturn_t) T(nvmlDevice_t) T(nvmlEventSet_t) T(nvmlGpmSample_t) T(nvmlEnableState_t)       \
  T(nvmlBrandType_t) T(nvmlTemperatureSensors_t) T(nvmlTemperatureThresholds_t)                   \
  T(nvmlClockType_t) T(nvmlClockId_t) T(nvmlPstates_t) T(nvmlComputeMode_t)                       \
  T(nvmlPcieUtilCounter_t) T(nvmlMemoryErrorType_t) T(nvmlEccCounterType_t)                       \
  T(nvmlMemoryLocation_t) T(nvmlPageRetirementCause_t) T(nvmlGpuTopologyLevel_t)                  \
  T(nvmlGpuP2PCapsIndex_t) T(nvmlGpuP2PStatus_t) T(nvmlNvLinkCapability_t)                        \
  T(nvmlAffinityScope_t) T(nvmlGpmMetricId_t)

// Constants and enum values that nvml.h spells the same way.
#define TARMAC_ABI_CONSTANTS(C)                                                                   \
  /* nvmlReturn_t */                                                                              \
  C(NVML_SUCCESS) C(NVML_ERROR_UNINITIALIZED) C(NVML_ERROR_INVALID_ARGUMENT)                      \
  C(NVML_ERROR_NOT_SUPPORTED) C(NVML_ERROR_NO_PERMISSION) C(NVML_ERROR_ALREADY_INITIALIZED)       \
  C(NVML_ERROR_NOT_FOUND) C(NVML_ERROR_INSUFFICIENT_SIZE) C(NVML_ERROR_INSUFFICIENT_POWER)         \
  C(NVML_ERROR_DRIVER_NOT_LOADED) C(NVML_ERROR_TIMEOUT) C(NVML_ERROR_IRQ_ISSUE)                   \
  C(NVML_ERROR_LIBRARY_NOT_FOUND) C(NVML_ERROR_FUNCTION_NOT_FOUND)                                \
  C(NVML_ERROR_CORRUPTED_INFOROM) C(NVML_ERROR_GPU_IS_LOST) C(NVML_ERROR_RESET_REQUIRED)          \
  C(NVML_ERROR_OPERATING_SYSTEM) C(NVML_ERROR_LIB_RM_VERSION_MISMATCH) C(NVML_ERROR_IN_USE)       \
  C(NVML_ERROR_MEMORY) C(NVML_ERROR_NO_DATA) C(NVML_ERROR_VGPU_ECC_NOT_SUPPORTED)                 \
  C(NVML_ERROR_INSUFFICIENT_RESOURCES) C(NVML_ERROR_FREQ_NOT_SUPPORTED)                           \
  C(NVML_ERROR_ARGUMENT_VERSION_MISMATCH) C(NVML_ERROR_UNKNOWN)                                   \
  /* enumerations */                                                                              \
  C(NVML_FEATURE_DISABLED) C(NVML_FEATURE_ENABLED)                                                \
  C(NVML_BRAND_UNKNOWN) C(NVML_BRAND_TESLA) C(NVML_BRAND_NVIDIA)                                  \
  C(NVML_TEMPERATURE_GPU)                                                                         \
  C(NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) C(NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)                   \
  C(NVML_TEMPERATURE_THRESHOLD_MEM_MAX) C(NVML_TEMPERATURE_THRESHOLD_GPU_MAX)                     \
  C(NVML_CLOCK_GRAPHICS) C(NVML_CLOCK_SM) C(NVML_CLOCK_MEM) C(NVML_CLOCK_VIDEO)                   \
  C(NVML_CLOCK_COUNT)                                                                             \
  C(NVML_CLOCK_ID_CURRENT) C(NVML_CLOCK_ID_APP_CLOCK_TARGET) C(NVML_CLOCK_ID_APP_CLOCK_DEFAULT)   \
  C(NVML_CLOCK_ID_CUSTOMER_BOOST_MAX)                                                             \
  C(NVML_PSTATE_0) C(NVML_PSTATE_15) C(NVML_PSTATE_UNKNOWN)                                       \
  C(NVML_COMPUTEMODE_DEFAULT) C(NVML_COMPUTEMODE_EXCLUSIVE_THREAD)                                \
  C(NVML_COMPUTEMODE_PROHIBITED) C(NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)                            \
  C(NVML_PCIE_UTIL_TX_BYTES) C(NVML_PCIE_UTIL_RX_BYTES)                                           \
  C(NVML_MEMORY_ERROR_TYPE_CORRECTED) C(NVML_MEMORY_ERROR_TYPE_UNCORRECTED)                       \
  C(NVML_VOLATILE_ECC) C(NVML_AGGREGATE_ECC)                                                      \
  C(NVML_MEMORY_LOCATION_L1_CACHE) C(NVML_MEMORY_LOCATION_L2_CACHE)                               \
  C(NVML_MEMORY_LOCATION_DEVICE_MEMORY) C(NVML_MEMORY_LOCATION_REGISTER_FILE)                     \
  C(NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)                                    \
  C(NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)                                              \
  C(NVML_TOPOLOGY_INTERNAL) C(NVML_TOPOLOGY_SINGLE) C(NVML_TOPOLOGY_MULTIPLE)                     \
  C(NVML_TOPOLOGY_HOSTBRIDGE) C(NVML_TOPOLOGY_NODE) C(NVML_TOPOLOGY_SYSTEM)                       \
  C(NVML_P2P_CAPS_INDEX_READ) C(NVML_P2P_CAPS_INDEX_NVLINK)                                       \
  C(NVML_P2P_STATUS_OK) C(NVML_P2P_STATUS_NOT_SUPPORTED)                                          \
  C(NVML_NVLINK_CAP_P2P_SUPPORTED)                                                                \
  C(NVML_AFFINITY_SCOPE_NODE) C(NVML_AFFINITY_SCOPE_SOCKET)                                       \
  C(NVML_GPM_METRIC_GRAPHICS_UTIL) C(NVML_GPM_METRIC_SM_UTIL) C(NVML_GPM_METRIC_SM_OCCUPANCY)     \
  C(NVML_GPM_METRIC_ANY_TENSOR_UTIL) C(NVML_GPM_METRIC_DRAM_BW_UTIL) C(NVML_GPM_METRIC_MAX)       \
  C(NVML_GPM_METRICS_GET_VERSION) C(NVML_GPM_SUPPORT_VERSION)                                     \
  /* flags and limits */                                                                          \
  C(NVML_INIT_FLAG_NO_GPUS) C(NVML_INIT_FLAG_NO_ATTACH)                                           \
  C(NVML_DEVICE_MIG_DISABLE) C(NVML_DEVICE_MIG_ENABLE)                                            \
  C(NVML_NVLINK_MAX_LINKS)                                                                        \
  /* buffer sizes */                                                                              \
  C(NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE) C(NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE)                  \
  C(NVML_DEVICE_UUID_BUFFER_SIZE) C(NVML_DEVICE_NAME_BUFFER_SIZE)                                 \
  C(NVML_DEVICE_SERIAL_BUFFER_SIZE) C(NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE)                      \
  C(NVML_DEVICE_PART_NUMBER_BUFFER_SIZE) C(NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE)                \
  C(NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE)                                                         \
  /* clock event (throttle) reasons */                                                            \
  C(nvmlClocksThrottleReasonGpuIdle) C(nvmlClocksThrottleReasonApplicationsClocksSetting)         \
  C(nvmlClocksThrottleReasonSwPowerCap) C(nvmlClocksThrottleReasonHwSlowdown)                     \
  C(nvmlClocksThrottleReasonSyncBoost) C(nvmlClocksThrottleReasonSwThermalSlowdown)               \
  C(nvmlClocksThrottleReasonHwThermalSlowdown) C(nvmlClocksThrottleReasonHwPowerBrakeSlowdown)    \
  C(nvmlClocksThrottleReasonDisplayClockSetting) C(nvmlClocksThrottleReasonNone)                  \
  /* event types */                                                                               \
  C(nvmlEventTypeSingleBitEccError) C(nvmlEventTypeDoubleBitEccError) C(nvmlEventTypePState)      \
  C(nvmlEventTypeXidCriticalError) C(nvmlEventTypeClock) C(nvmlEventTypePowerSourceChange)        \
  C(nvmlEventTypeNone)                                                                            \
  /* struct versions */                                                                           \
  C(nvmlMemory_v2)

// tarmac's names for values that nvml.h spells differently: (tarmac name, nvml.h expression).
#define TARMAC_ABI_RENAMED_CONSTANTS(R)                                                           \
  R(NVML_VALUE_NOT_AVAILABLE_UINT, static_cast<unsigned int>(NVML_VALUE_NOT_AVAILABLE))

// Structs: size and alignment.
#define TARMAC_ABI_STRUCTS(S)                                                                     \
  S(nvmlPciInfo_t) S(nvmlEccErrorCounts_t) S(nvmlUtilization_t) S(nvmlMemory_t)                   \
  S(nvmlMemory_v2_t) S(nvmlBAR1Memory_t) S(nvmlProcessInfo_v1_t) S(nvmlProcessInfo_v2_t)          \
  S(nvmlProcessUtilizationSample_t) S(nvmlEventData_t) S(nvmlGpmMetric_t)                         \
  S(nvmlGpmMetricsGet_t) S(nvmlGpmSupport_t) S(nvmlDeviceAttributes_t)

// Fields: offset, size, alignment and kind (integer, floating, pointer, array of ...).
#define TARMAC_ABI_FIELDS(F)                                                                      \
  F(nvmlPciInfo_t, busIdLegacy) F(nvmlPciInfo_t, domain) F(nvmlPciInfo_t, bus)                    \
  F(nvmlPciInfo_t, device) F(nvmlPciInfo_t, pciDeviceId) F(nvmlPciInfo_t, pciSubSystemId)         \
  F(nvmlPciInfo_t, busId)                                                                         \
  F(nvmlEccErrorCounts_t, l1Cache) F(nvmlEccErrorCounts_t, l2Cache)                               \
  F(nvmlEccErrorCounts_t, deviceMemory) F(nvmlEccErrorCounts_t, registerFile)                     \
  F(nvmlUtilization_t, gpu) F(nvmlUtilization_t, memory)                                          \
  F(nvmlMemory_t, total) F(nvmlMemory_t, free) F(nvmlMemory_t, used)                              \
  F(nvmlMemory_v2_t, version) F(nvmlMemory_v2_t, total) F(nvmlMemory_v2_t, reserved)              \
  F(nvmlMemory_v2_t, free) F(nvmlMemory_v2_t, used)                                               \
  F(nvmlBAR1Memory_t, bar1Total) F(nvmlBAR1Memory_t, bar1Free) F(nvmlBAR1Memory_t, bar1Used)      \
  F(nvmlProcessInfo_v1_t, pid) F(nvmlProcessInfo_v1_t, usedGpuMemory)                             \
  F(nvmlProcessInfo_v2_t, pid) F(nvmlProcessInfo_v2_t, usedGpuMemory)                             \
  F(nvmlProcessInfo_v2_t, gpuInstanceId) F(nvmlProcessInfo_v2_t, computeInstanceId)               \
  F(nvmlProcessUtilizationSample_t, pid) F(nvmlProcessUtilizationSample_t, timeStamp)             \
  F(nvmlProcessUtilizationSample_t, smUtil) F(nvmlProcessUtilizationSample_t, memUtil)            \
  F(nvmlProcessUtilizationSample_t, encUtil) F(nvmlProcessUtilizationSample_t, decUtil)           \
  F(nvmlEventData_t, device) F(nvmlEventData_t, eventType) F(nvmlEventData_t, eventData)          \
  F(nvmlEventData_t, gpuInstanceId) F(nvmlEventData_t, computeInstanceId)                         \
  F(nvmlGpmMetric_t, metricId) F(nvmlGpmMetric_t, nvmlReturn) F(nvmlGpmMetric_t, value)           \
  F(nvmlGpmMetric_t, metricInfo) F(nvmlGpmMetric_t, metricInfo.shortName)                         \
  F(nvmlGpmMetric_t, metricInfo.longName) F(nvmlGpmMetric_t, metricInfo.unit)                     \
  F(nvmlGpmMetricsGet_t, version) F(nvmlGpmMetricsGet_t, numMetrics)                              \
  F(nvmlGpmMetricsGet_t, sample1) F(nvmlGpmMetricsGet_t, sample2) F(nvmlGpmMetricsGet_t, metrics) \
  F(nvmlGpmSupport_t, version) F(nvmlGpmSupport_t, isSupportedDevice)                             \
  F(nvmlDeviceAttributes_t, multiprocessorCount) F(nvmlDeviceAttributes_t, sharedCopyEngineCount) \
  F(nvmlDeviceAttributes_t, sharedDecoderCount) F(nvmlDeviceAttributes_t, sharedEncoderCount)     \
  F(nvmlDeviceAttributes_t, sharedJpegCount) F(nvmlDeviceAttributes_t, sharedOfaCount)             \
  F(nvmlDeviceAttributes_t, gpuInstanceSliceCount)                                                \
  F(nvmlDeviceAttributes_t, computeInstanceSliceCount) F(nvmlDeviceAttributes_t, memorySizeMB)

// ---------------------------------------------------------------------------------------------
// Phase 1: tarmac's constant values under names that nvml.h cannot touch.

namespace tarmac_side {
#define TARMAC_ABI_COPY(name) inline constexpr auto t_##name = tarmac::nvml::name;
TARMAC_ABI_CONSTANTS(TARMAC_ABI_COPY)
#undef TARMAC_ABI_COPY
#define TARMAC_ABI_COPY_RENAMED(name, nvml_expr) inline constexpr auto t_##name = tarmac::nvml::name;
TARMAC_ABI_RENAMED_CONSTANTS(TARMAC_ABI_COPY_RENAMED)
#undef TARMAC_ABI_COPY_RENAMED
}  // namespace tarmac_side

// ---------------------------------------------------------------------------------------------
// Phase 2: NVIDIA's header. Unversioned names must stay themselves (nvml.h would otherwise
// #define nvmlInit to nvmlInit_v2 and so on), because tarmac loads both generations.

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

// Entry points tarmac uses that are newer than CUDA 11.8's header, declared here as NVIDIA's later
// headers declare them (checked against pynvml 12.550.89, which binds them with these argument
// types). check_coverage.py asserts that 11.8's nvml.h does not declare them, so this list cannot
// hide a real declaration; if it ever did with another signature, these would not compile.
// The one argument of nvmlDeviceGetProcessesUtilizationInfo is a struct 11.8's header lacks too
// (below): tarmac's own type stands in for it, so only the arity and the handle are checked here.
#define TARMAC_ABI_NEWER_THAN_HEADER(N)                                                           \
  N(nvmlDeviceGetGpuMaxPcieLinkGeneration) N(nvmlDeviceGetCurrentClocksEventReasons)              \
  N(nvmlDeviceGetSupportedClocksEventReasons) N(nvmlDeviceGetProcessesUtilizationInfo)             \
  N(nvmlGpmMigSampleGet)
extern "C" {
nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t gpmSample);
nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int* maxLinkGenDevice);
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* clocksEventReasons);
nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long* supportedClocksEventReasons);
nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                   tarmac::nvml::nvmlProcessesUtilizationInfo_v1_t* procesesUtilInfo);
}

// Structs (and their version constant) newer than 11.8's header: Debian's nvml.h has no
// nvmlProcessUtilizationInfo_v1_t or nvmlProcessesUtilizationInfo_v1_t, so their layout is pinned
// here as NVIDIA documents it (NVML API reference, "nvmlProcessUtilizationInfo_v1_t" and
// "nvmlProcessesUtilizationInfo_v1_t"; pynvml 12.550.89 declares the same fields in the same order
// and ProcessesUtilizationInfo_v1 = 0x01000018). check_coverage.py asserts that the header lacks
// them, so a header that has them moves them to the lists above. NS(struct, size, alignment);
// NF(struct, field, offset, size); NC(constant, value).
#define TARMAC_ABI_NEWER_STRUCTS(NS)                                                              \
  NS(nvmlProcessUtilizationInfo_v1_t, 40, 8) NS(nvmlProcessesUtilizationInfo_v1_t, 24, 8)
#define TARMAC_ABI_NEWER_FIELDS(NF)                                                               \
  NF(nvmlProcessUtilizationInfo_v1_t, timeStamp, 0, 8) NF(nvmlProcessUtilizationInfo_v1_t, pid, 8, 4) \
  NF(nvmlProcessUtilizationInfo_v1_t, smUtil, 12, 4) NF(nvmlProcessUtilizationInfo_v1_t, memUtil, 16, 4) \
  NF(nvmlProcessUtilizationInfo_v1_t, encUtil, 20, 4) NF(nvmlProcessUtilizationInfo_v1_t, decUtil, 24, 4) \
  NF(nvmlProcessUtilizationInfo_v1_t, jpgUtil, 28, 4) NF(nvmlProcessUtilizationInfo_v1_t, ofaUtil, 32, 4) \
  NF(nvmlProcessesUtilizationInfo_v1_t, version, 0, 4)                                            \
  NF(nvmlProcessesUtilizationInfo_v1_t, processSamplesCount, 4, 4)                                \
  NF(nvmlProcessesUtilizationInfo_v1_t, lastSeenTimeStamp, 8, 8)                                  \
  NF(nvmlProcessesUtilizationInfo_v1_t, procUtilArray, 16, 8)
#define TARMAC_ABI_NEWER_CONSTANTS(NC) NC(nvmlProcessesUtilizationInfo_v1, 0x01000018u)

namespace {

// ---------------------------------------------------------------------------------------------
// Comparison helpers. tarmac declares enums as int and handles as pointers to its own incomplete
// structs, so "compatible" means: same size and alignment, and the same kind of thing (integer or
// enum, floating point, pointer to something of the same size and constness, array of compatible
// elements with the same extent, struct of the same size).

template <class T, class = void>
struct is_complete : std::false_type {};
template <class T>
struct is_complete<T, std::void_t<decltype(sizeof(T))>> : std::true_type {};

template <class T>
constexpr bool is_integer_like = std::is_integral_v<T> || std::is_enum_v<T>;

template <class A, class B>
constexpr bool compatible() {
  if constexpr (std::is_array_v<A> || std::is_array_v<B>) {
    return std::is_array_v<A> && std::is_array_v<B> && std::extent_v<A> == std::extent_v<B> &&
           compatible<std::remove_extent_t<A>, std::remove_extent_t<B>>();
  } else if constexpr (std::is_pointer_v<A> || std::is_pointer_v<B>) {
    if constexpr (!(std::is_pointer_v<A> && std::is_pointer_v<B>)) {
      return false;
    } else {
      using PA = std::remove_pointer_t<A>;
      using PB = std::remove_pointer_t<B>;
      if constexpr (std::is_const_v<PA> != std::is_const_v<PB>) {
        return false;
      } else if constexpr (is_complete<PA>::value && is_complete<PB>::value) {
        return compatible<std::remove_cv_t<PA>, std::remove_cv_t<PB>>();
      } else {
        // Opaque handles (nvmlDevice_st, nvmlEventSet_st, ...) and void: both must be opaque.
        return is_complete<PA>::value == is_complete<PB>::value;
      }
    }
  } else if constexpr (is_integer_like<A> || is_integer_like<B>) {
    return is_integer_like<A> && is_integer_like<B> && sizeof(A) == sizeof(B) &&
           alignof(A) == alignof(B);
  } else if constexpr (std::is_floating_point_v<A> || std::is_floating_point_v<B>) {
    return std::is_same_v<A, B>;
  } else if constexpr (std::is_class_v<A> && std::is_class_v<B>) {
    return sizeof(A) == sizeof(B) && alignof(A) == alignof(B);
  } else {
    return false;
  }
}

template <class T>
constexpr auto as_integer(T v) {
  if constexpr (std::is_enum_v<T>) {
    return static_cast<std::underlying_type_t<T>>(v);
  } else {
    return v;
  }
}

template <class A, class B>
constexpr bool same_value(A a, B b) {
  return std::cmp_equal(as_integer(a), as_integer(b));
}

template <class F>
struct signature;
template <class R, class... A>
struct signature<R (*)(A...)> {
  using result = R;
  using params = std::tuple<A...>;
  static constexpr std::size_t arity = sizeof...(A);
};

// One instantiation per parameter, so that a failure names the parameter's index and both types
// in the compiler's "required from" notes, under the function named by the static_assert below.
template <std::size_t I, class Tarmac, class Nvidia>
constexpr bool parameter_matches() {
  using A = std::tuple_element_t<I, typename signature<Tarmac>::params>;
  using B = std::tuple_element_t<I, typename signature<Nvidia>::params>;
  static_assert(compatible<A, B>(),
                "parameter I of this function has a different size or kind in nvml.h");
  return compatible<A, B>();
}

template <class Tarmac, class Nvidia, std::size_t... I>
constexpr bool parameters_match(std::index_sequence<I...>) {
  return (true && ... && parameter_matches<I, Tarmac, Nvidia>());
}

template <class Tarmac, class Nvidia>
constexpr bool signatures_match() {
  if constexpr (signature<Tarmac>::arity != signature<Nvidia>::arity) {
    return false;
  } else {
    return compatible<typename signature<Tarmac>::result, typename signature<Nvidia>::result>() &&
           parameters_match<Tarmac, Nvidia>(std::make_index_sequence<signature<Tarmac>::arity>());
  }
}

// ---------------------------------------------------------------------------------------------
// The checks.

namespace tn = tarmac::nvml;

#define TARMAC_ABI_CHECK_TYPE(name)                                                               \
  static_assert(compatible<tn::name, ::name>(), "type " #name ": size, alignment or kind differs"); \
  static_assert(sizeof(tn::name) == sizeof(::name), "type " #name ": size differs");

#define TARMAC_ABI_CHECK_CONSTANT(name)                                                           \
  static_assert(same_value(tarmac_side::t_##name, name), "constant " #name ": value differs");

#define TARMAC_ABI_CHECK_RENAMED(name, nvml_expr)                                                 \
  static_assert(same_value(tarmac_side::t_##name, nvml_expr),                                     \
                "constant " #name ": value differs from " #nvml_expr);

#define TARMAC_ABI_CHECK_STRUCT(name)                                                             \
  static_assert(sizeof(tn::name) == sizeof(::name), "struct " #name ": size differs");            \
  static_assert(alignof(tn::name) == alignof(::name), "struct " #name ": alignment differs");     \
  static_assert(std::is_standard_layout_v<tn::name> && std::is_trivially_copyable_v<tn::name>,    \
                "struct " #name ": tarmac's declaration is not a plain C struct");

#define TARMAC_ABI_CHECK_FIELD(type, field)                                                       \
  static_assert(offsetof(tn::type, field) == offsetof(::type, field),                             \
                "field " #type "::" #field ": offset differs");                                   \
  static_assert(compatible<decltype(std::declval<tn::type&>().field),                             \
                           decltype(std::declval<::type&>().field)>(),                            \
                "field " #type "::" #field ": size, alignment or kind differs");

#define TARMAC_ABI_CHECK_FUNCTION(name, params, need)                                             \
  static_assert(signature<tn::PFN_##name>::arity == signature<decltype(&::name)>::arity,          \
                "function " #name ": number of parameters differs from nvml.h");                  \
  static_assert(signatures_match<tn::PFN_##name, decltype(&::name)>(),                            \
                "function " #name ": a parameter or the result differs from nvml.h");

TARMAC_ABI_TYPES(TARMAC_ABI_CHECK_TYPE)
TARMAC_ABI_CONSTANTS(TARMAC_ABI_CHECK_CONSTANT)
TARMAC_ABI_RENAMED_CONSTANTS(TARMAC_ABI_CHECK_RENAMED)
TARMAC_ABI_STRUCTS(TARMAC_ABI_CHECK_STRUCT)
TARMAC_ABI_FIELDS(TARMAC_ABI_CHECK_FIELD)

#define X TARMAC_ABI_CHECK_FUNCTION
#include "tarmac/nvml/nvml_functions.def"
#undef X
TARMAC_ABI_CHECK_FUNCTION(nvmlErrorString, (nvmlReturn_t result), Required)

#define TARMAC_ABI_CHECK_NEWER_STRUCT(name, size, align)                                          \
  static_assert(sizeof(tn::name) == (size), "struct " #name ": size differs from NVIDIA's layout"); \
  static_assert(alignof(tn::name) == (align), "struct " #name ": alignment differs");             \
  static_assert(std::is_standard_layout_v<tn::name> && std::is_trivially_copyable_v<tn::name>,    \
                "struct " #name ": tarmac's declaration is not a plain C struct");
#define TARMAC_ABI_CHECK_NEWER_FIELD(type, field, offset, size)                                   \
  static_assert(offsetof(tn::type, field) == (offset), "field " #type "::" #field ": offset differs"); \
  static_assert(sizeof(std::declval<tn::type&>().field) == (size), "field " #type "::" #field ": size differs");
#define TARMAC_ABI_CHECK_NEWER_CONSTANT(name, value)                                              \
  static_assert(tn::name == (value), "constant " #name ": value differs from NVIDIA's");
TARMAC_ABI_NEWER_STRUCTS(TARMAC_ABI_CHECK_NEWER_STRUCT)
TARMAC_ABI_NEWER_FIELDS(TARMAC_ABI_CHECK_NEWER_FIELD)
TARMAC_ABI_NEWER_CONSTANTS(TARMAC_ABI_CHECK_NEWER_CONSTANT)

// The struct-version helper computes what NVML_STRUCT_VERSION computes.
static_assert(tn::struct_version(sizeof(tn::nvmlMemory_v2_t), 2) == NVML_STRUCT_VERSION(Memory, 2),
              "struct_version() differs from NVML_STRUCT_VERSION");

// The handle types are distinct from NVIDIA's (tarmac never sees nvml.h), but all are opaque.
static_assert(!is_complete<std::remove_pointer_t<tn::nvmlDevice_t>>::value);
static_assert(!is_complete<std::remove_pointer_t<tn::nvmlEventSet_t>>::value);
static_assert(!is_complete<std::remove_pointer_t<tn::nvmlGpmSample_t>>::value);

// ---------------------------------------------------------------------------------------------
// Counts, for the report.

#define TARMAC_ABI_ONE(...) +1
#define TARMAC_ABI_ARITY(name, params, need) +signature<tn::PFN_##name>::arity
constexpr int kTypes = 0 TARMAC_ABI_TYPES(TARMAC_ABI_ONE);
constexpr int kConstants = 0 TARMAC_ABI_CONSTANTS(TARMAC_ABI_ONE)
    TARMAC_ABI_RENAMED_CONSTANTS(TARMAC_ABI_ONE);
constexpr int kStructs = 0 TARMAC_ABI_STRUCTS(TARMAC_ABI_ONE);
constexpr int kFields = 0 TARMAC_ABI_FIELDS(TARMAC_ABI_ONE);
constexpr int kNewer = 0 TARMAC_ABI_NEWER_THAN_HEADER(TARMAC_ABI_ONE);
constexpr int kNewerLayouts = 0 TARMAC_ABI_NEWER_STRUCTS(TARMAC_ABI_ONE) TARMAC_ABI_NEWER_FIELDS(TARMAC_ABI_ONE)
    TARMAC_ABI_NEWER_CONSTANTS(TARMAC_ABI_ONE);
#define X TARMAC_ABI_ONE
constexpr int kFunctions = 1 /* nvmlErrorString */
#include "tarmac/nvml/nvml_functions.def"
    ;
#undef X
#define X TARMAC_ABI_ARITY
constexpr std::size_t kParameters = signature<tn::PFN_nvmlErrorString>::arity
#include "tarmac/nvml/nvml_functions.def"
    ;
#undef X

}  // namespace

int main() {
  std::printf(
      "nvml ABI (NVML_API_VERSION %d): %d types, %d structs, %d fields, %d constants, "
      "%d functions with %zu parameters (%d of them newer than this nvml.h, declared by hand), "
      "%d structs, fields and constants newer than it pinned to NVIDIA's documented layout: all match\n",
      NVML_API_VERSION, kTypes, kStructs, kFields, kConstants, kFunctions, kParameters, kNewer, kNewerLayouts);
  return 0;
}
