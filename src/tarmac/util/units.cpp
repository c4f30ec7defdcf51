#include "tarmac/util/units.hpp"

#include <cmath>
#include <limits>
#include <fmt/format.h>

#include "tarmac/util/strings.hpp"

namespace tarmac::util {

std::string format_bytes(std::uint64_t bytes) {
  if (bytes >= kGiB) return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
  if (bytes >= kMiB) return fmt::format("{} MiB", bytes / kMiB);
  if (bytes >= 1024) return fmt::format("{} KiB", bytes / 1024);
  return fmt::format("{} B", bytes);
}

std::string format_age(long long s) {
  if (s < 0) s = 0;
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m", s / 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
}

// The longest duration in seconds: callers turn seconds into milliseconds, which must still fit.
constexpr long long kMaxDurationS = std::numeric_limits<long long>::max() / 1000;

std::optional<long long> parse_duration_s(std::string_view text) {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  if (auto plain = parse_int(text)) return *plain >= 0 && *plain <= kMaxDurationS ? plain : std::nullopt;
  long long total = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    if (j == i || j == text.size()) return std::nullopt;
    auto number = parse_int(text.substr(i, j - i));
    if (!number) return std::nullopt;
    long long unit = 0;
    switch (text[j]) {
      case 's': unit = 1; break;
      case 'm': unit = 60; break;
      case 'h': unit = 3600; break;
      case 'd': unit = 86400; break;
      case 'w': unit = 7 * 86400; break;
      default: return std::nullopt;
    }
    // "99999999999999w" is a typo, not a duration that wraps around to a negative or a short one.
    long long part = 0;
    if (__builtin_mul_overflow(*number, unit, &part) || __builtin_add_overflow(total, part, &total) ||
        total > kMaxDurationS) {
      return std::nullopt;
    }
    i = j + 1;
  }
  return total;
}

// Durations beyond ~292 million years do not fit in milliseconds of a long long.
constexpr double kMaxDurationMs = 9.0e18;

std::optional<long long> parse_duration_ms(std::string_view text) {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  if (auto plain = parse_double(text)) {
    if (*plain < 0 || !std::isfinite(*plain) || *plain * 1000.0 > kMaxDurationMs) return std::nullopt;
    return std::llround(*plain * 1000.0);
  }
  double total = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = i;
    while (j < text.size() && ((text[j] >= '0' && text[j] <= '9') || text[j] == '.')) ++j;
    if (j == i || j == text.size()) return std::nullopt;
    auto number = parse_double(text.substr(i, j - i));
    if (!number) return std::nullopt;
    std::size_t k = j;
    while (k < text.size() && text[k] >= 'a' && text[k] <= 'z') ++k;
    const std::string_view unit = text.substr(j, k - j);
    double scale = 0;
    if (unit == "ms") {
      scale = 1;
    } else if (unit == "s") {
      scale = 1000;
    } else if (unit == "m") {
      scale = 60e3;
    } else if (unit == "h") {
      scale = 3600e3;
    } else if (unit == "d") {
      scale = 86400e3;
    } else if (unit == "w") {
      scale = 7 * 86400e3;
    } else {
      return std::nullopt;
    }
    total += *number * scale;
    i = k;
  }
  if (!std::isfinite(total) || total > kMaxDurationMs) return std::nullopt;  // llround would overflow
  return std::llround(total);
}

std::string format_duration_ms(long long ms) {
  if (ms < 0) ms = 0;
  if (ms < 1000 && ms != 0) return fmt::format("{}ms", ms);
  if (ms % 1000 != 0) return fmt::format("{:g}s", static_cast<double>(ms) / 1000.0);
  const long long s = ms / 1000;
  if (s < 60 || s % 60 != 0) return fmt::format("{}s", s);
  if (s < 3600 || s % 3600 != 0) return fmt::format("{}m", s / 60);
  if (s < 86400 || s % 86400 != 0) return fmt::format("{}h", s / 3600);
  return fmt::format("{}d", s / 86400);
}

std::optional<std::uint64_t> parse_size_bytes(std::string_view text) {
  text = trim(text);
  std::size_t j = 0;
  while (j < text.size() && ((text[j] >= '0' && text[j] <= '9') || text[j] == '.')) ++j;
  auto number = parse_double(text.substr(0, j));
  if (!number || *number < 0) return std::nullopt;
  const std::string unit = to_lower(trim(text.substr(j)));
  double scale = 0;
  if (unit.empty() || unit == "m" || unit == "mib" || unit == "mb") {
    scale = static_cast<double>(kMiB);
  } else if (unit == "g" || unit == "gib" || unit == "gb") {
    scale = static_cast<double>(kGiB);
  } else if (unit == "k" || unit == "kib" || unit == "kb") {
    scale = 1024.0;
  } else if (unit == "t" || unit == "tib" || unit == "tb") {
    scale = static_cast<double>(kGiB) * 1024.0;
  } else if (unit == "b") {
    scale = 1.0;
  } else {
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(std::llround(*number * scale));
}

}  // namespace tarmac::util
