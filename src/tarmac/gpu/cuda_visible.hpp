// Which GPUs a CUDA program started in this environment would see, and in which order:
// CUDA_VISIBLE_DEVICES read as the CUDA runtime reads it, with CUDA_DEVICE_ORDER.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/model.hpp"

namespace tarmac::gpu {

struct CudaView {
  bool pci_bus_order = false;       // CUDA_DEVICE_ORDER=PCI_BUS_ID (else FASTEST_FIRST, CUDA's default)
  std::vector<unsigned> gpu_of_cuda;  // gpu_of_cuda[k] = NVML index of cuda:k
  // What is wrong with the variable, e.g. an entry that matches no GPU: CUDA silently ignores it
  // and every entry after it.
  std::optional<std::string> problem;
};

// `visible` is CUDA_VISIBLE_DEVICES (nullopt: unset, every GPU), `order` CUDA_DEVICE_ORDER.
// Entries are indices into CUDA's order or GPU UUIDs (a unique prefix is enough, "GPU-" included).
// FASTEST_FIRST is estimated as CUDA does for most boxes: higher compute capability first, PCI bus
// order among equals.
[[nodiscard]] CudaView cuda_view(const std::vector<Device>& devices, const std::optional<std::string>& visible,
                                 const std::optional<std::string>& order);

}  // namespace tarmac::gpu
