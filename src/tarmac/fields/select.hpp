// nvidia-smi's -i/--id: which GPUs a query covers, named by index, UUID, PCI bus id or serial.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "tarmac/gpu/model.hpp"
#include "tarmac/gpu/value_groups.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::fields {

// nvidia-smi's message when an id names no GPU (it exits with NVML_ERROR_NOT_FOUND, 6).
inline constexpr std::string_view kNoDevicesFound = "No devices were found";
// nvidia-smi's message, without a newline, when -i holds no id at all ("", ","); it exits with 255.
inline constexpr std::string_view kBadDeviceString = "Failed to parse device string on command line";

// Positions in `devices` of the GPUs named by `ids` ("0,2", "GPU-8f3a...", "00000000:07:00.0",
// "07:00.0", a serial), in index order, each once, as nvidia-smi does: ids that name no GPU are
// ignored; when none names one, fails with Error::NotFound (message kNoDevicesFound). Without any
// id, fails with Error::Invalid (message kBadDeviceString).
[[nodiscard]] Result<std::vector<std::size_t>> select_devices(std::string_view ids,
                                                             const std::vector<gpu::Device>& devices);

// What select_devices reads of each device: a snapshot taken for it must include these groups.
inline constexpr gpu::ValueGroups kSelectionGroups{gpu::ValueGroup::Uuid, gpu::ValueGroup::Serial,
                                                   gpu::ValueGroup::Pci};

}  // namespace tarmac::fields
