// GPU Performance Monitoring (Hopper and later): samples and the metrics computed between two.
#include <array>

#include "context.hpp"

namespace tarmac::nvml {

using sim::lib::Context;
using sim::lib::GpmSampleState;
using sim::lib::guarded;

namespace {

constexpr unsigned kHopper = 9;  // NVML_DEVICE_ARCH_HOPPER

GpmSampleState* lookup(nvmlGpmSample_t sample) {
  auto* state = reinterpret_cast<GpmSampleState*>(sample);
  return Context::get().gpm_samples.count(state) != 0 ? state : nullptr;
}

struct MetricInfo {
  nvmlGpmMetricId_t id;
  const char* short_name;
  const char* long_name;
};
constexpr std::array<MetricInfo, 5> kMetrics{{
    {NVML_GPM_METRIC_GRAPHICS_UTIL, "gr_util", "graphics utilization"},
    {NVML_GPM_METRIC_SM_UTIL, "sm_util", "SM utilization"},
    {NVML_GPM_METRIC_SM_OCCUPANCY, "sm_occupancy", "SM occupancy"},
    {NVML_GPM_METRIC_ANY_TENSOR_UTIL, "any_tensor_util", "any tensor utilization"},
    {NVML_GPM_METRIC_DRAM_BW_UTIL, "dram_bw_util", "DRAM bandwidth utilization"},
}};
char kPercent[] = "%";

std::optional<double> metric_value(nvmlGpmMetricId_t id, const sim::GpuSample& s) {
  switch (id) {
    case NVML_GPM_METRIC_GRAPHICS_UTIL: return s.util_gpu;
    case NVML_GPM_METRIC_SM_UTIL: return s.gpm_sm_util;
    case NVML_GPM_METRIC_SM_OCCUPANCY: return s.gpm_sm_occupancy;
    case NVML_GPM_METRIC_ANY_TENSOR_UTIL: return s.gpm_tensor_util;
    case NVML_GPM_METRIC_DRAM_BW_UTIL: return s.gpm_dram_bw_util;
    default: return std::nullopt;
  }
}

}  // namespace

extern "C" {

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t* support) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (support == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = e.sim->scenario().gpus[e.gpu].architecture >= kHopper ? 1 : 0;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* sample) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_system(function);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    auto* state = new GpmSampleState{};
    Context::get().gpm_samples.insert(state);
    *sample = reinterpret_cast<nvmlGpmSample_t>(state);
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_system(function);
    if (e.rc != NVML_SUCCESS) return e.rc;
    GpmSampleState* state = lookup(sample);
    if (state == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    Context::get().gpm_samples.erase(state);
    delete state;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    GpmSampleState* state = lookup(sample);
    if (state == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (e.sim->scenario().gpus[e.gpu].architecture < kHopper) return NVML_ERROR_NOT_SUPPORTED;
    *state = {true, e.gpu, std::nullopt, e.t};
    return NVML_SUCCESS;
  });
}

// A sample of one GPU instance of a GPU in MIG mode (by its id, as nvmlDeviceGetGpuInstanceId gives it).
TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpu_instance_id,
                                                   nvmlGpmSample_t sample) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    GpmSampleState* state = lookup(sample);
    if (state == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::GpuSpec& g = e.sim->scenario().gpus[e.gpu];
    if (g.architecture < kHopper || !g.mig_mode.value_or(false)) return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned m = 0; m < g.mig.size(); ++m) {
      if (g.mig[m].gi_id == gpu_instance_id) {
        *state = {true, e.gpu, m, e.t};
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_INVALID_ARGUMENT;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* metrics) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_system(function);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (metrics == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (metrics->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (metrics->numMetrics > static_cast<unsigned>(NVML_GPM_METRIC_MAX)) return NVML_ERROR_INVALID_ARGUMENT;
    const GpmSampleState* first = lookup(metrics->sample1);
    const GpmSampleState* second = lookup(metrics->sample2);
    if (first == nullptr || second == nullptr || !first->taken || !second->taken || first->gpu != second->gpu ||
        first->mig != second->mig || second->t < first->t) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (e.sim->is_lost(second->gpu, e.t)) return NVML_ERROR_GPU_IS_LOST;
    // Timeline values are constant between segment boundaries; the later sample's moment stands
    // for the interval.
    const sim::DeviceView view = e.sim->device(second->gpu, second->t);
    sim::GpuSample s = view.sample;
    if (second->mig) {
      // A GPU instance's metrics are what its processes make of its slices (docs/simulator.md).
      const sim::MigView& m = view.mig.at(*second->mig);
      s.util_gpu = m.sm_util;
      s.gpm_sm_util = m.sm_util;
      s.gpm_sm_occupancy = m.sm_util / 2.0;
      s.gpm_tensor_util = m.sm_util / 2.0;
      s.gpm_dram_bw_util = m.mem_util;
    }
    for (unsigned i = 0; i < metrics->numMetrics; ++i) {
      nvmlGpmMetric_t& m = metrics->metrics[i];
      const auto id = static_cast<nvmlGpmMetricId_t>(m.metricId);
      const std::optional<double> value = metric_value(id, s);
      m.nvmlReturn = value ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
      m.value = value.value_or(0);
      m.metricInfo = {nullptr, nullptr, nullptr};
      for (const MetricInfo& info : kMetrics) {
        if (info.id == id) {
          // The struct's char* members predate const; callers only read them.
          m.metricInfo = {const_cast<char*>(info.short_name), const_cast<char*>(info.long_name), kPercent};
        }
      }
    }
    return NVML_SUCCESS;
  });
}

}  // extern "C"
}  // namespace tarmac::nvml
