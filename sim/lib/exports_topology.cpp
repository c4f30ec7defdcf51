// Topology (common PCIe ancestor, P2P status), CPU and NUMA affinity, and NVLink.
#include <algorithm>

#include "context.hpp"
#include "pci.hpp"

namespace tarmac::nvml {

using sim::lib::Context;
using sim::lib::Entry;
using sim::lib::guarded;

namespace {

constexpr int kP2pCapsIndexMax = 5;        // NVML_P2P_CAPS_INDEX_UNKNOWN
constexpr int kP2pChipsetNotSupported = 1;  // NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED
constexpr int kNvLinkCapabilityCount = 6;   // NVML_NVLINK_CAP_COUNT

// The other GPU of a two-GPU call, checked like the first.
nvmlReturn_t second_gpu(const Entry& e, nvmlDevice_t device, unsigned& index) {
  const auto i = Context::get().index_of(device);
  if (!i) return NVML_ERROR_INVALID_ARGUMENT;
  if (e.sim->is_lost(*i, e.t)) return NVML_ERROR_GPU_IS_LOST;
  index = *i;
  return NVML_SUCCESS;
}

// The far end of a link of `gpu`. Direct links are numbered peer by peer in index order, NV#
// links per peer; behind NVSwitch every link is up and ends at one of four switches.
struct LinkEnd {
  bool active = false;
  std::optional<unsigned> gpu;
  std::optional<sim::PciAddress> nvswitch;
};

LinkEnd link_end(const sim::Scenario& s, unsigned gpu, unsigned link) {
  if (s.nvswitch) {
    constexpr unsigned kSwitches = 4;
    constexpr unsigned kFirstSwitchBus = 0xF0;  // made-up bus numbers for the switch chips
    return {true, std::nullopt, sim::PciAddress{0, kFirstSwitchBus + link % kSwitches, 0, 0}};
  }
  unsigned next = 0;
  for (unsigned peer = 0; peer < s.gpus.size(); ++peer) {
    if (peer == gpu) continue;
    next += s.topology[gpu][peer].nvlinks;
    if (link < next) return {true, peer, std::nullopt};
  }
  return {};
}

// Validates an NVLink query: no NVLink is NOT_SUPPORTED, a link past the GPU's count INVALID.
nvmlReturn_t check_link(const Entry& e, unsigned link) {
  const sim::GpuSpec& spec = e.sim->scenario().gpus[e.gpu];
  if (spec.nvlink_links == 0) return NVML_ERROR_NOT_SUPPORTED;
  if (link >= spec.nvlink_links) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

// Sets the bits of `ids` in a bitmask of `size` unsigned longs.
nvmlReturn_t write_mask(const std::vector<unsigned>& ids, unsigned int size, unsigned long* mask) {
  if (mask == nullptr || size == 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::fill(mask, mask + size, 0UL);
  constexpr unsigned kBits = sizeof(unsigned long) * 8;
  for (unsigned id : ids) {
    if (id / kBits < size) mask[id / kBits] |= 1UL << (id % kBits);
  }
  return NVML_SUCCESS;
}

// One NUMA node per socket in every simulated machine: both scopes give the same CPUs.
nvmlReturn_t cpu_affinity(const char* function, nvmlDevice_t device, unsigned int size, unsigned long* set,
                          nvmlAffinityScope_t scope) {
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    const sim::GpuSpec& spec = e.sim->scenario().gpus[e.gpu];
    if (set == nullptr || size == 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET) return NVML_ERROR_INVALID_ARGUMENT;
    if (spec.cpus.empty()) return NVML_ERROR_NOT_SUPPORTED;
    return write_mask(spec.cpus, size, set);
  });
}

nvmlReturn_t remote_pci(const char* function, nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci,
                        sim::lib::PciLayout layout) {
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (const nvmlReturn_t rc = check_link(e, link); rc != NVML_SUCCESS) return rc;
    const LinkEnd end = link_end(e.sim->scenario(), e.gpu, link);
    if (!end.active) return NVML_ERROR_NOT_SUPPORTED;  // an inactive link has no remote end
    if (end.gpu) {
      sim::lib::write_pci_info(e.sim->scenario().gpus[*end.gpu], pci, layout);
    } else {
      sim::GpuSpec nvswitch;  // only its PCI address is written
      nvswitch.pci = *end.nvswitch;
      nvswitch.pci_bus_id = sim::format_pci_bus_id(nvswitch.pci);
      sim::lib::write_pci_info(nvswitch, pci, layout);
    }
    return NVML_SUCCESS;
  });
}

}  // namespace

extern "C" {

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                                   nvmlGpuTopologyLevel_t* path) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device1);
    if (e.rc != NVML_SUCCESS) return e.rc;
    unsigned other = 0;
    if (const nvmlReturn_t rc = second_gpu(e, device2, other); rc != NVML_SUCCESS) return rc;
    if (path == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *path = e.sim->scenario().topology[e.gpu][other].level;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                                      nvmlGpuP2PCapsIndex_t index, nvmlGpuP2PStatus_t* status) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device1);
    if (e.rc != NVML_SUCCESS) return e.rc;
    unsigned other = 0;
    if (const nvmlReturn_t rc = second_gpu(e, device2, other); rc != NVML_SUCCESS) return rc;
    if (status == nullptr || index < 0 || index > kP2pCapsIndexMax || other == e.gpu) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    const sim::Link& link = e.sim->scenario().topology[e.gpu][other];
    if (index == NVML_P2P_CAPS_INDEX_NVLINK) {
      *status = link.nvlinks > 0 ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
    } else if (index == kP2pCapsIndexMax) {
      *status = NVML_P2P_STATUS_NOT_SUPPORTED;
    } else {
      // PCIe peer access works below the CPU's interconnect; across sockets it does not.
      *status = link.nvlinks > 0 || link.level <= NVML_TOPOLOGY_NODE ? NVML_P2P_STATUS_OK : kP2pChipsetNotSupported;
    }
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpu_set_size,
                                                                   unsigned long* cpu_set,
                                                                   nvmlAffinityScope_t scope) {
  return cpu_affinity(__func__, device, cpu_set_size, cpu_set, scope);
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpu_set_size,
                                                        unsigned long* cpu_set) {
  return cpu_affinity(__func__, device, cpu_set_size, cpu_set, NVML_AFFINITY_SCOPE_NODE);
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int node_set_size,
                                                           unsigned long* node_set, nvmlAffinityScope_t scope) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET) return NVML_ERROR_INVALID_ARGUMENT;
    if (node_set == nullptr || node_set_size == 0) return NVML_ERROR_INVALID_ARGUMENT;
    const auto& node = e.sim->scenario().gpus[e.gpu].numa_node;
    if (!node) return NVML_ERROR_NOT_SUPPORTED;
    return write_mask({*node}, node_set_size, node_set);
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                        nvmlEnableState_t* is_active) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (is_active == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (const nvmlReturn_t rc = check_link(e, link); rc != NVML_SUCCESS) return rc;
    *is_active = link_end(e.sim->scenario(), e.gpu, link).active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link,
                                                          unsigned int* version) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (const nvmlReturn_t rc = check_link(e, link); rc != NVML_SUCCESS) return rc;
    *version = e.sim->scenario().gpus[e.gpu].nvlink_version;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                                             nvmlNvLinkCapability_t capability,
                                                             unsigned int* result) {
  const char* const function = __func__;
  return guarded([&] {
    auto e = Context::get().enter_device(function, device);
    if (e.rc != NVML_SUCCESS) return e.rc;
    if (result == nullptr || capability < 0 || capability >= kNvLinkCapabilityCount) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (const nvmlReturn_t rc = check_link(e, link); rc != NVML_SUCCESS) return rc;
    const bool active = link_end(e.sim->scenario(), e.gpu, link).active;
    // P2P (0), P2P atomics (2) and "valid" (5) hold on a GPU-to-GPU link; system memory access
    // (1, 3) and SLI bridges (4) do not.
    *result = active && (capability == 0 || capability == 2 || capability == 5) ? 1 : 0;
    return NVML_SUCCESS;
  });
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                                   nvmlPciInfo_t* pci) {
  return remote_pci(__func__, device, link, pci, sim::lib::PciLayout::V3);
}

TARMAC_SIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                                                nvmlPciInfo_t* pci) {
  return remote_pci(__func__, device, link, pci, sim::lib::PciLayout::V1);
}

}  // extern "C"
}  // namespace tarmac::nvml
