// The agent's clock: the real one, or the NVML simulator's (docs/simulator.md, "Time"), so that a
// simulated week under `tarmac sim --speed X` is recorded with simulated timestamps in minutes.
// The loop schedules on monotonic_ms() and stamps samples with now_ms() (util::Clock): a step of
// the wall clock moves the stamps, never the sampling.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "tarmac/util/clock.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::agent {

class Clock : public util::Clock {
 public:
  // Clock milliseconds per real millisecond (1 for the real clock).
  [[nodiscard]] virtual double speed() const = 0;
  // Milliseconds since the epoch on this clock: a sample's timestamp.
  [[nodiscard]] long long now_ms() const { return wall_ms(); }
};

// CLOCK_REALTIME for stamps, CLOCK_BOOTTIME for the schedule.
[[nodiscard]] std::unique_ptr<Clock> real_clock();

// The simulator's clock, read from `<state_dir>/clock` (start_real_ns, speed, epoch_ns); its
// monotonic time runs at its speed from the simulated time it had when it was read.
[[nodiscard]] Result<std::unique_ptr<Clock>> sim_clock(const std::string& state_dir);

}  // namespace tarmac::agent
