#include "pci.hpp"

#include <charconv>
#include <fmt/format.h>

#include "tarmac/util/strings.hpp"

namespace tarmac::sim {

namespace {

std::optional<unsigned> hex(std::string_view text, std::size_t max_digits) {
  if (text.empty() || text.size() > max_digits) return std::nullopt;
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<PciAddress> parse_pci_bus_id(std::string_view text) {
  text = util::trim(text);
  PciAddress pci;
  std::string_view rest = text;
  if (const std::size_t dot = rest.rfind('.'); dot != std::string_view::npos) {
    auto fn = hex(rest.substr(dot + 1), 1);
    if (!fn || *fn > 7) return std::nullopt;
    pci.function = *fn;
    rest = rest.substr(0, dot);
  }
  const std::vector<std::string> parts = util::split(rest, ':');
  if (parts.size() < 2 || parts.size() > 3) return std::nullopt;
  std::size_t i = 0;
  if (parts.size() == 3) {
    auto domain = hex(parts[0], 8);
    if (!domain) return std::nullopt;
    pci.domain = *domain;
    i = 1;
  }
  auto bus = hex(parts[i], 2);
  auto device = hex(parts[i + 1], 2);
  if (!bus || !device || *device > 0x1f) return std::nullopt;
  pci.bus = *bus;
  pci.device = *device;
  return pci;
}

std::string format_pci_bus_id(const PciAddress& pci) {
  return fmt::format("{:08X}:{:02X}:{:02X}.{:X}", pci.domain, pci.bus, pci.device, pci.function);
}

std::string format_pci_bus_id_legacy(const PciAddress& pci) {
  return fmt::format("{:04X}:{:02X}:{:02X}.{:X}", pci.domain, pci.bus, pci.device, pci.function);
}

}  // namespace tarmac::sim
