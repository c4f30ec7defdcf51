// Formatting and parsing of sizes and durations for people.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tarmac::util {

inline constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;
inline constexpr std::uint64_t kGiB = 1024ULL * kMiB;
inline constexpr double kMsPerHour = 3600.0 * 1000.0;

// A reading NVML may lack, widened to the store's integer column type.
[[nodiscard]] inline std::optional<long long> widen(const std::optional<unsigned>& v) {
  if (!v) return std::nullopt;
  return static_cast<long long>(*v);
}

// "38.0 GiB", "512 MiB", "0 B": binary units, one decimal from GiB up.
[[nodiscard]] std::string format_bytes(std::uint64_t bytes);

// "45s", "12m", "3h05m", "2d04h": compact ages for tables.
[[nodiscard]] std::string format_age(long long seconds);

// "30s", "10m", "2h", "7d", "1h30m", or a plain number of seconds; nullopt on anything else.
[[nodiscard]] std::optional<long long> parse_duration_s(std::string_view text);

// Like parse_duration_s with millisecond precision: also "500ms", "2.5s", "0.25" (seconds).
[[nodiscard]] std::optional<long long> parse_duration_ms(std::string_view text);

// "250ms", "3s", "2.5s", "10m", "1h30m": the inverse of parse_duration_ms, for messages and docs.
[[nodiscard]] std::string format_duration_ms(long long ms);

// "20GiB", "512MiB", "1.5G", "1024" (MiB); nullopt on anything else.
[[nodiscard]] std::optional<std::uint64_t> parse_size_bytes(std::string_view text);

}  // namespace tarmac::util
