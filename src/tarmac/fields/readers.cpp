#include "tarmac/fields/readers.hpp"

#include <ctime>
#include <fmt/format.h>

#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::fields::detail {

Value mib_or(const std::optional<std::uint64_t>& bytes, Marker absent) {
  return bytes ? Value::integer(*bytes / util::kMiB) : Value::missing(absent);
}

Value watts_or(const std::optional<unsigned>& mw) {
  return mw ? Value::decimal(static_cast<double>(*mw) / 1000.0) : Value::missing(Marker::NotSupported);
}

Value enabled_or(const std::optional<bool>& on, Marker absent) {
  return on ? Value::flag(*on, "Enabled", "Disabled") : Value::missing(absent);
}

Value text_or(const std::optional<std::string>& text) {
  return text ? Value::text(*text) : Value::missing(Marker::NotSupported);
}

Value reason_bit(const std::optional<std::uint64_t>& active, const std::optional<std::uint64_t>& supported,
                 std::uint64_t bit) {
  if (!active) return Value::missing(Marker::NotSupported);
  if (supported && (*supported & bit) == 0) return Value::missing(Marker::NotSupported);
  return Value::flag((*active & bit) != 0, "Active", "Not Active");
}

namespace {

std::optional<std::uint32_t> parse_hex(std::string_view text) {
  if (text.empty() || text.size() > 8) return std::nullopt;
  std::uint32_t v = 0;
  for (char c : text) {
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= static_cast<std::uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v |= static_cast<std::uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      v |= static_cast<std::uint32_t>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
  }
  return v;
}

}  // namespace

std::optional<PciAddress> parse_pci_bus_id(std::string_view text) {
  // "DDDDDDDD:BB:DD.F", "DDDD:BB:DD.F" or "BB:DD.F" (domain 0).
  const auto dot = text.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const auto parts = util::split(text.substr(0, dot), ':');
  if (parts.size() != 2 && parts.size() != 3) return std::nullopt;
  PciAddress a;
  const std::size_t first = parts.size() == 3 ? 1 : 0;
  if (parts.size() == 3) {
    auto domain = parse_hex(parts[0]);
    if (!domain) return std::nullopt;
    a.domain = *domain;
  }
  auto bus = parse_hex(parts[first]);
  auto device = parse_hex(parts[first + 1]);
  auto function = parse_hex(text.substr(dot + 1));
  if (!bus || !device || !function || *bus > 0xFF || *device > 0x1F || *function > 0x7) return std::nullopt;
  a.bus = *bus;
  a.device = *device;
  a.function = *function;
  return a;
}

std::string format_timestamp(long long unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&seconds, &tm);
  return fmt::format("{:04}/{:02}/{:02} {:02}:{:02}:{:02}.{:03}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(unix_ms % 1000));
}

}  // namespace tarmac::fields::detail
