// Small conversions shared by the field table: model values to query values, with the marker
// each kind of field shows when the model has no value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tarmac/fields/value.hpp"

namespace tarmac::fields::detail {

// A count or a reading printed as a plain integer ("96", "1410").
template <typename T>
[[nodiscard]] Value integer_or(const std::optional<T>& v, Marker absent = Marker::NotSupported) {
  return v ? Value::integer(static_cast<std::uint64_t>(*v)) : Value::missing(absent);
}

// A number shown as "0x" and `digits` upper-case hex digits.
template <typename T>
[[nodiscard]] Value hex_or(const std::optional<T>& v, int digits) {
  return v ? Value::hex(static_cast<std::uint64_t>(*v), digits) : Value::missing(Marker::NotSupported);
}

// Bytes shown in MiB, rounded down as nvidia-smi does.
[[nodiscard]] Value mib_or(const std::optional<std::uint64_t>& bytes, Marker absent = Marker::NotSupported);

// Milliwatts shown as watts with two decimals.
[[nodiscard]] Value watts_or(const std::optional<unsigned>& mw);

// A feature state: "Enabled" or "Disabled".
[[nodiscard]] Value enabled_or(const std::optional<bool>& on, Marker absent = Marker::NotSupported);

[[nodiscard]] Value text_or(const std::optional<std::string>& text);

// One clock-event reason bit: "Active" / "Not Active"; "[Not Supported]" when the GPU does not
// report that reason.
[[nodiscard]] Value reason_bit(const std::optional<std::uint64_t>& active,
                               const std::optional<std::uint64_t>& supported, std::uint64_t bit);

// The parts of a PCI bus id "DDDDDDDD:BB:DD.F".
struct PciAddress {
  std::uint32_t domain = 0;
  std::uint32_t bus = 0;
  std::uint32_t device = 0;
  std::uint32_t function = 0;
};
[[nodiscard]] std::optional<PciAddress> parse_pci_bus_id(std::string_view text);

// "YYYY/MM/DD HH:MM:SS.mmm" in local time, as nvidia-smi's timestamp field.
[[nodiscard]] std::string format_timestamp(long long unix_ms);

}  // namespace tarmac::fields::detail
