// The MIG devices of a GPU in MIG mode (docs/mig.md): enumerated through the parent's handle each
// snapshot (a layout can change while tarmac runs), each one's identity, memory and GPU instance's
// GPM. Only unprivileged calls: the GPU instance queries need root, the MIG device's name does not.
#include <algorithm>
#include <array>
#include <set>

#include "tarmac/gpu/nvml_device.hpp"

namespace tarmac::gpu::detail {

using namespace tarmac::nvml;

namespace {

// "NVIDIA H200 MIG 1g.18gb" -> "1g.18gb".
std::optional<std::string> profile_of(const std::string& name) {
  const auto at = name.rfind(" MIG ");
  if (at == std::string::npos || at + 5 >= name.size()) return std::nullopt;
  return name.substr(at + 5);
}

// "MIG-" and up to 64 letters, digits and dashes: the driver's canonical form (R470 and later).
bool mig_uuid_ok(const std::string& uuid) {
  if (!uuid.starts_with("MIG-") || uuid.size() <= 4 || uuid.size() > 68) return false;
  return std::all_of(uuid.begin() + 4, uuid.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
  });
}

std::optional<std::string> text(auto fn, nvmlDevice_t handle) {
  std::array<char, 96> buffer{};
  if (call(fn, handle, buffer.data(), static_cast<unsigned>(buffer.size())) != NVML_SUCCESS) return std::nullopt;
  buffer.back() = '\0';
  return std::string(buffer.data());
}

template <typename Fn>
std::optional<unsigned> id_of(Fn fn, nvmlDevice_t handle) {
  unsigned id = 0;
  if (call(fn, handle, &id) != NVML_SUCCESS) return std::nullopt;
  return id;
}

}  // namespace

std::vector<MigDevice> read_mig(NvmlDevice& dev, bool slow) {
  const Functions& f = dev.fn();
  std::vector<MigDevice> out;
  unsigned most = 0;
  if (dev.lost() || !dev.supported("mig_devices") ||
      call(f.nvmlDeviceGetMaxMigDeviceCount, dev.handle(), &most) != NVML_SUCCESS) {
    return out;
  }
  std::set<unsigned> seen_instances;
  for (unsigned i = 0; i < std::min(most, 64U); ++i) {
    nvmlDevice_t handle = nullptr;
    const nvmlReturn_t rc = call(f.nvmlDeviceGetMigDeviceHandleByIndex, dev.handle(), i, &handle);
    if (rc == NVML_ERROR_NOT_FOUND) continue;  // no MIG device at this index
    if (rc != NVML_SUCCESS) {
      dev.note_failure("mig_devices", rc);
      break;
    }
    MigDevice m;
    m.index = i;
    m.uuid = text(f.nvmlDeviceGetUUID, handle);
    // It is printed for CUDA_VISIBLE_DEVICES and names a lease file: only the canonical form.
    if (m.uuid && !mig_uuid_ok(*m.uuid)) m.uuid.reset();
    if (auto name = text(f.nvmlDeviceGetName, handle)) m.profile = profile_of(*name);
    m.gpu_instance_id = id_of(f.nvmlDeviceGetGpuInstanceId, handle);
    m.compute_instance_id = id_of(f.nvmlDeviceGetComputeInstanceId, handle);
    nvmlDeviceAttributes_t attributes{};
    if (call(f.nvmlDeviceGetAttributes_v2, handle, &attributes) == NVML_SUCCESS) {
      if (attributes.gpuInstanceSliceCount > 0) m.slices = attributes.gpuInstanceSliceCount;
      if (attributes.multiprocessorCount > 0) m.multiprocessors = attributes.multiprocessorCount;
    }
    nvmlMemory_v2_t memory{};
    memory.version = nvmlMemory_v2;
    if (call(f.nvmlDeviceGetMemoryInfo_v2, handle, &memory) == NVML_SUCCESS) {
      m.mem_total_bytes = memory.total;
      m.mem_used_bytes = memory.used;
      m.mem_free_bytes = memory.free;
    } else if (nvmlMemory_t v1{}; call(f.nvmlDeviceGetMemoryInfo, handle, &v1) == NVML_SUCCESS) {
      m.mem_total_bytes = v1.total;
      m.mem_used_bytes = v1.used;
      m.mem_free_bytes = v1.free;
    }
    // GPM per GPU instance (Hopper and later), compared with this instance's previous sample.
    if (slow && dev.identity.gpm_supported == true && m.gpu_instance_id && f.nvmlGpmMigSampleGet != nullptr) {
      const unsigned gi = *m.gpu_instance_id;
      seen_instances.insert(gi);
      const GpmRates r = gpm_rates(dev, "gpm_mig", dev.gpm_mig_previous[gi], [&](nvmlGpmSample_t s) {
        return f.nvmlGpmMigSampleGet(dev.handle(), gi, s);
      });
      m.gpm_sm_active_pct = r.sm_active_pct;
      m.gpm_sm_occupancy_pct = r.sm_occupancy_pct;
      m.gpm_tensor_active_pct = r.tensor_active_pct;
      m.gpm_dram_bw_pct = r.dram_bw_pct;
    }
    out.push_back(std::move(m));
  }
  // An instance that is gone (the layout changed) must not lend its old sample to a new one.
  if (slow) {
    std::erase_if(dev.gpm_mig_previous, [&](const auto& entry) { return seen_instances.count(entry.first) == 0; });
  }
  return out;
}


}  // namespace tarmac::gpu::detail
