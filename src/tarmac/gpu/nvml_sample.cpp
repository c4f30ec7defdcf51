// Dynamic values of a device: modes, the fast sample and the slow sample.
#include <functional>

#include "tarmac/gpu/nvml_device.hpp"

namespace tarmac::gpu::detail {

using namespace tarmac::nvml;

namespace {

std::optional<bool> read_enabled(NvmlDevice& dev, std::string_view what, PFN_nvmlDeviceGetPersistenceMode fn) {
  auto v = dev.read<int>(what, [&](int* s) { return call(fn, dev.handle(), s); });
  if (!v) return std::nullopt;
  return *v == NVML_FEATURE_ENABLED;
}

const char* compute_mode_name(int mode) {
  switch (mode) {
    case NVML_COMPUTEMODE_DEFAULT: return "Default";
    case NVML_COMPUTEMODE_EXCLUSIVE_THREAD: return "Exclusive_Thread";
    case NVML_COMPUTEMODE_PROHIBITED: return "Prohibited";
    case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: return "Exclusive_Process";
    default: return "Unknown";
  }
}

}  // namespace

DeviceModes read_modes(NvmlDevice& dev, ValueGroups groups) {
  const Functions& f = dev.fn();
  const nvmlDevice_t h = dev.handle();
  DeviceModes m;
  if (groups.has(ValueGroup::PersistenceMode)) {
    m.persistence_mode = read_enabled(dev, "persistence", f.nvmlDeviceGetPersistenceMode);
  }
  if (groups.has(ValueGroup::DisplayMode)) {
    m.display_mode = read_enabled(dev, "display_mode", f.nvmlDeviceGetDisplayMode);
    m.display_active = read_enabled(dev, "display_active", f.nvmlDeviceGetDisplayActive);
  }
  if (groups.has(ValueGroup::ComputeMode)) {
    if (auto mode = dev.read<int>("compute_mode", [&](int* v) { return call(f.nvmlDeviceGetComputeMode, h, v); })) {
      m.compute_mode = compute_mode_name(*mode);
    }
  }
  // Modes that come as a (current, pending) pair.
  const auto pair = [&](std::string_view what, auto fn, auto& current, auto& pending) {
    return dev.read<bool>(what, [&](bool* ok) {
      *ok = true;
      return call(fn, h, &current, &pending);
    });
  };
  unsigned mig_current = 0;
  unsigned mig_pending = 0;
  if (groups.has(ValueGroup::MigMode) && pair("mig", f.nvmlDeviceGetMigMode, mig_current, mig_pending)) {
    m.mig_mode_current = mig_current == NVML_DEVICE_MIG_ENABLE;
    m.mig_mode_pending = mig_pending == NVML_DEVICE_MIG_ENABLE;
  }
  int ecc_current = 0;
  int ecc_pending = 0;
  if (groups.has(ValueGroup::EccMode) && pair("ecc_mode", f.nvmlDeviceGetEccMode, ecc_current, ecc_pending)) {
    m.ecc_mode_current = ecc_current == NVML_FEATURE_ENABLED;
    m.ecc_mode_pending = ecc_pending == NVML_FEATURE_ENABLED;
  }
  const auto limit = [&] {
    return dev.read<unsigned>("power_limit", [&](unsigned* v) { return call(f.nvmlDeviceGetPowerManagementLimit, h, v); });
  };
  const auto enforced = [&] {
    return dev.read<unsigned>("enforced_power_limit",
                              [&](unsigned* v) { return call(f.nvmlDeviceGetEnforcedPowerLimit, h, v); });
  };
  if (groups.has(ValueGroup::PowerLimits)) {
    m.power_limit_mw = limit();
    m.enforced_power_limit_mw = enforced();
  } else if (groups.has(ValueGroup::EnforcedPowerLimit)) {
    m.enforced_power_limit_mw = enforced();
    if (!m.enforced_power_limit_mw) m.power_limit_mw = limit();
  }
  return m;
}

namespace {

// Memory: v2 separates "reserved" from "used"; v1 (older drivers) counts both as used. The total
// never changes: the first read also fills the identity's.
void read_memory(NvmlDevice& dev, DeviceSample& s) {
  const Functions& f = dev.fn();
  const nvmlDevice_t h = dev.handle();
  std::optional<std::uint64_t> total;
  std::optional<nvmlMemory_v2_t> mem2;
  if (f.nvmlDeviceGetMemoryInfo_v2 != nullptr && dev.supported("memory_v2")) {
    mem2 = dev.read<nvmlMemory_v2_t>("memory_v2", [&](nvmlMemory_v2_t* m) {
      m->version = nvmlMemory_v2;
      return f.nvmlDeviceGetMemoryInfo_v2(h, m);
    });
  }
  if (mem2) {
    s.mem_used_bytes = mem2->used;
    s.mem_free_bytes = mem2->free;
    s.mem_reserved_bytes = mem2->reserved;
    total = mem2->total;
  } else if (auto mem = dev.read<nvmlMemory_t>("memory", [&](nvmlMemory_t* m) { return call(f.nvmlDeviceGetMemoryInfo, h, m); })) {
    s.mem_used_bytes = mem->used;
    s.mem_free_bytes = mem->free;
    total = mem->total;
  }
  if (!dev.identity.mem_total_bytes) dev.identity.mem_total_bytes = total;
}

// ECC error counters, retired pages and remapped rows.
void read_memory_health(NvmlDevice& dev, ValueGroups groups, DeviceSample& s) {
  const Functions& f = dev.fn();
  const nvmlDevice_t h = dev.handle();
  auto ecc = [&](std::string_view what, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter) {
    return dev.read<unsigned long long>(
        what, [&](unsigned long long* v) { return call(f.nvmlDeviceGetTotalEccErrors, h, type, counter, v); });
  };
  if (groups.has(ValueGroup::EccErrors)) {
    s.ecc_corrected_volatile = ecc("ecc_cv", NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC);
    s.ecc_corrected_aggregate = ecc("ecc_ca", NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC);
    s.ecc_uncorrected_aggregate = ecc("ecc_ua", NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC);
  }
  if (groups.has(ValueGroup::EccErrors) || groups.has(ValueGroup::EccUncorrectedVolatile)) {
    s.ecc_uncorrected_volatile = ecc("ecc_uv", NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC);
  }
  if (groups.has(ValueGroup::RetiredPages)) {
    auto retired = [&](std::string_view what, int cause) {
      return dev.read<unsigned>(what, [&](unsigned* count) {
        // count=0 with no buffer asks only for the number of pages: NVML answers INSUFFICIENT_SIZE
        // (with the number) when there are some, as nvidia-smi reads it.
        *count = 0;
        const nvmlReturn_t rc =
            call(f.nvmlDeviceGetRetiredPages, h, cause, count, static_cast<unsigned long long*>(nullptr));
        return rc == NVML_ERROR_INSUFFICIENT_SIZE ? NVML_SUCCESS : rc;
      });
    };
    s.retired_pages_sbe = retired("retired_sbe", NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS);
    s.retired_pages_dbe = retired("retired_dbe", NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR);
    if (auto pending = dev.read<int>("retired_pending", [&](int* v) { return call(f.nvmlDeviceGetRetiredPagesPendingStatus, h, v); })) {
      s.retired_pages_pending = *pending == NVML_FEATURE_ENABLED;
    }
  }
  if (groups.has(ValueGroup::RemappedRows)) {
    unsigned corr = 0;
    unsigned unc = 0;
    unsigned pending = 0;
    unsigned failure = 0;
    if (dev.read<bool>("remapped_rows", [&](bool* ok) {
          *ok = true;
          return call(f.nvmlDeviceGetRemappedRows, h, &corr, &unc, &pending, &failure);
        })) {
      s.remapped_rows_correctable = corr;
      s.remapped_rows_uncorrectable = unc;
      s.remapped_rows_pending = pending != 0;
      s.remapped_rows_failure = failure != 0;
    }
  }
}

}  // namespace

DeviceSample read_sample(NvmlDevice& dev, ValueGroups groups) {
  const Functions& f = dev.fn();
  const nvmlDevice_t h = dev.handle();
  const auto wants = [&groups](ValueGroup g) { return groups.has(g); };
  DeviceSample s;
  auto u = [&](std::string_view what, auto fn, auto... args) {
    return dev.read<unsigned>(what, [&](unsigned* v) { return call(fn, h, args..., v); });
  };
  auto ull = [&](std::string_view what, auto fn, auto... args) {
    return dev.read<unsigned long long>(what, [&](unsigned long long* v) { return call(fn, h, args..., v); });
  };

  if (wants(ValueGroup::Memory)) read_memory(dev, s);
  if (wants(ValueGroup::Bar1)) {
    if (auto bar1 = dev.read<nvmlBAR1Memory_t>("bar1", [&](nvmlBAR1Memory_t* b) { return call(f.nvmlDeviceGetBAR1MemoryInfo, h, b); })) {
      s.bar1_used_bytes = bar1->bar1Used;
      s.bar1_total_bytes = bar1->bar1Total;
    }
  }
  if (wants(ValueGroup::Utilization)) {
    if (auto util = dev.read<nvmlUtilization_t>("utilization", [&](nvmlUtilization_t* v) { return call(f.nvmlDeviceGetUtilizationRates, h, v); })) {
      s.util_gpu_pct = util->gpu;
      s.util_mem_pct = util->memory;
    }
  }
  if (wants(ValueGroup::CodecUtilization)) {
    unsigned period_us = 0;
    s.util_encoder_pct = dev.read<unsigned>("encoder", [&](unsigned* v) { return call(f.nvmlDeviceGetEncoderUtilization, h, v, &period_us); });
    s.util_decoder_pct = dev.read<unsigned>("decoder", [&](unsigned* v) { return call(f.nvmlDeviceGetDecoderUtilization, h, v, &period_us); });
  }
  if (wants(ValueGroup::Temperature)) s.temp_c = u("temperature", f.nvmlDeviceGetTemperature, NVML_TEMPERATURE_GPU);
  if (wants(ValueGroup::Fans)) s.fan_pct = u("fan", f.nvmlDeviceGetFanSpeed);
  if (wants(ValueGroup::Power)) s.power_mw = u("power", f.nvmlDeviceGetPowerUsage);
  if (wants(ValueGroup::Energy)) s.energy_mj = ull("energy", f.nvmlDeviceGetTotalEnergyConsumption);
  if (wants(ValueGroup::ClockGraphics)) s.clock_graphics_mhz = u("clock_graphics", f.nvmlDeviceGetClockInfo, NVML_CLOCK_GRAPHICS);
  if (wants(ValueGroup::ClockSm)) s.clock_sm_mhz = u("clock_sm", f.nvmlDeviceGetClockInfo, NVML_CLOCK_SM);
  if (wants(ValueGroup::ClockMem)) s.clock_mem_mhz = u("clock_mem", f.nvmlDeviceGetClockInfo, NVML_CLOCK_MEM);
  if (wants(ValueGroup::ClockVideo)) s.clock_video_mhz = u("clock_video", f.nvmlDeviceGetClockInfo, NVML_CLOCK_VIDEO);
  if (wants(ValueGroup::ApplicationsClocks)) {
    s.clock_sm_app_mhz = u("clock_app_sm", f.nvmlDeviceGetApplicationsClock, NVML_CLOCK_SM);
    s.clock_mem_app_mhz = u("clock_app_mem", f.nvmlDeviceGetApplicationsClock, NVML_CLOCK_MEM);
  }
  if (wants(ValueGroup::PerformanceState)) {
    if (auto p = dev.read<int>("pstate", [&](int* v) { return call(f.nvmlDeviceGetPerformanceState, h, v); });
        p && *p >= 0 && *p <= 15) {
      s.pstate = static_cast<unsigned>(*p);
    }
  }
  if (wants(ValueGroup::ClockEvents)) {
    // The "event" names replaced the "throttle" names in newer drivers; same bits.
    s.clock_event_reasons = ull("clock_events", f.nvmlDeviceGetCurrentClocksEventReasons);
    if (!s.clock_event_reasons) s.clock_event_reasons = ull("clock_throttle", f.nvmlDeviceGetCurrentClocksThrottleReasons);
  }
  if (wants(ValueGroup::PcieLink)) {
    s.pcie_gen = u("pcie_gen", f.nvmlDeviceGetCurrPcieLinkGeneration);
    s.pcie_width = u("pcie_width", f.nvmlDeviceGetCurrPcieLinkWidth);
    s.pcie_replay_count = u("pcie_replay", f.nvmlDeviceGetPcieReplayCounter);
  }
  read_memory_health(dev, groups, s);
  return s;
}

GpmRates gpm_rates(NvmlDevice& dev, std::string_view what, GpmSample& previous,
                   const std::function<nvmlReturn_t(nvmlGpmSample_t)>& take) {
  const Functions& f = dev.fn();
  GpmRates out;
  if (f.nvmlGpmSampleAlloc == nullptr || f.nvmlGpmSampleFree == nullptr || !dev.supported(what)) return out;
  nvmlGpmSample_t current = nullptr;
  if (nvmlReturn_t rc = f.nvmlGpmSampleAlloc(&current); rc != NVML_SUCCESS) {
    dev.note_failure(what, rc);
    return out;
  }
  GpmSample sample(current, f.nvmlGpmSampleFree);
  if (nvmlReturn_t rc = take(current); rc != NVML_SUCCESS) {
    dev.note_failure(what, rc);
    return out;
  }
  if (previous) {
    nvmlGpmMetricsGet_t get{};
    get.version = NVML_GPM_METRICS_GET_VERSION;
    get.sample1 = previous.get();
    get.sample2 = current;
    const int ids[] = {NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_SM_OCCUPANCY, NVML_GPM_METRIC_ANY_TENSOR_UTIL,
                       NVML_GPM_METRIC_DRAM_BW_UTIL};
    get.numMetrics = 4;
    for (unsigned i = 0; i < 4; ++i) get.metrics[i].metricId = static_cast<unsigned>(ids[i]);
    if (nvmlReturn_t rc = call(f.nvmlGpmMetricsGet, &get); rc == NVML_SUCCESS) {
      auto value = [&](unsigned i) -> std::optional<double> {
        return get.metrics[i].nvmlReturn == NVML_SUCCESS ? std::optional<double>(get.metrics[i].value) : std::nullopt;
      };
      out.sm_active_pct = value(0);
      out.sm_occupancy_pct = value(1);
      out.tensor_active_pct = value(2);
      out.dram_bw_pct = value(3);
    } else {
      dev.note_failure(what, rc);
    }
  }
  previous = std::move(sample);
  return out;
}

namespace {

// GPM metrics are rates between two samples: each slow read takes a sample and compares it with
// the one kept from the previous slow read, so no call ever sleeps. The first read gives none.
void read_gpm(NvmlDevice& dev, DeviceSlowSample& out) {
  if (dev.identity.gpm_supported != true) return;
  const GpmRates r = gpm_rates(dev, "gpm", dev.gpm_previous, [&](nvmlGpmSample_t s) {
    return call(dev.fn().nvmlGpmSampleGet, dev.handle(), s);
  });
  out.gpm_sm_active_pct = r.sm_active_pct;
  out.gpm_sm_occupancy_pct = r.sm_occupancy_pct;
  out.gpm_tensor_active_pct = r.tensor_active_pct;
  out.gpm_dram_bw_pct = r.dram_bw_pct;
}

}  // namespace

DeviceSlowSample read_slow(NvmlDevice& dev) {
  const Functions& f = dev.fn();
  DeviceSlowSample s;
  s.pcie_tx_kbps = dev.read<unsigned>("pcie_tx", [&](unsigned* v) { return call(f.nvmlDeviceGetPcieThroughput, dev.handle(), NVML_PCIE_UTIL_TX_BYTES, v); });
  s.pcie_rx_kbps = dev.read<unsigned>("pcie_rx", [&](unsigned* v) { return call(f.nvmlDeviceGetPcieThroughput, dev.handle(), NVML_PCIE_UTIL_RX_BYTES, v); });
  read_gpm(dev, s);
  return s;
}

}  // namespace tarmac::gpu::detail
