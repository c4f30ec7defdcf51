// The agent's loop schedules on monotonic time and uses wall time only for stamps (issue 14 §1,
// "Wall-clock waits"): an NTP step back of an hour used to stop sampling for an hour, since the
// loop slept until a wall-clock target.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "../store/temp_dir.hpp"
#include "epoch.hpp"
#include "tarmac/agent/agent.hpp"
#include "tarmac/agent/clock.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::agent {
namespace {

constexpr long long kHourMs = 3600LL * 1000;

// Time that passes only when the loop sleeps; wall time steps back an hour once monotonic time
// reaches step_at_ms.
class SteppingClock final : public Clock {
 public:
  explicit SteppingClock(long long step_at_ms) : step_at_ms_(step_at_ms) {}
  [[nodiscard]] long long monotonic_ms() const override { return mono_ms_; }
  [[nodiscard]] long long wall_ms() const override { return kEpochMs + mono_ms_ - (stepped_ ? kHourMs : 0); }
  void sleep_until(long long target_ms, const std::atomic<bool>& stop) const override {
    if (stop.load() || target_ms <= mono_ms_) return;
    ++sleeps_;
    mono_ms_ = target_ms;
    if (mono_ms_ >= step_at_ms_) stepped_ = true;
  }
  [[nodiscard]] double speed() const override { return 1.0; }
  [[nodiscard]] int sleeps() const { return sleeps_; }

 private:
  long long step_at_ms_;
  mutable long long mono_ms_ = 0;
  mutable bool stepped_ = false;
  mutable int sleeps_ = 0;
};

// One GPU at 50 %.
class OneGpu final : public gpu::Backend {
 public:
  Result<gpu::Snapshot> snapshot(const gpu::SnapshotOptions&) override {
    gpu::Snapshot s;
    gpu::Device d;
    d.id.index = 0;
    d.id.uuid = "GPU-00000000-aaaa";
    d.id.mem_total_bytes = 40960 * util::kMiB;
    d.sample.util_gpu_pct = 50;
    d.sample.mem_used_bytes = 1024 * util::kMiB;
    s.devices.push_back(d);
    return s;
  }
};

TEST(AgentClock, AWallClockStepBackDoesNotStopSampling) {
  store::test_support::TempDir dir;
  SteppingClock clock(30 * 1000);  // 30 s in, NTP sets the clock back an hour
  OneGpu backend;
  AgentOptions options;
  options.interval_ms = 1000;
  options.process_interval_ms = 5000;
  options.slow_interval_ms = 0;
  options.flush_interval_ms = 3600 * 1000;
  options.duration_ms = 120 * 1000;
  options.state_dir = dir.path();
  std::vector<long long> stamps;
  options.on_sample = [&](const SampleView& v) { stamps.push_back(v.ts_ms); };
  const std::atomic<bool> stop{false};
  auto summary = run_agent(backend, clock, options, stop, [](util::LogLevel, const std::string&) {});
  ASSERT_TRUE(summary.ok()) << summary.error().message;

  // Two minutes of monotonic time, one sample a second, the step notwithstanding.
  EXPECT_EQ(summary->clock_ms, 120 * 1000);
  EXPECT_EQ(summary->snapshots, 120);
  EXPECT_EQ(summary->late_samples, 0);
  ASSERT_EQ(stamps.size(), 120U);
  // The stamps are wall time: the first 30 from the epoch on, then an hour earlier, a second apart.
  EXPECT_EQ(stamps.front(), kEpochMs);
  EXPECT_EQ(stamps[29], kEpochMs + 29 * 1000);
  EXPECT_EQ(stamps[30], kEpochMs + 30 * 1000 - kHourMs);
  EXPECT_EQ(stamps.back(), kEpochMs + 119 * 1000 - kHourMs);
}

}  // namespace
}  // namespace tarmac::agent
