#include "tarmac/gpu/clock_events.hpp"

#include <fmt/format.h>

namespace tarmac::gpu {

const std::vector<ClockEventName>& clock_event_names() {
  static const std::vector<ClockEventName> names = {
      {0x1, "gpu_idle", "idle"},
      {0x2, "applications_clocks_setting", "app clocks"},
      {0x4, "sw_power_cap", "power cap"},
      {0x8, "hw_slowdown", "HW slowdown"},
      {0x10, "sync_boost", "sync boost"},
      {0x20, "sw_thermal_slowdown", "SW thermal"},
      {0x40, "hw_thermal_slowdown", "HW thermal"},
      {0x80, "hw_power_brake_slowdown", "power brake"},
      {0x100, "display_clock_setting", "display clocks"},
  };
  return names;
}

std::vector<std::string> clock_event_keys(std::uint64_t mask) {
  std::vector<std::string> out;
  std::uint64_t known = 0;
  for (const auto& n : clock_event_names()) {
    known |= n.bit;
    if ((mask & n.bit) != 0) out.emplace_back(n.key);
  }
  if ((mask & ~known) != 0) out.push_back(fmt::format("{:#x}", mask & ~known));
  return out;
}

std::uint64_t harmful_clock_events(std::uint64_t mask) { return mask & (0x8ULL | 0x20ULL | 0x40ULL | 0x80ULL); }

std::uint64_t thermal_clock_events(std::uint64_t mask) { return mask & (0x20ULL | 0x40ULL); }

}  // namespace tarmac::gpu
