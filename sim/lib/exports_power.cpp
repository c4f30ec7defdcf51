// Temperature, fans, power, energy, performance state, clocks and clock-event (throttle) reasons.
#include <cmath>

#include "context.hpp"

namespace tarmac::nvml {

using sim::lib::Context;
using sim::lib::Entry;
using sim::lib::guarded;
using sim::lib::mw;

namespace {

// Runs `get(entry, spec, view)` for a GPU; it returns nullopt for NOT_SUPPORTED.
template <typename T, typename Get>
nvmlReturn_t device_value(const char* function, nvmlDevice_t device, T* out, Get&& get) {
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::GpuSpec& spec = e.sim->scenario().gpus[e.gpu];
    const std::optional<T> value = get(e, spec);
    if (!value) return NVML_ERROR_NOT_SUPPORTED;
    *out = *value;
    return NVML_SUCCESS;
  });
}

std::optional<unsigned> clock_of(const sim::Clocks& c, nvmlClockType_t type) {
  switch (type) {
    case NVML_CLOCK_GRAPHICS: return c.graphics;
    case NVML_CLOCK_SM: return c.sm;
    case NVML_CLOCK_MEM: return c.mem;
    case NVML_CLOCK_VIDEO: return c.video;
    default: return std::nullopt;
  }
}

bool valid_clock_type(nvmlClockType_t type) { return type >= NVML_CLOCK_GRAPHICS && type < NVML_CLOCK_COUNT; }

// Clock queries: an unknown type is INVALID_ARGUMENT, a GPU without clock data NOT_SUPPORTED.
template <typename Pick>
nvmlReturn_t clock_query(const char* function, nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock_mhz,
                         Pick&& pick) {
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (clock_mhz == nullptr || !valid_clock_type(type)) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::GpuSpec& spec = e.sim->scenario().gpus[e.gpu];
    if (!spec.max_clocks) return NVML_ERROR_NOT_SUPPORTED;
    const std::optional<sim::Clocks> clocks = pick(e, spec);
    if (!clocks) return NVML_ERROR_INVALID_ARGUMENT;
    *clock_mhz = *clock_of(*clocks, type);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t throttle(const char* function, nvmlDevice_t device, unsigned long long* reasons, bool supported) {
  return device_value(function, device, reasons, [&](Entry& e, const sim::GpuSpec& spec) {
    if (supported) return std::optional(spec.supported_throttle_reasons);
    return std::optional(e.sim->device(e.gpu, e.t).sample.throttle_reasons);
  });
}

nvmlReturn_t pstate(const char* function, nvmlDevice_t device, nvmlPstates_t* state) {
  return device_value(function, device, state, [](Entry& e, const sim::GpuSpec&) {
    return std::optional(static_cast<nvmlPstates_t>(e.sim->device(e.gpu, e.t).sample.pstate));
  });
}

}  // namespace

extern "C" {

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                                        unsigned int* temp_c) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (temp_c == nullptr || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp_c = e.sim->device(e.gpu, e.t).sample.temp_c;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device,
                                                                 nvmlTemperatureThresholds_t threshold,
                                                                 unsigned int* temp_c) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (temp_c == nullptr || threshold < 0 || threshold > 6) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::GpuSpec& spec = e.sim->scenario().gpus[e.gpu];
    std::optional<unsigned> value;
    switch (threshold) {
      case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: value = spec.temp_shutdown_c; break;
      case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: value = spec.temp_slowdown_c; break;
      case NVML_TEMPERATURE_THRESHOLD_MEM_MAX: value = spec.temp_mem_max_c; break;
      case NVML_TEMPERATURE_THRESHOLD_GPU_MAX: value = spec.temp_gpu_max_c; break;
      default: break;  // acoustic thresholds: not simulated
    }
    if (!value) return NVML_ERROR_NOT_SUPPORTED;
    *temp_c = *value;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int* count) {
  return device_value(__func__, device, count, [](Entry&, const sim::GpuSpec& spec) {
    return spec.fans > 0 ? std::optional(spec.fans) : std::nullopt;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan, unsigned int* speed) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (speed == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::GpuSpec& spec = e.sim->scenario().gpus[e.gpu];
    if (spec.fans == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (fan >= spec.fans) return NVML_ERROR_INVALID_ARGUMENT;
    *speed = e.sim->device(e.gpu, e.t).sample.fan_pct;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed) {
  return device_value(__func__, device, speed, [](Entry& e, const sim::GpuSpec& spec) -> std::optional<unsigned> {
    if (spec.fans == 0) return std::nullopt;
    return e.sim->device(e.gpu, e.t).sample.fan_pct;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power_mw) {
  return device_value(__func__, device, power_mw, [](Entry& e, const sim::GpuSpec& spec) -> std::optional<unsigned> {
    if (!spec.power_limit_w) return std::nullopt;
    return mw(e.sim->device(e.gpu, e.t).sample.power_w);
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t device, nvmlEnableState_t* mode) {
  return device_value(__func__, device, mode, [](Entry&, const sim::GpuSpec& spec) -> std::optional<nvmlEnableState_t> {
    if (!spec.power_limit_w) return std::nullopt;
    return NVML_FEATURE_ENABLED;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* limit_mw) {
  return device_value(__func__, device, limit_mw, [](Entry&, const sim::GpuSpec& spec) -> std::optional<unsigned> {
    if (!spec.power_limit_w) return std::nullopt;
    return mw(*spec.power_limit_w);
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int* limit_mw) {
  return device_value(__func__, device, limit_mw, [](Entry&, const sim::GpuSpec& spec) -> std::optional<unsigned> {
    if (!spec.power_limit_w) return std::nullopt;
    return mw(spec.power_default_limit_w);
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int* min_mw,
                                                                            unsigned int* max_mw) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (min_mw == nullptr || max_mw == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::GpuSpec& spec = e.sim->scenario().gpus[e.gpu];
    if (!spec.power_limit_w) return NVML_ERROR_NOT_SUPPORTED;
    *min_mw = mw(spec.power_min_w);
    *max_mw = mw(spec.power_max_w);
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit_mw) {
  return device_value(__func__, device, limit_mw, [](Entry&, const sim::GpuSpec& spec) -> std::optional<unsigned> {
    if (!spec.power_limit_w) return std::nullopt;
    return mw(*spec.power_limit_w);
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                                   unsigned long long* energy_mj) {
  return device_value(__func__, device, energy_mj,
                      [](Entry& e, const sim::GpuSpec& spec) -> std::optional<unsigned long long> {
                        constexpr unsigned kVolta = 5;  // the counter exists from Volta on
                        if (!spec.power_limit_w || spec.architecture < kVolta) return std::nullopt;
                        return static_cast<unsigned long long>(std::llround(e.sim->energy_j(e.gpu, e.t) * 1000.0));
                      });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* state) {
  return pstate(__func__, device, state);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t* state) {
  return pstate(__func__, device, state);
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                      unsigned int* clock_mhz) {
  return clock_query(__func__, device, type, clock_mhz, [](Entry& e, const sim::GpuSpec&) {
    return std::optional(e.sim->device(e.gpu, e.t).sample.clocks);
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                         unsigned int* clock_mhz) {
  return clock_query(__func__, device, type, clock_mhz, [](Entry&, const sim::GpuSpec& spec) { return spec.max_clocks; });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t type,
                                                              unsigned int* clock_mhz) {
  return clock_query(__func__, device, type, clock_mhz,
                     [](Entry&, const sim::GpuSpec& spec) { return std::optional(spec.app_clocks); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t type,
                                                                     unsigned int* clock_mhz) {
  return clock_query(__func__, device, type, clock_mhz,
                     [](Entry&, const sim::GpuSpec& spec) { return std::optional(spec.default_app_clocks); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t type, nvmlClockId_t id,
                                                  unsigned int* clock_mhz) {
  return clock_query(__func__, device, type, clock_mhz, [id](Entry& e, const sim::GpuSpec& spec) -> std::optional<sim::Clocks> {
    switch (id) {
      case NVML_CLOCK_ID_CURRENT: return e.sim->device(e.gpu, e.t).sample.clocks;
      case NVML_CLOCK_ID_APP_CLOCK_TARGET: return spec.app_clocks;
      case NVML_CLOCK_ID_APP_CLOCK_DEFAULT: return spec.default_app_clocks;
      case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX: return spec.max_clocks;
      default: return std::nullopt;
    }
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                      unsigned long long* reasons) {
  return throttle(__func__, device, reasons, false);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                         unsigned long long* reasons) {
  return throttle(__func__, device, reasons, false);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device,
                                                                        unsigned long long* reasons) {
  return throttle(__func__, device, reasons, true);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device,
                                                                           unsigned long long* reasons) {
  return throttle(__func__, device, reasons, true);
}

}  // extern "C"
}  // namespace tarmac::nvml
