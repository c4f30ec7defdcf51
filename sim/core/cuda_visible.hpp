// How CUDA numbers and selects GPUs: CUDA_DEVICE_ORDER (FASTEST_FIRST by default, or
// PCI_BUS_ID = NVML's order) and CUDA_VISIBLE_DEVICES (indices in that order, GPU-UUIDs or
// unique UUID prefixes; enumeration stops at the first invalid or repeated entry).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "scenario.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::sim {

enum class DeviceOrder { FastestFirst, PciBusId };

// CUDA_DEVICE_ORDER's value (nullopt: unset) as an order; anything unknown is CUDA's default.
[[nodiscard]] DeviceOrder parse_device_order(std::optional<std::string_view> value);

// NVML indices in CUDA's enumeration order. FASTEST_FIRST ranks by compute capability, then by
// multiprocessors x max SM clock, ties in PCI bus order.
[[nodiscard]] std::vector<unsigned> cuda_order(const Scenario& scenario, DeviceOrder order);

// The NVML indices a process with this CUDA_VISIBLE_DEVICES (nullopt: unset, every GPU) sees,
// in its CUDA order. An empty result is what CUDA reports as "no CUDA-capable device".
// A GPU in MIG mode is never visible whole: its MIG devices are, named by their MIG-UUIDs.
[[nodiscard]] std::vector<unsigned> visible_gpus(const Scenario& scenario, std::optional<std::string_view> visible,
                                                 DeviceOrder order);

// One device CUDA enumerates: a whole GPU, or a MIG device of one.
struct VisibleDevice {
  unsigned gpu = 0;
  std::optional<unsigned> mig;  // index of gpus[gpu].mig
  auto operator<=>(const VisibleDevice&) const = default;
};

// As visible_gpus, with MIG devices: a MIG-<uuid> entry names one, and a process sees at most one
// MIG device (CUDA enumerates the first and nothing else, as CUDA 11 and 12 do by default); unset,
// whole GPUs not in MIG mode, or the first MIG device when there is no such GPU.
[[nodiscard]] std::vector<VisibleDevice> visible_devices(const Scenario& scenario,
                                                         std::optional<std::string_view> visible, DeviceOrder order);

}  // namespace tarmac::sim
