// The GPU x GPU link matrix: NVLink counts from each device's active links and their remote PCI
// ids (direct, or through a shared NVSwitch); otherwise the PCIe common ancestor, named as
// nvidia-smi topo -m names it.
#include <algorithm>
#include <set>
#include <string>

#include "tarmac/gpu/nvml_device.hpp"

namespace tarmac::gpu::detail {

using namespace tarmac::nvml;

namespace {

Link link_from_level(int level) {
  switch (level) {
    case NVML_TOPOLOGY_INTERNAL: return Link::Internal;
    case NVML_TOPOLOGY_SINGLE: return Link::Pix;
    case NVML_TOPOLOGY_MULTIPLE: return Link::Pxb;
    case NVML_TOPOLOGY_HOSTBRIDGE: return Link::Phb;
    case NVML_TOPOLOGY_NODE: return Link::Node;
    case NVML_TOPOLOGY_SYSTEM: return Link::Sys;
    default: return Link::Unknown;
  }
}

// Bus ids compare case-insensitively and with either the 4- or 8-digit domain.
std::string normalise_bus_id(std::string id) {
  id = util::to_lower(id);
  const auto colon = id.find(':');
  if (colon != std::string::npos && colon < 8) id.insert(0, 8 - colon, '0');
  return id;
}

}  // namespace

Topology read_topology(std::vector<NvmlDevice>& devices) {
  const std::size_t n = devices.size();
  Topology t;
  t.links.assign(n, std::vector<Link>(n, Link::Unknown));
  t.nvlink_count.assign(n, std::vector<unsigned>(n, 0));
  // Links whose far end is not one of the GPUs go to an NVSwitch: per device, how many, and which.
  std::vector<unsigned> switch_links(n, 0);
  std::vector<std::set<std::string>> switches(n);
  for (std::size_t i = 0; i < n; ++i) {
    NvmlDevice& dev = devices[i];
    const Functions& f = dev.fn();
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS && dev.supported("nvlink"); ++link) {
      auto active = dev.read<int>("nvlink", [&](int* v) { return call(f.nvmlDeviceGetNvLinkState, dev.handle(), link, v); });
      if (!active) break;  // links are numbered densely; the first invalid one ends the list
      if (*active != NVML_FEATURE_ENABLED) continue;
      auto remote_fn = f.nvmlDeviceGetNvLinkRemotePciInfo_v2 != nullptr ? f.nvmlDeviceGetNvLinkRemotePciInfo_v2
                                                                        : f.nvmlDeviceGetNvLinkRemotePciInfo;
      auto remote = dev.read<nvmlPciInfo_t>("nvlink_remote", [&](nvmlPciInfo_t* p) { return call(remote_fn, dev.handle(), link, p); });
      if (!remote) continue;
      const std::string remote_id = normalise_bus_id(util::from_c_buffer(remote->busId, sizeof(remote->busId)));
      bool to_gpu = false;
      for (std::size_t j = 0; j < n; ++j) {
        if (devices[j].identity.pci_bus_id && normalise_bus_id(*devices[j].identity.pci_bus_id) == remote_id) {
          to_gpu = true;
          if (j != i) ++t.nvlink_count[i][j];
        }
      }
      if (!to_gpu) {
        ++switch_links[i];
        switches[i].insert(remote_id);
      }
    }
  }
  // Two GPUs on a common NVSwitch talk through it over all their switch links: nvidia-smi shows
  // NV18 between every pair of a DGX H100's GPUs.
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j || t.nvlink_count[i][j] > 0) continue;
      const bool shared = std::any_of(switches[i].begin(), switches[i].end(),
                                      [&](const std::string& s) { return switches[j].contains(s); });
      if (shared) t.nvlink_count[i][j] = std::min(switch_links[i], switch_links[j]);
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    t.links[i][i] = Link::Self;
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      if (t.nvlink_count[i][j] > 0 || t.nvlink_count[j][i] > 0) {
        t.nvlink_count[i][j] = std::max(t.nvlink_count[i][j], t.nvlink_count[j][i]);
        t.links[i][j] = Link::NvLink;
        continue;
      }
      auto level = devices[i].read<int>("topology", [&](int* v) {
        return call(devices[i].fn().nvmlDeviceGetTopologyCommonAncestor, devices[i].handle(), devices[j].handle(), v);
      });
      if (level) t.links[i][j] = link_from_level(*level);
    }
  }
  return t;
}

}  // namespace tarmac::gpu::detail
