// Names for NVML's clock-event (throttle) reason bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tarmac::gpu {

struct ClockEventName {
  std::uint64_t bit;
  const char* key;    // stable identifier, as in JSON and nvidia-smi's field names ("hw_thermal_slowdown")
  const char* words;  // short words for tables ("HW thermal")
};

// Every reason tarmac knows, in bit order.
[[nodiscard]] const std::vector<ClockEventName>& clock_event_names();

// The stable keys of the bits set in `mask` (unknown bits as "0x...").
[[nodiscard]] std::vector<std::string> clock_event_keys(std::uint64_t mask);

// The bits that slow a working GPU down against its will: thermal, power brake, HW slowdown.
// Idle, application clocks, sync boost and the software power cap are normal operation.
[[nodiscard]] std::uint64_t harmful_clock_events(std::uint64_t mask);

// The thermal bits: SW thermal slowdown (0x20) and HW thermal slowdown (0x40).
[[nodiscard]] std::uint64_t thermal_clock_events(std::uint64_t mask);

}  // namespace tarmac::gpu
