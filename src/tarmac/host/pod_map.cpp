#include "tarmac/host/pod_map.hpp"

#include <algorithm>

namespace tarmac::host {

namespace {

constexpr std::size_t kMaxName = 253;
constexpr std::size_t kMaxPodsPerGpu = 64;
// What one answer may resolve, in all: the client already bounds an answer to 16,384 containers.
constexpr std::size_t kMaxDevices = 1 << 16;

std::optional<unsigned> number(std::string_view text) {
  if (text.empty() || text.size() > 4 || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  if (text.size() > 1 && text.front() == '0') return std::nullopt;
  unsigned n = 0;
  for (const char c : text) n = n * 10 + static_cast<unsigned>(c - '0');
  return n;
}

std::optional<unsigned> by_uuid(std::string_view uuid, const std::vector<GpuName>& gpus) {
  for (const auto& g : gpus) {
    if (!g.uuid.empty() && g.uuid == uuid) return g.index;
  }
  return std::nullopt;
}

std::optional<unsigned> by_minor(unsigned minor, const std::vector<GpuName>& gpus) {
  for (const auto& g : gpus) {
    if (g.minor ? *g.minor == minor : g.index == minor) return g.index;
  }
  return std::nullopt;
}

std::optional<unsigned> by_index(unsigned index, const std::vector<GpuName>& gpus) {
  for (const auto& g : gpus) {
    if (g.index == index) return g.index;
  }
  return std::nullopt;
}

std::optional<unsigned> resolve(std::string_view id, const std::vector<GpuName>& gpus) {
  if (id.starts_with("GPU-")) {
    if (const auto replica = id.find("::"); replica != std::string_view::npos) id = id.substr(0, replica);
    return by_uuid(id, gpus);
  }
  if (id.starts_with("nvidia")) {
    std::string_view rest = id.substr(6);
    if (const auto vgpu = rest.find("/vgpu"); vgpu != std::string_view::npos) rest = rest.substr(0, vgpu);
    if (const auto minor = number(rest)) return by_minor(*minor, gpus);
    return std::nullopt;
  }
  if (const auto index = number(id)) return by_index(*index, gpus);
  return std::nullopt;
}

}  // namespace

std::string pod_job(const PodRef& pod) { return "pod/" + pod.namespace_ + "/" + pod.name; }

bool valid_kube_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxName) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '_' ||
           c == '-';
  });
}

bool nvidia_resource(std::string_view resource) {
  return resource == "nvidia.com/gpu" || resource.starts_with("nvidia.com/mig-");
}

PodMapping map_pod_devices(const std::vector<PodDevices>& devices, const std::vector<GpuName>& gpus) {
  PodMapping out;
  std::size_t resolved = 0;
  for (const auto& d : devices) {
    if (!nvidia_resource(d.resource)) continue;
    if (!valid_kube_name(d.pod.name) || !valid_kube_name(d.pod.namespace_) || !valid_kube_name(d.pod.container)) {
      continue;
    }
    for (const auto& id : d.device_ids) {
      if (++resolved > kMaxDevices) return out;
      const auto index = resolve(id, gpus);
      if (!index) {
        if (out.unresolved.size() < kMaxPodsPerGpu) out.unresolved.push_back(id.substr(0, kMaxName));
        continue;
      }
      out.map[*index].push_back(d.pod);
    }
  }
  // Sorted, each once, then bounded: the same 64 whatever order the kubelet lists them in.
  for (auto& [index, pods] : out.map) {
    std::sort(pods.begin(), pods.end());
    pods.erase(std::unique(pods.begin(), pods.end()), pods.end());
    if (pods.size() > kMaxPodsPerGpu) pods.resize(kMaxPodsPerGpu);
  }
  return out;
}

}  // namespace tarmac::host
