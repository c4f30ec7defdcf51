#include "tarmac/util/clock.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace tarmac::util {

namespace {

long long read_ms(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace

long long monotonic_ms() { return read_ms(CLOCK_BOOTTIME); }

long long wall_ms() { return read_ms(CLOCK_REALTIME); }

void SystemClock::sleep_until(long long target_ms, const std::atomic<bool>& stop) const {
  sleep_in_slices(*this, target_ms, 1.0, stop);
}

void sleep_in_slices(const Clock& clock, long long target_ms, double speed, const std::atomic<bool>& stop) {
  // Short real-time slices, so that a stop request (SIGTERM) is seen within 100 ms.
  constexpr double kSliceMs = 100.0;
  while (!stop.load(std::memory_order_relaxed)) {
    const long long left_ms = target_ms - clock.monotonic_ms();
    if (left_ms <= 0) return;
    const double real_ms = std::min(kSliceMs, static_cast<double>(left_ms) / speed);
    std::this_thread::sleep_for(std::chrono::microseconds(std::max(1LL, static_cast<long long>(real_ms * 1000))));
  }
}

}  // namespace tarmac::util
