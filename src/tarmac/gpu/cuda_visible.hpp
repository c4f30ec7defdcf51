// Which GPUs a CUDA program started in this environment would see, and in which order:
// CUDA_VISIBLE_DEVICES read as the CUDA runtime reads it, with CUDA_DEVICE_ORDER.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/model.hpp"

namespace tarmac::gpu {

// What stops CUDA at an entry that concerns MIG (docs/mig.md); the entry and its GPU are in CudaView.
enum class MigIssue {
  None,
  WholeGpuInMigMode,  // an index or GPU-UUID names a GPU in MIG mode: CUDA cannot use it whole
  SecondMigDevice,    // a second device after a MIG device: a process sees one MIG device only
  NoSuchMigDevice,    // a MIG-UUID that matches no MIG device here
};

struct CudaView {
  bool pci_bus_order = false;       // CUDA_DEVICE_ORDER=PCI_BUS_ID (else FASTEST_FIRST, CUDA's default)
  std::vector<unsigned> gpu_of_cuda;  // gpu_of_cuda[k] = NVML index of cuda:k
  // mig_of_cuda[k]: the MIG device (an index of Device::mig) when cuda:k is one, else nullopt.
  std::vector<std::optional<unsigned>> mig_of_cuda;
  MigIssue mig_issue = MigIssue::None;
  std::string mig_entry;                // the entry of mig_issue
  std::optional<unsigned> mig_gpu;      // the GPU it concerns, when one
  // What is wrong with the variable, e.g. an entry that matches no GPU: CUDA silently ignores it
  // and every entry after it.
  std::optional<std::string> problem;
};

// `visible` is CUDA_VISIBLE_DEVICES (nullopt: unset, every GPU), `order` CUDA_DEVICE_ORDER.
// Entries are indices into CUDA's order or GPU UUIDs (a unique prefix is enough, "GPU-" included),
// or MIG-UUIDs of MIG devices. A GPU in MIG mode is never visible whole: unset, CUDA sees the GPUs
// that are not in MIG mode (or, when every GPU is, the first MIG device); a process sees at most
// one MIG device, the first it names.
// FASTEST_FIRST is estimated as CUDA does for most boxes: higher compute capability first, PCI bus
// order among equals.
[[nodiscard]] CudaView cuda_view(const std::vector<Device>& devices, const std::optional<std::string>& visible,
                                 const std::optional<std::string>& order);

}  // namespace tarmac::gpu
