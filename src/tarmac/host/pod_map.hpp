// Which Kubernetes pods the kubelet allocated each GPU to (its PodResourcesLister answer, read by
// kube::PodWatcher), resolved to GPU indices. Pure: the device ids a device plugin reports are
// matched against the GPUs' UUIDs, device files and indices here, and tested on fixed inputs.
#pragma once

#include <compare>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tarmac::host {

// A pod's container, as Prometheus' `pod`, `namespace` and `container` labels name it.
struct PodRef {
  std::string name;
  std::string namespace_;
  std::string container;
  auto operator<=>(const PodRef&) const = default;
};

// GPU index -> the pods' containers allocated it, sorted, each once.
using PodMap = std::map<unsigned, std::vector<PodRef>>;

// The devices of one resource the kubelet allocated to one container.
struct PodDevices {
  PodRef pod;
  std::string resource;                 // "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", ...
  std::vector<std::string> device_ids;  // as the device plugin reported them
};

// What a GPU can be named by: its index, its UUID, and the minor number of /dev/nvidiaN.
struct GpuName {
  unsigned index = 0;
  std::string uuid;
  std::optional<unsigned> minor;
};

struct PodMapping {
  PodMap map;
  std::vector<std::string> unresolved;  // NVIDIA device ids that name no GPU here (MIG slices, until issue 19)
};

// A pod as a job in the store and `tarmac report --by job`: "pod/NAMESPACE/NAME" (a Slurm job id is
// never so spelled).
[[nodiscard]] std::string pod_job(const PodRef& pod);

// Whether a Kubernetes object name can be a label value here: 1 to 253 of [0-9A-Za-z._-].
[[nodiscard]] bool valid_kube_name(std::string_view name);

// Whether `resource` is one of NVIDIA's device plugin: "nvidia.com/gpu" or a MIG "nvidia.com/mig-*".
[[nodiscard]] bool nvidia_resource(std::string_view resource);

// Resolves the NVIDIA devices of `devices` to GPUs. A device id is a UUID ("GPU-…"), a
// time-sliced replica of one ("GPU-…::N"), a device file name ("nvidiaN", GKE's "nvidiaN/vgpuM"),
// or an index (the device plugin's DEVICE_ID_STRATEGY=index). Other resources are skipped, and so
// are pods whose names are not valid_kube_name.
[[nodiscard]] PodMapping map_pod_devices(const std::vector<PodDevices>& devices, const std::vector<GpuName>& gpus);

}  // namespace tarmac::host
