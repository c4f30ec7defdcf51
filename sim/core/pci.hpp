// PCI bus ids as NVML writes and reads them.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "scenario.hpp"

namespace tarmac::sim {

// Accepts "00000000:07:00.0", "0000:07:00.0" and "07:00.0" (hex, any case; function optional).
[[nodiscard]] std::optional<PciAddress> parse_pci_bus_id(std::string_view text);

// "00000000:07:00.0": nvmlPciInfo_t.busId (upper-case hex, 8-digit domain).
[[nodiscard]] std::string format_pci_bus_id(const PciAddress& pci);
// "0000:07:00.0": nvmlPciInfo_t.busIdLegacy.
[[nodiscard]] std::string format_pci_bus_id_legacy(const PciAddress& pci);

}  // namespace tarmac::sim
