// Running processes of a device: compute, graphics and MPS lists (newest versions first, with the
// count handshake), per-process utilization, and host attribution from /proc.
#include <algorithm>
#include <chrono>

#include "tarmac/gpu/nvml_device.hpp"
#include "tarmac/host/process_cache.hpp"

namespace tarmac::gpu::detail {

using namespace tarmac::nvml;

namespace {

// The size handshake: ask with the current capacity; INSUFFICIENT_SIZE returns the count needed.
// Processes can start between two calls, so a few rounds are allowed before giving up.
template <typename Record, typename Fn>
nvmlReturn_t list(Fn fn, nvmlDevice_t h, std::vector<Record>& out) {
  unsigned count = 0;
  nvmlReturn_t rc = fn(h, &count, nullptr);
  for (int round = 0; round < 4; ++round) {
    if (rc == NVML_SUCCESS) {
      out.resize(count);
      return rc;
    }
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE) return rc;
    out.resize(count + 8);  // room for processes that start in between
    count = static_cast<unsigned>(out.size());
    rc = fn(h, &count, out.data());
  }
  return rc;
}

struct Found {
  unsigned pid;
  unsigned long long used_mem;
};

// One process family (compute, graphics or MPS): _v3, then _v2, then the unversioned v1 record.
std::vector<Found> read_family(NvmlDevice& dev, std::string_view what, PFN_nvmlDeviceGetComputeRunningProcesses_v3 v3,
                               PFN_nvmlDeviceGetComputeRunningProcesses_v2 v2,
                               PFN_nvmlDeviceGetComputeRunningProcesses v1) {
  std::vector<Found> out;
  if (dev.lost() || !dev.supported(what)) return out;
  nvmlReturn_t rc = NVML_ERROR_FUNCTION_NOT_FOUND;
  if (v3 != nullptr || v2 != nullptr) {
    std::vector<nvmlProcessInfo_v2_t> records;
    rc = list(v3 != nullptr ? v3 : v2, dev.handle(), records);
    for (const auto& r : records) out.push_back({r.pid, r.usedGpuMemory});
  } else if (v1 != nullptr) {
    std::vector<nvmlProcessInfo_v1_t> records;
    rc = list(v1, dev.handle(), records);
    for (const auto& r : records) out.push_back({r.pid, r.usedGpuMemory});
  }
  if (rc != NVML_SUCCESS) dev.note_failure(what, rc);
  return out;
}

long long now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

// Per-process SM and memory utilization over the last few seconds (the latest sample per pid).
void read_process_utilization(NvmlDevice& dev, std::vector<GpuProcess>& processes) {
  const Functions& f = dev.fn();
  if (processes.empty() || dev.lost() || !dev.supported("process_util")) return;
  const auto since = static_cast<unsigned long long>(now_us() - 10'000'000);
  std::vector<nvmlProcessUtilizationSample_t> samples;
  auto fn = [&](nvmlDevice_t h, unsigned* count, nvmlProcessUtilizationSample_t* buffer) {
    return call(f.nvmlDeviceGetProcessUtilization, h, buffer, count, since);
  };
  const nvmlReturn_t rc = list(fn, dev.handle(), samples);
  if (rc == NVML_ERROR_NOT_FOUND) return;  // no samples in the window: not an error
  if (rc != NVML_SUCCESS) {
    dev.note_failure("process_util", rc);
    return;
  }
  for (auto& p : processes) {
    unsigned long long latest = 0;
    for (const auto& s : samples) {
      if (s.pid == p.pid && s.timeStamp >= latest) {
        latest = s.timeStamp;
        p.sm_util_pct = s.smUtil;
        p.mem_util_pct = s.memUtil;
      }
    }
  }
}

}  // namespace

std::vector<GpuProcess> read_processes(NvmlDevice& dev, host::ProcessCache& host_cache, ValueGroups groups) {
  const Functions& f = dev.fn();
  std::vector<GpuProcess> out;
  auto add = [&](const std::vector<Found>& found, ProcessType type) {
    for (const auto& p : found) {
      auto same = std::find_if(out.begin(), out.end(), [&](const GpuProcess& q) { return q.pid == p.pid; });
      if (same != out.end()) continue;  // a process with both a compute and a graphics context: listed once
      GpuProcess proc;
      proc.pid = p.pid;
      proc.type = type;
      // NVML reports "not available" (all ones) where it cannot attribute memory (e.g. under MIG).
      if (p.used_mem != ~0ULL) proc.used_mem_bytes = p.used_mem;
      out.push_back(std::move(proc));
    }
  };
  add(read_family(dev, "compute_processes", f.nvmlDeviceGetComputeRunningProcesses_v3,
                  f.nvmlDeviceGetComputeRunningProcesses_v2, f.nvmlDeviceGetComputeRunningProcesses),
      ProcessType::Compute);
  add(read_family(dev, "graphics_processes", f.nvmlDeviceGetGraphicsRunningProcesses_v3,
                  f.nvmlDeviceGetGraphicsRunningProcesses_v2, f.nvmlDeviceGetGraphicsRunningProcesses),
      ProcessType::Graphics);
  add(read_family(dev, "mps_processes", f.nvmlDeviceGetMPSComputeRunningProcesses_v3,
                  f.nvmlDeviceGetMPSComputeRunningProcesses_v2, f.nvmlDeviceGetMPSComputeRunningProcesses),
      ProcessType::Mps);
  if (groups.has(ValueGroup::ProcessUtilization)) read_process_utilization(dev, out);
  if (groups.has(ValueGroup::ProcessHost)) {
    for (auto& p : out) p.host = host_cache.lookup(p.pid);
  }
  std::sort(out.begin(), out.end(), [](const GpuProcess& a, const GpuProcess& b) { return a.pid < b.pid; });
  return out;
}

}  // namespace tarmac::gpu::detail
