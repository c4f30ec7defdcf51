#include "tarmac/agent/clock.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "../store/temp_dir.hpp"
#include "epoch.hpp"

namespace tarmac::agent {
namespace {

using store::test_support::TempDir;

constexpr long long kEpochNs = kEpochMs * 1'000'000;

long long real_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void write_clock(const TempDir& dir, const std::string& text) { std::ofstream(dir / "clock") << text; }

TEST(SimClock, RunsFromTheEpochAtItsSpeed) {
  TempDir dir;
  const long long start = real_ns() - 2'000'000'000LL;  // started two real seconds ago
  write_clock(dir, "start_real_ns=" + std::to_string(start) + "\nspeed=3600\nepoch_ns=" + std::to_string(kEpochNs) + "\n");
  auto clock = sim_clock(dir.path());
  ASSERT_TRUE(clock.ok()) << clock.error().message;
  EXPECT_DOUBLE_EQ((*clock)->speed(), 3600.0);

  const long long before = real_ns();
  const long long now = (*clock)->now_ms();
  const long long after = real_ns();
  // epoch + elapsed real time x 3600, bounded by the real times read around the call.
  EXPECT_GE(now, kEpochMs + (before - start) * 3600 / 1'000'000 - 1);
  EXPECT_LE(now, kEpochMs + (after - start) * 3600 / 1'000'000 + 1);
  EXPECT_GE(now, kEpochMs + 2 * 3600 * 1000);  // at least two simulated hours in
}

TEST(SimClock, SleepUntilReturnsOnceTheSimulatedTimeIsReached) {
  TempDir dir;
  write_clock(dir, "start_real_ns=" + std::to_string(real_ns()) + "\nspeed=3600\nepoch_ns=" +
                       std::to_string(kEpochNs) + "\n");
  auto clock = sim_clock(dir.path());
  ASSERT_TRUE(clock.ok()) << clock.error().message;
  const std::atomic<bool> keep_going{false};
  const long long target = (*clock)->monotonic_ms() + 36'000;  // 36 simulated seconds: 10 real ms
  (*clock)->sleep_until(target, keep_going);
  EXPECT_GE((*clock)->monotonic_ms(), target);

  const std::atomic<bool> stop{true};
  (*clock)->sleep_until((*clock)->monotonic_ms() + 3600LL * 1000 * 1000, stop);  // returns at once when stopped
}

TEST(SimClock, AMissingFileIsAnErrorNamingIt) {
  TempDir dir;
  auto clock = sim_clock(dir.path());
  ASSERT_FALSE(clock.ok());
  EXPECT_NE(clock.error().message.find(dir / "clock"), std::string::npos) << clock.error().message;
  EXPECT_NE(clock.error().message.find("tarmac sim"), std::string::npos) << clock.error().message;
}

TEST(SimClock, AMalformedFileIsAnErrorNamingIt) {
  const std::string start = "start_real_ns=" + std::to_string(real_ns()) + "\n";
  const std::string epoch = "epoch_ns=" + std::to_string(kEpochNs) + "\n";
  for (const std::string& text : {
           std::string("start_real_ns=soon\nspeed=3600\n") + epoch,  // not a number
           start + "speed=fast\n" + epoch,
           start + "speed=0\n" + epoch,   // a clock that never moves
           start + "speed=-2\n" + epoch,
           start + "speed=3600\n",        // no epoch
           "speed=3600\n" + epoch,        // no start
           std::string(""),
           std::string("start_real_ns 1\nspeed 3600\nepoch_ns 1\n"),  // not key=value
       }) {
    TempDir dir;
    write_clock(dir, text);
    auto clock = sim_clock(dir.path());
    ASSERT_FALSE(clock.ok()) << text;
    EXPECT_NE(clock.error().message.find(dir / "clock"), std::string::npos) << clock.error().message;
  }
}

TEST(SimClock, ToleratesSpacesAroundKeysAndValues) {
  TempDir dir;
  write_clock(dir, " start_real_ns = " + std::to_string(real_ns()) + " \n speed = 60 \n epoch_ns = " +
                       std::to_string(kEpochNs) + "\n");
  auto clock = sim_clock(dir.path());
  ASSERT_TRUE(clock.ok()) << clock.error().message;
  EXPECT_DOUBLE_EQ((*clock)->speed(), 60.0);
  EXPECT_GE((*clock)->now_ms(), kEpochMs);
}

TEST(RealClock, IsTheSystemClockAtSpeedOne) {
  auto clock = real_clock();
  EXPECT_DOUBLE_EQ(clock->speed(), 1.0);
  const long long before = real_ns() / 1'000'000;
  const long long now = clock->now_ms();
  const long long after = real_ns() / 1'000'000;
  EXPECT_GE(now, before);
  EXPECT_LE(now, after);
}

}  // namespace
}  // namespace tarmac::agent
