// Groups of per-device values, so that a snapshot reads only what its caller needs: `tarmac query`
// asks for the groups of its fields (fields/table.hpp maps each field to its groups) and the NVML
// calls for every other value are skipped; status and watch ask for what their table shows
// (cli::kTableValues), or all of them with --json. A group is one
// NVML read or a few that belong together. Parts marked "once" are identity: read the first time
// the group is asked for, then kept for the device's lifetime.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace tarmac::gpu {

enum class ValueGroup : unsigned {
  // Identity (once).
  Name,                   // product name
  Uuid,                   // UUID
  Serial,                 // board serial number
  VbiosVersion,           // VBIOS version
  Pci,                    // PCI bus id, device id and subsystem id
  ComputeCapability,      // CUDA compute capability
  Board,                  // minor number, brand, architecture, board part number, GPM support, NUMA node, CPUs
  TemperatureThresholds,  // shutdown, slowdown, GPU and memory maximum temperatures
  MaxClocks,              // maximum graphics, SM, memory and video clocks
  // Identity (once) and state (every snapshot).
  Memory,        // total (once); used, free, reserved
  PowerLimits,   // default, minimum and maximum limits (once); limit and enforced limit
  PcieLink,      // maximum generation and width (once); current generation and width, replay counter
  Fans,          // number of fans (once); fan speed
  ClockEvents,   // supported clock event reasons (once); active ones
  // State (every snapshot).
  PersistenceMode,
  DisplayMode,        // display mode and display active
  ComputeMode,
  MigMode,            // current and pending
  EccMode,            // current and pending
  Bar1,               // BAR1 used and total
  Utilization,        // GPU and memory utilization
  CodecUtilization,   // encoder and decoder utilization
  Temperature,
  Power,              // power draw
  Energy,             // total energy consumption
  ClockGraphics,      // current graphics clock
  ClockSm,            // current SM clock
  ClockMem,           // current memory clock
  ClockVideo,         // current video clock
  ApplicationsClocks, // SM and memory applications clocks
  PerformanceState,
  EccErrors,          // corrected and uncorrected, volatile and aggregate
  RetiredPages,       // single and double bit counts, pending
  RemappedRows,
  // Narrower groups, each a part of a group above, for a caller that needs one value of it (status's
  // table): each costs one driver call where its group costs several.
  TemperatureSlowdown,      // the slowdown threshold alone (once); part of TemperatureThresholds
  EnforcedPowerLimit,       // the enforced limit, else the limit; part of PowerLimits
  EccUncorrectedVolatile,   // uncorrected errors since the driver loaded; part of EccErrors
  // Of each process, when the snapshot lists processes (SnapshotOptions::processes).
  ProcessUtilization,  // per-process SM and memory utilization samples
  ProcessHost,         // what /proc says: user, name, command line, start time, container, Slurm job
};

inline constexpr unsigned kValueGroupCount = static_cast<unsigned>(ValueGroup::ProcessHost) + 1;

// A set of value groups.
class ValueGroups {
 public:
  constexpr ValueGroups() = default;
  constexpr ValueGroups(std::initializer_list<ValueGroup> groups) {
    for (const ValueGroup g : groups) bits_ |= bit(g);
  }
  [[nodiscard]] static constexpr ValueGroups all() {
    ValueGroups every;
    every.bits_ = (std::uint64_t{1} << kValueGroupCount) - 1;
    return every;
  }

  [[nodiscard]] constexpr bool has(ValueGroup g) const { return (bits_ & bit(g)) != 0; }
  [[nodiscard]] constexpr bool empty() const { return bits_ == 0; }
  // The groups of this set that are not in `other`.
  [[nodiscard]] constexpr ValueGroups without(ValueGroups other) const {
    ValueGroups rest;
    rest.bits_ = bits_ & ~other.bits_;
    return rest;
  }
  constexpr ValueGroups& operator|=(ValueGroups other) {
    bits_ |= other.bits_;
    return *this;
  }
  [[nodiscard]] friend constexpr ValueGroups operator|(ValueGroups a, ValueGroups b) { return a |= b; }
  [[nodiscard]] friend constexpr bool operator==(ValueGroups, ValueGroups) = default;

 private:
  static constexpr std::uint64_t bit(ValueGroup g) { return std::uint64_t{1} << static_cast<unsigned>(g); }
  std::uint64_t bits_ = 0;
};

static_assert(kValueGroupCount <= 64, "ValueGroups keeps one bit per group in 64 bits");

// The group's name as written above ("ClockSm"), for messages and tests.
[[nodiscard]] std::string_view to_string(ValueGroup group);

}  // namespace tarmac::gpu
