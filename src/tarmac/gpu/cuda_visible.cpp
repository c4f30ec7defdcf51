#include "tarmac/gpu/cuda_visible.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "tarmac/util/strings.hpp"

namespace tarmac::gpu {

namespace {

// "8.0" -> 80, "9.0" -> 90; unknown sorts last.
int capability_rank(const Device& d) {
  if (!d.id.cuda_capability) return -1;
  const auto parts = util::split(*d.id.cuda_capability, '.');
  const auto major = util::parse_int(parts[0]).value_or(0);
  const auto minor = parts.size() > 1 ? util::parse_int(parts[1]).value_or(0) : 0;
  return static_cast<int>(major * 10 + minor);
}

// The NVML indices in CUDA's enumeration order. A device's place in `devices` is not its index (a
// GPU whose handle NVML refused is missing, a filtered snapshot holds some): sorted by place, read
// by place.
std::vector<unsigned> cuda_order(const std::vector<Device>& devices, bool pci_bus_order) {
  std::vector<std::size_t> places(devices.size());
  for (std::size_t k = 0; k < places.size(); ++k) places[k] = k;
  // NVML numbers GPUs in PCI bus order: PCI_BUS_ID order is index order.
  std::stable_sort(places.begin(), places.end(),
                   [&](std::size_t a, std::size_t b) { return devices[a].id.index < devices[b].id.index; });
  if (!pci_bus_order) {
    std::stable_sort(places.begin(), places.end(), [&](std::size_t a, std::size_t b) {
      return capability_rank(devices[a]) > capability_rank(devices[b]);
    });
  }
  std::vector<unsigned> order;
  for (const std::size_t k : places) order.push_back(devices[k].id.index);
  return order;
}

}  // namespace

CudaView cuda_view(const std::vector<Device>& devices, const std::optional<std::string>& visible,
                   const std::optional<std::string>& order) {
  CudaView view;
  view.pci_bus_order = order && *order == "PCI_BUS_ID";
  if (order && !order->empty() && *order != "PCI_BUS_ID" && *order != "FASTEST_FIRST") {
    view.problem = fmt::format("CUDA_DEVICE_ORDER={} is not PCI_BUS_ID or FASTEST_FIRST; CUDA uses FASTEST_FIRST", *order);
  }
  const auto in_mig = [&](unsigned index) {
    for (const auto& d : devices) {
      if (d.id.index == index) return d.modes.mig_mode_current == true;
    }
    return false;
  };
  // CUDA's indices count the GPUs it can use whole: not those in MIG mode.
  std::vector<unsigned> enumeration;
  for (const unsigned index : cuda_order(devices, view.pci_bus_order)) {
    if (!in_mig(index)) enumeration.push_back(index);
  }
  const auto take = [&view](unsigned gpu, std::optional<unsigned> mig) {
    view.gpu_of_cuda.push_back(gpu);
    view.mig_of_cuda.push_back(mig);
  };
  if (!visible) {
    for (const unsigned index : enumeration) take(index, std::nullopt);
    if (enumeration.empty()) {
      for (const auto& d : devices) {
        if (!d.mig.empty()) {
          take(d.id.index, 0U);
          break;
        }
      }
    }
    return view;
  }
  const auto stop = [&](MigIssue issue, const std::string& entry, std::optional<unsigned> gpu, std::string why) {
    view.mig_issue = issue;
    view.mig_entry = entry;
    view.mig_gpu = gpu;
    view.problem = fmt::format("CUDA_VISIBLE_DEVICES entry '{}' {}: CUDA ignores it and every entry after it", entry,
                               why);
  };
  for (const auto& raw : util::split(*visible, ',')) {
    const std::string entry(util::trim(raw));
    std::optional<unsigned> gpu;
    std::optional<unsigned> mig;
    // An empty entry (a trailing comma) is what it is after whole GPUs too: not a second device.
    if (!entry.empty() && !view.mig_of_cuda.empty() && view.mig_of_cuda.front()) {
      stop(MigIssue::SecondMigDevice, entry, std::nullopt, "comes after a MIG device, and a process sees one MIG device");
      break;
    }
    if (util::starts_with_ci(entry, "MIG-") && entry.size() > 4) {
      std::vector<std::pair<unsigned, unsigned>> matches;
      for (const auto& d : devices) {
        for (std::size_t k = 0; k < d.mig.size(); ++k) {
          if (d.mig[k].uuid && util::starts_with_ci(*d.mig[k].uuid, entry)) matches.emplace_back(d.id.index, k);
        }
      }
      if (matches.size() != 1) {
        stop(MigIssue::NoSuchMigDevice, entry, std::nullopt,
             matches.empty() ? "matches no MIG device" : "matches several MIG devices");
        break;
      }
      if (!view.gpu_of_cuda.empty()) {
        stop(MigIssue::SecondMigDevice, entry, matches.front().first,
             "is a MIG device after another device, and a process sees one MIG device alone");
        break;
      }
      take(matches.front().first, matches.front().second);
      continue;
    }
    if (auto number = util::parse_int(entry)) {
      if (*number >= 0 && static_cast<std::size_t>(*number) < enumeration.size()) gpu = enumeration[*number];
    } else if (!entry.empty()) {
      const std::string prefix = util::starts_with_ci(entry, "GPU-") ? entry : "GPU-" + entry;
      std::vector<unsigned> matches;
      for (const auto& d : devices) {
        if (d.id.uuid && util::starts_with_ci(*d.id.uuid, prefix)) matches.push_back(d.id.index);
      }
      if (matches.size() == 1) gpu = matches.front();
    }
    if (gpu && in_mig(*gpu)) {
      stop(MigIssue::WholeGpuInMigMode, entry, gpu,
           fmt::format("names GPU {}, which is in MIG mode: CUDA cannot use it whole", *gpu));
      break;
    }
    const bool duplicate = gpu && std::find(view.gpu_of_cuda.begin(), view.gpu_of_cuda.end(), *gpu) != view.gpu_of_cuda.end();
    if (!gpu || duplicate) {
      // CUDA stops at the first entry it cannot use: the rest of the list is ignored.
      if (!(entry.empty() && visible->empty())) {
        view.problem = fmt::format("CUDA_VISIBLE_DEVICES entry '{}' {}: CUDA ignores it and every entry after it",
                                   entry, duplicate ? "repeats a GPU" : "matches no GPU");
      }
      break;
    }
    take(*gpu, mig);
  }
  return view;
}

}  // namespace tarmac::gpu
