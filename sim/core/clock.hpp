// The simulated clock shared by every process of a simulation: simulated time runs `speed` times
// faster than real time from a real start instant, so any process that reads the same clock file
// computes the same simulated time.
#pragma once

#include <filesystem>

#include "tarmac/util/result.hpp"

namespace tarmac::sim {

// The contents of the state directory's `clock` file.
struct ClockSpec {
  long long start_real_ns = 0;  // CLOCK_REALTIME when simulated time was 0
  double speed = 1.0;           // simulated seconds per real second
  long long epoch_ns = 0;       // the simulated wall clock at simulated time 0
};

// Real time now (CLOCK_REALTIME, ns): the default time source.
[[nodiscard]] long long realtime_ns();

class SimClock {
 public:
  using NowFn = long long (*)();

  explicit SimClock(ClockSpec spec, NowFn now = &realtime_ns) : spec_(spec), now_(now) {}

  // Simulated seconds since the start (never negative).
  [[nodiscard]] double seconds() const { return seconds_at(now_()); }
  [[nodiscard]] double seconds_at(long long real_ns) const;
  // The simulated wall clock (ns since the Unix epoch).
  [[nodiscard]] long long wall_ns() const { return wall_ns_at(seconds()); }
  [[nodiscard]] long long wall_ns_at(double sim_seconds) const;
  // The real time (CLOCK_REALTIME, ns) at which simulated time `sim_seconds` comes: what a real
  // driver stamps its samples with, whatever the scenario's epoch and speed.
  [[nodiscard]] long long real_ns_at(double sim_seconds) const;
  // How many real nanoseconds until simulated time `sim_seconds` (0 if it has passed).
  [[nodiscard]] long long real_ns_until(double sim_seconds) const;
  [[nodiscard]] const ClockSpec& spec() const { return spec_; }

 private:
  ClockSpec spec_;
  NowFn now_;
};

// "start_real_ns=...\nspeed=...\nepoch_ns=...\n": plain text any tool can read.
[[nodiscard]] Result<ClockSpec> read_clock_file(const std::filesystem::path& path);
[[nodiscard]] Result<void> write_clock_file(const std::filesystem::path& path, const ClockSpec& spec);

}  // namespace tarmac::sim
