// Running processes of a device: compute, graphics and MPS lists (newest versions first, with the
// count handshake), per-process utilization (newest function first, a cursor per device, a minimum window), and
// host attribution from /proc.
#include <algorithm>
#include <chrono>

#include <tuple>

#include "tarmac/gpu/nvml_device.hpp"
#include "tarmac/gpu/process_utilization.hpp"
#include "tarmac/host/process_cache.hpp"

namespace tarmac::gpu::detail {

using namespace tarmac::nvml;

namespace {

constexpr unsigned kNoInstance = 0xFFFFFFFFu;  // a process record's ids outside MIG

// How a list call ended: the driver's answer, and whether the records filled the whole buffer it
// was given (a driver that cuts its answer to the buffer may have left records out).
struct Listed {
  nvmlReturn_t rc = NVML_ERROR_UNKNOWN;
  bool full = false;
};

// The size handshake: ask with the current capacity; INSUFFICIENT_SIZE returns the count needed.
// Processes can start between two calls, so a few rounds are allowed before giving up. A count
// beyond any real machine's is refused rather than allocated; a success never claims more records
// than the buffer held.
template <typename Record, typename Fn>
Listed list(Fn fn, nvmlDevice_t h, std::vector<Record>& out) {
  constexpr unsigned kMaxRecords = 1U << 16;
  unsigned count = 0;
  nvmlReturn_t rc = fn(h, &count, nullptr);
  for (int round = 0; round < 4; ++round) {
    if (rc == NVML_SUCCESS) {
      const std::size_t capacity = out.size();
      out.resize(std::min<std::size_t>(count, capacity));
      return {rc, capacity > 0 && count >= capacity};
    }
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE) return {rc};
    if (count > kMaxRecords) return {NVML_ERROR_UNKNOWN};
    out.resize(count + 8);  // room for processes that start in between
    count = static_cast<unsigned>(out.size());
    rc = fn(h, &count, out.data());
  }
  return {rc};
}

struct Found {
  unsigned pid;
  unsigned long long used_mem;
  unsigned gpu_instance = kNoInstance;  // MIG: the GPU and compute instance it runs in
  unsigned compute_instance = kNoInstance;
};

// One process family (compute, graphics or MPS): _v3, then _v2, then the unversioned v1 record.
// `handle` is the device's own, or one of its MIG devices' (whose ids then name where each runs).
std::vector<Found> read_family(NvmlDevice& dev, std::string_view what, PFN_nvmlDeviceGetComputeRunningProcesses_v3 v3,
                               PFN_nvmlDeviceGetComputeRunningProcesses_v2 v2,
                               PFN_nvmlDeviceGetComputeRunningProcesses v1, nvmlDevice_t handle = nullptr,
                               std::optional<std::pair<unsigned, unsigned>> mig_ids = std::nullopt,
                               nvmlReturn_t* result = nullptr) {
  std::vector<Found> out;
  if (dev.lost() || !dev.supported(what)) return out;
  if (handle == nullptr) handle = dev.handle();
  nvmlReturn_t rc = NVML_ERROR_FUNCTION_NOT_FOUND;
  if (v3 != nullptr || v2 != nullptr) {
    std::vector<nvmlProcessInfo_v2_t> records;
    rc = list(v3 != nullptr ? v3 : v2, handle, records).rc;
    for (const auto& r : records) out.push_back({r.pid, r.usedGpuMemory, r.gpuInstanceId, r.computeInstanceId});
  } else if (v1 != nullptr) {
    std::vector<nvmlProcessInfo_v1_t> records;
    rc = list(v1, handle, records).rc;
    for (const auto& r : records) out.push_back({r.pid, r.usedGpuMemory});
  }
  if (mig_ids) {
    for (Found& p : out) std::tie(p.gpu_instance, p.compute_instance) = *mig_ids;
  }
  if (result != nullptr) {
    *result = rc;  // the caller decides what a failure means
  } else if (rc != NVML_SUCCESS) {
    dev.note_failure(what, rc);
  }
  return out;
}

// In MIG mode NVML lists a board's processes through its own handle only to a privileged caller;
// to others they are read per MIG device, as NVML documents, which also says where each runs.
std::vector<Found> read_mig_family(NvmlDevice& dev, std::string_view what,
                                   PFN_nvmlDeviceGetComputeRunningProcesses_v3 v3,
                                   PFN_nvmlDeviceGetComputeRunningProcesses_v2 v2,
                                   PFN_nvmlDeviceGetComputeRunningProcesses v1) {
  const Functions& f = dev.fn();
  std::vector<Found> out;
  unsigned most = 0;
  if (call(f.nvmlDeviceGetMaxMigDeviceCount, dev.handle(), &most) != NVML_SUCCESS) return out;
  for (unsigned i = 0; i < std::min(most, 64U); ++i) {
    nvmlDevice_t handle = nullptr;
    if (call(f.nvmlDeviceGetMigDeviceHandleByIndex, dev.handle(), i, &handle) != NVML_SUCCESS) continue;
    unsigned gi = 0, ci = 0;
    if (call(f.nvmlDeviceGetGpuInstanceId, handle, &gi) != NVML_SUCCESS ||
        call(f.nvmlDeviceGetComputeInstanceId, handle, &ci) != NVML_SUCCESS) {
      continue;
    }
    for (const Found& p : read_family(dev, what, v3, v2, v1, handle, std::pair{gi, ci})) out.push_back(p);
  }
  return out;
}

unsigned long long now_us() {
  using namespace std::chrono;
  return static_cast<unsigned long long>(
      duration_cast<microseconds>(system_clock::now().time_since_epoch()).count());
}

UtilizationSample sample_of(const nvmlProcessUtilizationInfo_v1_t& r) {
  return {r.pid, r.timeStamp, r.smUtil, r.memUtil, r.encUtil, r.decUtil, r.jpgUtil, r.ofaUtil};
}

UtilizationSample sample_of(const nvmlProcessUtilizationSample_t& r) {
  return {r.pid, r.timeStamp, r.smUtil, r.memUtil, r.encUtil, r.decUtil, std::nullopt, std::nullopt};
}

// nvmlDeviceGetProcessesUtilizationInfo: the count handshake goes through the versioned struct.
Listed read_utilization_info(NvmlDevice& dev, unsigned long long since, std::vector<UtilizationSample>& out) {
  nvmlProcessesUtilizationInfo_v1_t info{};
  info.version = nvmlProcessesUtilizationInfo_v1;
  info.lastSeenTimeStamp = since;
  auto fn = [&](nvmlDevice_t h, unsigned* count, nvmlProcessUtilizationInfo_v1_t* buffer) {
    info.processSamplesCount = *count;
    info.procUtilArray = buffer;
    const nvmlReturn_t rc = call(dev.fn().nvmlDeviceGetProcessesUtilizationInfo, h, &info);
    *count = info.processSamplesCount;
    return rc;
  };
  std::vector<nvmlProcessUtilizationInfo_v1_t> records;
  const Listed listed = list(fn, dev.handle(), records);
  for (const auto& r : records) out.push_back(sample_of(r));
  return listed;
}

// nvmlDeviceGetProcessUtilization: the older function (no JPEG or OFA engines).
Listed read_utilization_samples(NvmlDevice& dev, unsigned long long since, std::vector<UtilizationSample>& out) {
  auto fn = [&](nvmlDevice_t h, unsigned* count, nvmlProcessUtilizationSample_t* buffer) {
    return call(dev.fn().nvmlDeviceGetProcessUtilization, h, buffer, count, since);
  };
  std::vector<nvmlProcessUtilizationSample_t> records;
  const Listed listed = list(fn, dev.handle(), records);
  for (const auto& r : records) out.push_back(sample_of(r));
  return listed;
}

// A board in MIG mode: its own list when the caller may read it (root: every process, with its
// instance ids), else its MIG devices' lists; any other failure is the board list's.
std::vector<Found> read_mig_board_family(NvmlDevice& dev, std::string_view what,
                                         PFN_nvmlDeviceGetComputeRunningProcesses_v3 v3,
                                         PFN_nvmlDeviceGetComputeRunningProcesses_v2 v2,
                                         PFN_nvmlDeviceGetComputeRunningProcesses v1) {
  nvmlReturn_t rc = NVML_SUCCESS;
  std::vector<Found> out = read_family(dev, what, v3, v2, v1, nullptr, std::nullopt, &rc);
  if (rc == NVML_ERROR_NO_PERMISSION) return read_mig_family(dev, what, v3, v2, v1);
  if (rc != NVML_SUCCESS) dev.note_failure(what, rc);
  return out;
}

// read_family on the device's own handle, with read_mig_board_family's signature.
std::vector<Found> read_family_of_device(NvmlDevice& dev, std::string_view what,
                                         PFN_nvmlDeviceGetComputeRunningProcesses_v3 v3,
                                         PFN_nvmlDeviceGetComputeRunningProcesses_v2 v2,
                                         PFN_nvmlDeviceGetComputeRunningProcesses v1) {
  return read_family(dev, what, v3, v2, v1);
}

// Whether the GPU runs in MIG mode, where per-process rates are not supported (nothing is asked).
bool in_mig_mode(NvmlDevice& dev) {
  unsigned current = NVML_DEVICE_MIG_DISABLE;
  unsigned pending = NVML_DEVICE_MIG_DISABLE;
  return call(dev.fn().nvmlDeviceGetMigMode, dev.handle(), &current, &pending) == NVML_SUCCESS &&
         current == NVML_DEVICE_MIG_ENABLE;
}

// One read of the device's samples newer than `since`, newest function first: a driver without
// nvmlDeviceGetProcessesUtilizationInfo, or one that does not support it, is asked the older way.
UtilizationRead read_utilization(NvmlDevice& dev, unsigned long long since, std::vector<UtilizationSample>& out) {
  if (dev.lost() || in_mig_mode(dev)) return UtilizationRead::Unknown;
  struct Way {
    std::string_view what;
    Listed (*read)(NvmlDevice&, unsigned long long, std::vector<UtilizationSample>&);
  };
  for (const Way way : {Way{"process_util_info", read_utilization_info}, Way{"process_util", read_utilization_samples}}) {
    if (!dev.supported(way.what)) continue;
    out.clear();
    const auto [rc, full] = way.read(dev, since, out);
    if (rc == NVML_SUCCESS) return full ? UtilizationRead::SamplesFull : UtilizationRead::Samples;
    if (rc == NVML_ERROR_NOT_FOUND) return UtilizationRead::NoSamples;  // "no samples": not an error
    // A driver that knows the function but not this struct version does not support it as asked.
    dev.note_failure(way.what, rc == NVML_ERROR_ARGUMENT_VERSION_MISMATCH ? NVML_ERROR_NOT_SUPPORTED : rc);
    if (dev.supported(way.what)) return UtilizationRead::Unknown;  // a failure, not an absence: no fallback
  }
  return UtilizationRead::Unknown;
}

// Per-process utilization of every engine since the previous read of this device, and over at
// least kMinUtilizationWindowUs (model.hpp).
void read_process_utilization(NvmlDevice& dev, std::vector<GpuProcess>& processes) {
  if (processes.empty()) return;
  const unsigned long long now = now_us();
  const unsigned long long since = utilization_since(dev.utilization_seen_us, now);
  std::vector<UtilizationSample> samples;
  const UtilizationRead read = read_utilization(dev, since, samples);
  dev.utilization_seen_us = apply_utilization(read, samples, since, now, processes);
}

}  // namespace

std::vector<GpuProcess> read_processes(NvmlDevice& dev, host::ProcessCache& host_cache, ValueGroups groups) {
  const Functions& f = dev.fn();
  std::vector<GpuProcess> out;
  auto add = [&](const std::vector<Found>& found, ProcessType type) {
    for (const auto& p : found) {
      auto same = std::find_if(out.begin(), out.end(), [&](const GpuProcess& q) { return q.pid == p.pid; });
      if (same != out.end()) {
        // A process with several contexts is listed once; an MPS client ("M+C" in nvidia-smi)
        // is shown as one, which process utilization needs to know (runs_mps).
        if (type == ProcessType::Mps) same->type = ProcessType::Mps;
        continue;
      }
      GpuProcess proc;
      proc.pid = p.pid;
      proc.type = type;
      // NVML reports "not available" (all ones) where it cannot attribute memory (e.g. under MIG).
      if (p.used_mem != ~0ULL) proc.used_mem_bytes = p.used_mem;
      if (p.gpu_instance != kNoInstance) proc.mig_instance = {p.gpu_instance, p.compute_instance};
      out.push_back(std::move(proc));
    }
  };
  const auto family = in_mig_mode(dev) && f.nvmlDeviceGetMigDeviceHandleByIndex != nullptr ? read_mig_board_family
                                                                                          : read_family_of_device;
  add(family(dev, "compute_processes", f.nvmlDeviceGetComputeRunningProcesses_v3,
             f.nvmlDeviceGetComputeRunningProcesses_v2, f.nvmlDeviceGetComputeRunningProcesses),
      ProcessType::Compute);
  add(family(dev, "graphics_processes", f.nvmlDeviceGetGraphicsRunningProcesses_v3,
             f.nvmlDeviceGetGraphicsRunningProcesses_v2, f.nvmlDeviceGetGraphicsRunningProcesses),
      ProcessType::Graphics);
  add(family(dev, "mps_processes", f.nvmlDeviceGetMPSComputeRunningProcesses_v3,
             f.nvmlDeviceGetMPSComputeRunningProcesses_v2, f.nvmlDeviceGetMPSComputeRunningProcesses),
      ProcessType::Mps);
  // The host facts first: they name the MPS server, which changes what "no sample" means.
  if (groups.has(ValueGroup::ProcessHost)) {
    std::vector<unsigned> pids;
    for (const auto& p : out) pids.push_back(p.pid);
    auto hosts = host_cache.lookup_many(pids);  // their command lines read in one hand-over
    for (std::size_t k = 0; k < out.size(); ++k) out[k].host = std::move(hosts[k]);
  }
  if (groups.has(ValueGroup::ProcessUtilization)) read_process_utilization(dev, out);
  std::sort(out.begin(), out.end(), [](const GpuProcess& a, const GpuProcess& b) { return a.pid < b.pid; });
  return out;
}

}  // namespace tarmac::gpu::detail
