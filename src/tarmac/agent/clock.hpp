// The agent's clock: the real one, or the NVML simulator's (docs/simulator.md, "Time"), so that a
// simulated week under `tarmac sim --speed X` is recorded with simulated timestamps in minutes.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "tarmac/util/result.hpp"

namespace tarmac::agent {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the epoch on this clock.
  [[nodiscard]] virtual long long now_ms() const = 0;
  // Clock milliseconds per real millisecond (1 for the real clock).
  [[nodiscard]] virtual double speed() const = 0;
  // Waits until now_ms() >= target_ms or `stop` is set, whichever comes first.
  void wait_until(long long target_ms, const std::atomic<bool>& stop) const;
};

// CLOCK_REALTIME.
[[nodiscard]] std::unique_ptr<Clock> real_clock();

// The simulator's clock, read from `<state_dir>/clock` (start_real_ns, speed, epoch_ns).
[[nodiscard]] Result<std::unique_ptr<Clock>> sim_clock(const std::string& state_dir);

}  // namespace tarmac::agent
