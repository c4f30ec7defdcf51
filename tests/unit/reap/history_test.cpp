#include "tarmac/reap/history.hpp"

#include <gtest/gtest.h>

#include "tarmac/util/units.hpp"

namespace tarmac::reap {
namespace {

Observation at(long long ts, std::optional<unsigned> util) { return {ts, util, std::nullopt, UtilSource::PerProcess}; }

TEST(IdleHistory, TheIdleRunEndsAtTheLastReading) {
  const auto h = idle_history({at(0, 40), at(1000, 0), at(2000, 0), at(3000, 0)}, 5000);
  EXPECT_EQ(h.observed_since_ms, 0);
  EXPECT_EQ(h.observed_until_ms, 3000);
  ASSERT_TRUE(h.idle_since_ms);
  EXPECT_EQ(*h.idle_since_ms, 1000);
  EXPECT_EQ(h.idle_ms(), 2000);
  EXPECT_EQ(h.last_util_pct, 0U);
}

TEST(IdleHistory, AGapStartsTheWatchAgain) {
  // Idle before and after a gap of 10 s: only what came after it was seen.
  const auto h = idle_history({at(0, 0), at(1000, 0), at(11000, 0), at(12000, 0)}, 5000);
  EXPECT_EQ(h.observed_since_ms, 11000);
  EXPECT_EQ(h.idle_ms(), 1000);
}

TEST(IdleHistory, UnknownIsNotIdle) {
  const auto h = idle_history({at(0, 0), at(1000, std::nullopt)}, 5000);
  EXPECT_FALSE(h.idle_since_ms);
  EXPECT_FALSE(h.last_util_pct);
  EXPECT_EQ(h.idle_ms(), 0);
}

TEST(IdleHistory, KeepsTheRecentReadings) {
  std::vector<Observation> obs;
  for (int i = 0; i < 30; ++i) obs.push_back(at(i * 1000, 0));
  const auto h = idle_history(obs, 5000);
  ASSERT_EQ(h.recent.size(), kRecentObservations);
  EXPECT_EQ(h.recent.back().ts_ms, 29000);
  EXPECT_TRUE(idle_history({}, 5000).empty());
}

TEST(StoreHistory, TheSpanIsTheWatchAndARowHoldsUntilTheNext) {
  store::ProcessSpan span;
  span.gpu = 1;
  span.pid = 7;
  span.first_ms = 0;
  span.last_ms = 600'000;
  // Written on change: busy at 0, idle from 60 s on, nothing written since (unchanged).
  std::vector<store::ProcessSample> rows = {{0, 1, 7, 2048, 50, 0, std::nullopt}, {60'000, 1, 7, 2048, 0, 0, std::nullopt}};
  const auto h = store_history(span, rows, at(610'000, 0));
  EXPECT_EQ(h.observed_since_ms, 0);
  EXPECT_EQ(h.observed_until_ms, 610'000);
  ASSERT_TRUE(h.idle_since_ms);
  EXPECT_EQ(*h.idle_since_ms, 60'000);
  // A NULL row (unknown) breaks the idle run; so does reap's own busy reading now.
  rows.push_back({300'000, 1, 7, 2048, std::nullopt, std::nullopt, std::nullopt});
  rows.push_back({400'000, 1, 7, 2048, 0, 0, std::nullopt});
  EXPECT_EQ(*store_history(span, rows, at(610'000, 0)).idle_since_ms, 400'000);
  EXPECT_FALSE(store_history(span, rows, at(610'000, 20)).idle_since_ms);
}

TEST(StoreHistory, AProcessThatOnlyMovesMemoryIsNotIdle) {
  store::ProcessSpan span;
  span.first_ms = 0;
  span.last_ms = 600'000;
  // No kernel runs (SM 0 %), but its copies keep the memory busy: working, not holding.
  const std::vector<store::ProcessSample> copying = {{0, 1, 7, 2048, 0, 35, std::nullopt}, {60'000, 1, 7, 2048, 0, 40, std::nullopt}};
  const auto h = store_history(span, copying, at(610'000, 0));
  ASSERT_TRUE(h.idle_since_ms);
  EXPECT_EQ(*h.idle_since_ms, 610'000) << "idle only from the reading now, not through the copies";
  // A store from before schema 2 has no memory figure: SM alone decides.
  const std::vector<store::ProcessSample> old_store = {{0, 1, 7, 2048, 0, std::nullopt, std::nullopt}};
  EXPECT_EQ(store_history(span, old_store, at(610'000, 0)).idle_since_ms, 0);
}

// H4 in the store: an NVENC/NVDEC job at SM 0 % and memory 0 % is working in its stored history
// (schema 3's other_util_pct, the busiest of encoder, decoder, JPEG and OFA); the old code read
// these rows as idle for the whole span.
TEST(StoreHistory, AProcessWhoseOnlyBusyEngineIsTheEncoderIsNotIdle) {
  store::ProcessSpan span;
  span.first_ms = 0;
  span.last_ms = 600'000;
  std::vector<store::ProcessSample> encoding = {{0, 1, 7, 2048, 0, 0, 60}, {300'000, 1, 7, 2048, 0, 0, 45}};
  const auto h = store_history(span, encoding, at(610'000, 0));
  ASSERT_TRUE(h.idle_since_ms);
  EXPECT_EQ(*h.idle_since_ms, 610'000) << "idle only from the reading now, not through the encoding";
  // A garbage figure of any engine makes the row unknown, never idle.
  encoding = {{0, 1, 7, 2048, 0, 0, 250}};
  EXPECT_FALSE(store_history(span, encoding, at(10'000, 0)).recent.front().sm_util_pct.has_value());
  EXPECT_EQ(store_history(span, encoding, at(10'000, 0)).idle_since_ms, 10'000);
}

// Low finding: reap's own reading counts when the agent's span reaches past it (the old code
// dropped a busy reading taken just before the agent's last sample).
TEST(StoreHistory, ReapsOwnReadingCountsWhenTheSpanIsNewer) {
  store::ProcessSpan span;
  span.first_ms = 0;
  span.last_ms = 600'000;
  const std::vector<store::ProcessSample> idle = {{0, 1, 7, 2048, 0, 0, std::nullopt}};
  const auto h = store_history(span, idle, at(590'000, 50));
  EXPECT_FALSE(h.idle_since_ms.has_value());
  EXPECT_EQ(h.observed_until_ms, 590'000);
  EXPECT_EQ(h.last_util_pct, 50U);
}

TEST(StoreHistory, WithoutRowsOnlyTheReadingNow) {
  store::ProcessSpan span;
  span.first_ms = 0;
  span.last_ms = 600'000;
  const auto h = store_history(span, {}, at(610'000, 0));
  EXPECT_EQ(h.observed_ms(), 0);  // never claims the span's length without a recorded reading
}

}  // namespace
}  // namespace tarmac::reap
