// Memory, utilization and the processes on a GPU (lists and per-process utilization samples).
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "context.hpp"

namespace tarmac::nvml {

using sim::lib::Context;
using sim::lib::Entry;
using sim::lib::guarded;

namespace {

constexpr unsigned long long kMiB = 1024ULL * 1024ULL;
constexpr unsigned kSamplingPeriodUs = 167'000;  // what real drivers report for encoder/decoder
// Per-process samples are taken every 1/6 s of simulated time, like the driver's sample buffer.
constexpr long long kProcessSamplePeriodUs = 166'667;

enum class Kind { Compute, Graphics, Mps };

void fill(nvmlProcessInfo_v1_t& info, const sim::ProcessView& p) {
  info.pid = p.pid;
  info.usedGpuMemory = p.used_bytes;
}

void fill(nvmlProcessInfo_v2_t& info, const sim::ProcessView& p, const sim::GpuSpec& gpu) {
  info.pid = p.pid;
  info.usedGpuMemory = p.used_bytes;
  info.gpuInstanceId = 0xFFFFFFFFu;  // no MIG instance
  info.computeInstanceId = 0xFFFFFFFFu;
  if (p.mig && *p.mig < gpu.mig.size()) {
    info.gpuInstanceId = gpu.mig[*p.mig].gi_id;
    info.computeInstanceId = gpu.mig[*p.mig].ci_id;
  }
}
void fill(nvmlProcessInfo_v1_t& info, const sim::ProcessView& p, const sim::GpuSpec&) { fill(info, p); }

// The count handshake of every process list: a buffer too small (or count 0 with no buffer)
// answers INSUFFICIENT_SIZE with the count needed; an empty list answers SUCCESS with 0.
template <typename Info>
nvmlReturn_t running_processes(const char* function, nvmlDevice_t device, unsigned int* count, Info* infos,
                               Kind kind) {
  return guarded([&] {
    // A MIG device's handle lists the processes of that MIG device; its parent's, all of them, to
    // root only: NVML gives the aggregate in MIG mode "only if the caller has appropriate privileges".
    auto e = Context::get().enter_device(function, device, sim::lib::MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!e.mig && e.sim->scenario().gpus[e.gpu].mig_mode.value_or(false) && geteuid() != 0) {
      return NVML_ERROR_NO_PERMISSION;
    }
    std::vector<sim::ProcessView> list;
    if (kind != Kind::Mps) {  // the simulator runs no MPS server
      const auto type = kind == Kind::Compute ? sim::ProcessType::Compute : sim::ProcessType::Graphics;
      for (const sim::ProcessView& p : e.sim->device(e.gpu, e.t).processes) {
        if (p.type == type && (!e.mig || p.mig == e.mig)) list.push_back(p);
      }
    }
    const auto needed = static_cast<unsigned>(list.size());
    if (needed == 0) {
      *count = 0;
      return NVML_SUCCESS;
    }
    if (*count < needed) {
      *count = needed;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < needed; ++i) fill(infos[i], list[i], e.sim->scenario().gpus[e.gpu]);
    *count = needed;
    return NVML_SUCCESS;
  });
}

// A sample's values when the scenario makes it garbage (above 100, as some drivers have returned).
constexpr unsigned kGarbagePct = 0xFFFFFFFFu;

// The per-process samples of the GPU newer than `last_seen_us`, as both utilization functions see
// them; an answer other than SUCCESS stops the call (MIG, an unreadable process, no samples).
// As the driver documents, only processes with some utilization in the sample period have a
// sample (a garbage one always has). Samples carry real time, as a real driver's CPU timestamps
// do, whatever the scenario's epoch: clients compare them with their own clock.
nvmlReturn_t process_samples(Entry& e, unsigned long long last_seen_us, std::vector<nvmlProcessUtilizationInfo_v1_t>& out) {
  if (e.sim->scenario().gpus[e.gpu].mig_mode.value_or(false)) return NVML_ERROR_NOT_SUPPORTED;
  // The driver samples every period of simulated time (so a fast simulation still has a new
  // sample at each read), stamped with the real time at which the period began.
  const double period_s = static_cast<double>(kProcessSamplePeriodUs) / 1e6;
  const double period_start = std::floor(e.t / period_s) * period_s;
  const auto stamp = static_cast<unsigned long long>(e.sim->clock().real_ns_at(period_start) / 1000);
  const sim::DeviceView view = e.sim->device(e.gpu, e.t);
  for (const sim::ProcessView& p : view.processes) {
    if (p.util_sample == sim::UtilSample::Unreadable) return NVML_ERROR_UNKNOWN;
  }
  if (stamp <= last_seen_us) return NVML_ERROR_NOT_FOUND;
  for (const sim::ProcessView& p : view.processes) {
    if (p.util_sample == sim::UtilSample::Garbage) {
      out.push_back({stamp, p.pid, kGarbagePct, kGarbagePct, 0, 0, 0, 0});
    } else if (p.sm_util != 0 || p.mem_util != 0 || p.enc_util != 0) {
      out.push_back({stamp, p.pid, p.sm_util, p.mem_util, p.enc_util, 0, 0, 0});
    }
  }
  return out.empty() ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS;
}

nvmlReturn_t codec_util(const char* function, nvmlDevice_t device, unsigned int* utilization,
                        unsigned int* sampling_period_us, bool encoder) {
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (utilization == nullptr || sampling_period_us == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::DeviceView view = e.sim->device(e.gpu, e.t);
    *utilization = encoder ? view.sample.encoder_util : view.sample.decoder_util;
    *sampling_period_us = kSamplingPeriodUs;
    return NVML_SUCCESS;
  });
}

}  // namespace

extern "C" {

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device, sim::lib::MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const sim::DeviceView view = e.sim->device(e.gpu, e.t);
    if (e.mig) {  // a MIG device: its own memory, none of it reserved
      const sim::MigView& m = view.mig.at(*e.mig);
      *memory = {memory->version, m.total_bytes, 0, m.free_bytes, m.used_bytes};
      return NVML_SUCCESS;
    }
    memory->total = view.total_bytes;
    memory->reserved = view.reserved_bytes;
    memory->used = view.used_bytes;
    memory->free = view.free_bytes;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device, sim::lib::MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::DeviceView view = e.sim->device(e.gpu, e.t);
    if (e.mig) {
      const sim::MigView& m = view.mig.at(*e.mig);
      *memory = {m.total_bytes, m.free_bytes, m.used_bytes};
      return NVML_SUCCESS;
    }
    // v1 predates "reserved": it counts reserved memory as used, as the real driver does.
    memory->total = view.total_bytes;
    memory->used = view.used_bytes + view.reserved_bytes;
    memory->free = view.free_bytes;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t* bar1) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device, sim::lib::MigHandles::Accept);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (bar1 == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    const sim::GpuSpec& g = e.sim->scenario().gpus[e.gpu];
    if (!g.bar1_mib) return NVML_ERROR_NOT_SUPPORTED;
    const sim::DeviceView view = e.sim->device(e.gpu, e.t);
    // A MIG device has its memory slices' share of the BAR1 aperture, less one MiB.
    bar1->bar1Total =
        e.mig ? (std::max(1ULL, *g.bar1_mib * g.mig[*e.mig].profile->memory_slices / 8) - 1) * kMiB : *g.bar1_mib * kMiB;
    const auto listed = std::count_if(view.processes.begin(), view.processes.end(),
                                      [&](const sim::ProcessView& p) { return !e.mig || p.mig == e.mig; });
    bar1->bar1Used = std::min(bar1->bar1Total, (2 + 2 * static_cast<unsigned long long>(listed)) * kMiB);
    bar1->bar1Free = bar1->bar1Total - bar1->bar1Used;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    // In MIG mode the board has no one utilization: each instance has its own (GPM).
    if (e.sim->scenario().gpus[e.gpu].mig_mode.value_or(false)) return NVML_ERROR_NOT_SUPPORTED;
    const sim::DeviceView view = e.sim->device(e.gpu, e.t);
    utilization->gpu = view.sample.util_gpu;
    utilization->memory = view.sample.util_mem;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int* utilization,
                                                               unsigned int* sampling_period_us) {
  return codec_util(__func__, device, utilization, sampling_period_us, true);
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int* utilization,
                                                               unsigned int* sampling_period_us) {
  return codec_util(__func__, device, utilization, sampling_period_us, false);
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                                     nvmlProcessesUtilizationInfo_v1_t* info) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlProcessesUtilizationInfo_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    std::vector<nvmlProcessUtilizationInfo_v1_t> out;
    const nvmlReturn_t rc = process_samples(e, info->lastSeenTimeStamp, out);
    if (rc != NVML_SUCCESS) return rc;
    const auto needed = static_cast<unsigned>(out.size());
    if (info->procUtilArray == nullptr || info->processSamplesCount < needed) {
      info->processSamplesCount = needed;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::copy(out.begin(), out.end(), info->procUtilArray);
    info->processSamplesCount = needed;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                               nvmlProcessUtilizationSample_t* samples,
                                                               unsigned int* count, unsigned long long last_seen_us) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::vector<nvmlProcessUtilizationInfo_v1_t> out;
    const nvmlReturn_t rc = process_samples(e, last_seen_us, out);
    if (rc != NVML_SUCCESS) return rc;
    const auto needed = static_cast<unsigned>(out.size());
    if (samples == nullptr || *count < needed) {
      *count = needed;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < needed; ++i) {
      const auto& s = out[i];
      samples[i] = {s.pid, s.timeStamp, s.smUtil, s.memUtil, s.encUtil, s.decUtil};
    }
    *count = needed;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                                       nvmlProcessInfo_v2_t* infos) {
  return running_processes(__func__, device, count, infos, Kind::Compute);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* count,
                                                                       nvmlProcessInfo_v2_t* infos) {
  return running_processes(__func__, device, count, infos, Kind::Compute);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                                    nvmlProcessInfo_v1_t* infos) {
  return running_processes(__func__, device, count, infos, Kind::Compute);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                                        nvmlProcessInfo_v2_t* infos) {
  return running_processes(__func__, device, count, infos, Kind::Graphics);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int* count,
                                                                        nvmlProcessInfo_v2_t* infos) {
  return running_processes(__func__, device, count, infos, Kind::Graphics);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                                     nvmlProcessInfo_v1_t* infos) {
  return running_processes(__func__, device, count, infos, Kind::Graphics);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                                          nvmlProcessInfo_v2_t* infos) {
  return running_processes(__func__, device, count, infos, Kind::Mps);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* count,
                                                                          nvmlProcessInfo_v2_t* infos) {
  return running_processes(__func__, device, count, infos, Kind::Mps);
}
TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                                       nvmlProcessInfo_v1_t* infos) {
  return running_processes(__func__, device, count, infos, Kind::Mps);
}

}  // extern "C"
}  // namespace tarmac::nvml
