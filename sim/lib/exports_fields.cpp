// nvmlDeviceGetFieldValues: the field-id interface nvidia-smi 535 reads power limits and
// temperature limits through. Not a row of nvml_functions.def (tarmac does not call it), so its
// types are declared here, with NVIDIA's layout. Unknown fields answer NOT_SUPPORTED one by one:
// nvidia-smi reads every field's own return code, and garbage ones would print as values.
#include <cmath>

#include "context.hpp"

namespace tarmac::nvml {

using sim::lib::mw;

namespace {

union FieldValue {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
};

struct FieldValueRecord {  // nvmlFieldValue_t
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  FieldValue value;
};
static_assert(sizeof(FieldValueRecord) == 40, "nvmlFieldValue_t is 40 bytes");

constexpr int kTypeUnsignedInt = 1;       // NVML_VALUE_TYPE_UNSIGNED_INT
constexpr int kTypeUnsignedLongLong = 3;  // NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
constexpr unsigned kScopeGpu = 0;         // NVML_POWER_SCOPE_GPU

// NVML_FI_* ids (nvml.h of CUDA 12.2).
enum FieldId : unsigned {
  kEccCurrent = 1,
  kNvLinkLinkCount = 91,
  kPowerAverage = 185,
  kPowerInstant = 186,
  kPowerMinLimit = 187,
  kPowerMaxLimit = 188,
  kPowerDefaultLimit = 189,
  kPowerCurrentLimit = 190,
  kEnergy = 191,
  kPowerRequestedLimit = 192,
  // 193-196 (NVML_FI_DEV_TEMPERATURE_*_TLIMIT) are margins to the GPU's T.Limit, which the
  // scenario does not describe: they stay NOT_SUPPORTED rather than show absolute thresholds.
};

// Fills one field; false when the simulated GPU does not have it.
bool fill(sim::Simulation& s, unsigned gpu, double t, FieldValueRecord& f) {
  const sim::GpuSpec& g = s.scenario().gpus[gpu];
  auto uint_value = [&f](std::optional<unsigned> v) {
    if (!v) return false;
    f.valueType = kTypeUnsignedInt;
    f.value.uiVal = *v;
    return true;
  };
  const bool power = g.power_limit_w.has_value() && f.scopeId == kScopeGpu;
  switch (f.fieldId) {
    case kEccCurrent: return uint_value(g.ecc_enabled ? std::optional<unsigned>(*g.ecc_enabled ? 1 : 0) : std::nullopt);
    case kNvLinkLinkCount: return uint_value(g.nvlink_links > 0 ? std::optional(g.nvlink_links) : std::nullopt);
    case kPowerAverage:
    case kPowerInstant: return power && uint_value(mw(s.device(gpu, t).sample.power_w));
    case kPowerMinLimit: return power && uint_value(mw(g.power_min_w));
    case kPowerMaxLimit: return power && uint_value(mw(g.power_max_w));
    case kPowerDefaultLimit: return power && uint_value(mw(g.power_default_limit_w));
    case kPowerCurrentLimit:
    case kPowerRequestedLimit: return power && uint_value(mw(*g.power_limit_w));
    case kEnergy:
      if (!power) return false;
      f.valueType = kTypeUnsignedLongLong;
      f.value.ullVal = static_cast<unsigned long long>(std::llround(s.energy_j(gpu, t) * 1000.0));
      return true;
    default: return false;
  }
}

}  // namespace

extern "C" {

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int values_count,
                                                        FieldValueRecord* values) {
  const char* const function = __func__;
  return sim::lib::guarded([&] {
    auto e = sim::lib::Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (values == nullptr || values_count <= 0) return NVML_ERROR_INVALID_ARGUMENT;
    const long long now_us = e.sim->clock().wall_ns_at(e.t) / 1000;
    for (int i = 0; i < values_count; ++i) {
      FieldValueRecord& f = values[i];
      f.timestamp = now_us;
      f.latencyUsec = 0;
      f.nvmlReturn = fill(*e.sim, e.gpu, e.t, f) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
  });
}

}  // extern "C"
}  // namespace tarmac::nvml
