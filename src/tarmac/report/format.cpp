#include "tarmac/report/format.hpp"

#include <cmath>
#include <ctime>
#include <fmt/format.h>

namespace tarmac::report {

namespace {

std::tm utc(long long ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return tm;
}

constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};

}  // namespace

std::string format_utc(long long ms) {
  const std::tm t = utc(ms);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min);
}

std::string format_iso(long long ms) {
  const std::tm t = utc(ms);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour,
                     t.tm_min, t.tm_sec);
}

std::string format_day(long long ms) {
  const std::tm t = utc(ms);
  return fmt::format("{} {:02}-{:02}", kDays[t.tm_wday % 7], t.tm_mon + 1, t.tm_mday);
}

std::string format_hours(double hours) {
  if (hours == 0) return "0 h";
  if (!std::isfinite(hours) || std::fabs(hours) >= 0.95) return fmt::format("{:.1f} h", hours);
  // A short range reads in minutes or seconds, not as "0.0 h" (a report over the last hour).
  const double seconds = hours * 3600;
  if (std::fabs(seconds) < 59.5) return fmt::format("{:.0f} s", seconds);
  return fmt::format("{:.0f} min", seconds / 60);
}

std::string format_money(double usd) {
  // Beyond a trillion dollars (or not a number) the cents no longer fit, and nobody reads them.
  if (!std::isfinite(usd) || std::fabs(usd) >= 1e12) return fmt::format("${:.3g}", usd);
  const long long cents = std::llround(usd * 100);
  const std::string digits = std::to_string(std::llabs(cents) / 100);
  std::string whole;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) whole += ',';
    whole += digits[i];
  }
  return fmt::format("{}${}.{:02}", cents < 0 ? "-" : "", whole, std::llabs(cents) % 100);
}

std::string bold(const std::string& text, bool color) { return color ? "\033[1m" + text + "\033[0m" : text; }

std::string format_share(double part, double whole) {
  return whole > 0 ? fmt::format("{:.1f} %", 100.0 * part / whole) : std::string("-");
}

}  // namespace tarmac::report
