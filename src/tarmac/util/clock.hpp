// Time for loops: a monotonic clock that schedules and measures waits, and the wall clock that
// only stamps what is recorded. Sleeping until a wall-clock target stops a loop for an hour when
// NTP steps the clock back an hour; a loop that takes a Clock can be tested with injected time.
#pragma once

#include <atomic>

namespace tarmac::util {

// Milliseconds on CLOCK_BOOTTIME (arbitrary origin): never steps with NTP or `date`, and counts a
// suspend, so an interval measured on it ends on time after a resume.
[[nodiscard]] long long monotonic_ms();

// Milliseconds since the epoch (CLOCK_REALTIME): for timestamps only; it may step either way.
[[nodiscard]] long long wall_ms();

// What a loop asks about time. Loops schedule on monotonic_ms() and sleep with sleep_until; they
// stamp rows with wall_ms().
class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds on a clock that never goes back.
  [[nodiscard]] virtual long long monotonic_ms() const = 0;
  // Milliseconds since the epoch, for timestamps.
  [[nodiscard]] virtual long long wall_ms() const = 0;
  // Returns once monotonic_ms() >= target_ms, or soon (within 100 ms of real time) after `stop` is set.
  virtual void sleep_until(long long target_ms, const std::atomic<bool>& stop) const = 0;
};

// The machine's clocks: monotonic_ms() and wall_ms() above, sleeping in real time.
class SystemClock final : public Clock {
 public:
  [[nodiscard]] long long monotonic_ms() const override { return util::monotonic_ms(); }
  [[nodiscard]] long long wall_ms() const override { return util::wall_ms(); }
  void sleep_until(long long target_ms, const std::atomic<bool>& stop) const override;
};

// Sleeps in slices of at most 100 ms of real time until `clock`'s monotonic time reaches
// `target_ms` or `stop` is set; `speed` is the clock's milliseconds per real millisecond (a
// simulated clock runs faster than real time).
void sleep_in_slices(const Clock& clock, long long target_ms, double speed, const std::atomic<bool>& stop);

}  // namespace tarmac::util
