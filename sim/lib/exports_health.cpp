// ECC mode and error counts, retired pages, remapped rows, and the GPU's modes (persistence,
// compute, display, MIG).
#include <algorithm>

#include "context.hpp"

namespace tarmac::nvml {

using sim::lib::Context;
using sim::lib::Entry;
using sim::lib::guarded;

namespace {

constexpr int kMemoryLocations = 8;  // NVML_MEMORY_LOCATION_L1_CACHE .. _SRAM

// The ECC error count of a kind: the scenario's starting counts plus the ECC events so far.
std::optional<unsigned long long> ecc_count(Entry& e, nvmlMemoryErrorType_t error_type, nvmlEccCounterType_t counter) {
  const sim::GpuSpec& spec = e.sim->scenario().gpus[e.gpu];
  if (spec.ecc_enabled != true) return std::nullopt;
  const bool corrected = error_type == NVML_MEMORY_ERROR_TYPE_CORRECTED;
  const unsigned long long event_type = corrected ? nvmlEventTypeSingleBitEccError : nvmlEventTypeDoubleBitEccError;
  const unsigned long long base = counter == NVML_VOLATILE_ECC
                                      ? (corrected ? spec.ecc.corrected_volatile : spec.ecc.uncorrected_volatile)
                                      : (corrected ? spec.ecc.corrected_aggregate : spec.ecc.uncorrected_aggregate);
  return base + e.sim->faults().ecc_events(e.gpu, event_type, e.t);
}

bool valid_ecc_args(nvmlMemoryErrorType_t error_type, nvmlEccCounterType_t counter) {
  return (error_type == NVML_MEMORY_ERROR_TYPE_CORRECTED || error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED) &&
         (counter == NVML_VOLATILE_ECC || counter == NVML_AGGREGATE_ECC);
}

template <typename T, typename Get>
nvmlReturn_t spec_value(const char* function, nvmlDevice_t device, T* out, Get&& get) {
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const std::optional<T> value = get(e.sim->scenario().gpus[e.gpu]);
    if (!value) return NVML_ERROR_NOT_SUPPORTED;
    *out = *value;
    return NVML_SUCCESS;
  });
}

nvmlEnableState_t state(bool on) { return on ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED; }

}  // namespace

extern "C" {

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t* current,
                                                    nvmlEnableState_t* pending) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const auto& ecc = e.sim->scenario().gpus[e.gpu].ecc_enabled;
    if (!ecc) return NVML_ERROR_NOT_SUPPORTED;
    *current = state(*ecc);
    *pending = state(*ecc);
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t error_type,
                                                           nvmlEccCounterType_t counter_type,
                                                           unsigned long long* count) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (count == nullptr || !valid_ecc_args(error_type, counter_type)) return NVML_ERROR_INVALID_ARGUMENT;
    const auto value = ecc_count(e, error_type, counter_type);
    if (!value) return NVML_ERROR_NOT_SUPPORTED;
    *count = *value;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t error_type,
                                                               nvmlEccCounterType_t counter_type,
                                                               nvmlMemoryLocation_t location,
                                                               unsigned long long* count) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device, sim::lib::MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (count == nullptr || !valid_ecc_args(error_type, counter_type) || location < 0 || location >= kMemoryLocations) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    auto value = ecc_count(e, error_type, counter_type);
    if (!value) return NVML_ERROR_NOT_SUPPORTED;
    // A MIG device counts its own errors; the scenario's are the board's, so a MIG device has none.
    if (e.mig) value = 0ULL;
    // Every simulated error is a device-memory (DRAM) error.
    *count = location == NVML_MEMORY_LOCATION_DEVICE_MEMORY ? *value : 0;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                                         unsigned int* page_count, unsigned long long* addresses) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (page_count == nullptr || (cause != NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS &&
                                  cause != NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    const auto& pages = e.sim->scenario().gpus[e.gpu].retired_pages;
    if (!pages) return NVML_ERROR_NOT_SUPPORTED;
    const auto& list = cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? pages->double_bit : pages->single_bit;
    const auto needed = static_cast<unsigned>(list.size());
    if (*page_count < needed) {
      *page_count = needed;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (needed > 0 && addresses == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::copy(list.begin(), list.end(), addresses);
    *page_count = needed;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                                      nvmlEnableState_t* is_pending) {
  return spec_value(__func__, device, is_pending, [](const sim::GpuSpec& g) -> std::optional<nvmlEnableState_t> {
    if (!g.retired_pages) return std::nullopt;
    return state(g.retired_pages->pending);
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corr_rows,
                                                         unsigned int* unc_rows, unsigned int* is_pending,
                                                         unsigned int* failure_occurred) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (corr_rows == nullptr || unc_rows == nullptr || is_pending == nullptr || failure_occurred == nullptr) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    const auto& rows = e.sim->scenario().gpus[e.gpu].remapped_rows;
    if (!rows) return NVML_ERROR_NOT_SUPPORTED;
    *corr_rows = rows->correctable;
    *unc_rows = rows->uncorrectable;
    *is_pending = rows->pending ? 1 : 0;
    *failure_occurred = rows->failure ? 1 : 0;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t* mode) {
  return spec_value(__func__, device, mode, [](const sim::GpuSpec& g) { return std::optional(state(g.persistence_mode)); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
  return spec_value(__func__, device, mode, [](const sim::GpuSpec& g) { return std::optional(g.compute_mode); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t* display) {
  return spec_value(__func__, device, display, [](const sim::GpuSpec& g) { return std::optional(state(g.display_mode)); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t* is_active) {
  return spec_value(__func__, device, is_active,
                    [](const sim::GpuSpec& g) { return std::optional(state(g.display_active)); });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                                    unsigned int* pending) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::GpuSpec& g = e.sim->scenario().gpus[e.gpu];
    if (!g.mig_mode) return NVML_ERROR_NOT_SUPPORTED;
    *current = *g.mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    // A mode set but not yet applied (nvidia-smi -mig 1 before the reset) is pending.
    *pending = g.mig_mode_pending.value_or(*g.mig_mode) ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
  });
}

}  // extern "C"
}  // namespace tarmac::nvml
