#include "tarmac/agent/tracker.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "tracker_fixture.hpp"

namespace tarmac::agent {
namespace {

using gpu::Activity;
using test_support::kAll;
using test_support::kS;
using test_support::kT0;
using test_support::TrackerTest;
using test_support::device;
using test_support::process;
using test_support::snapshot;

// kT0, kS, kAll, process(), device(), snapshot() and TrackerTest: tracker_fixture.hpp.


// (class, start, end) of a span, for one-line comparisons.
std::tuple<Activity, long long, long long> span(const store::ActivitySpan& s) {
  return {s.activity, s.start_ms, s.end_ms};
}

TEST_F(TrackerTest, ABusyGpuGivesOneBusySpanOverItsSamples) {
  for (int i = 0; i < 3; ++i) observe(snapshot({device(0, 90, {process(100, 30000)})}), kT0 + i * 10 * kS);
  EXPECT_EQ(tracker_.classes(), (std::map<unsigned, Activity>{{0, Activity::Busy}}));
  const auto s = spans(0);
  ASSERT_EQ(s.size(), 1U);
  EXPECT_EQ(span(s[0]), std::make_tuple(Activity::Busy, kT0, kT0 + 20 * kS));
  EXPECT_EQ(sample_classes(0), std::vector<Activity>(3, Activity::Busy));
}

TEST_F(TrackerTest, SamplesCarryTheDevicesValuesInStoreUnits) {
  gpu::Device d = device(0, 42, {process(100, 2048)});
  d.sample.util_mem_pct = 17;
  d.sample.power_mw = 251'600;  // rounds to 252 W
  d.sample.temp_c = 63;
  d.sample.clock_sm_mhz = 1410;
  d.sample.clock_mem_mhz = 1593;
  gpu::Device bare;  // nothing supported
  bare.id.index = 1;
  observe(snapshot({d, bare}), kT0);
  auto samples = read().samples(kAll, {});
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(samples->size(), 2U);
  const store::GpuSample& s = (*samples)[0];
  EXPECT_EQ(s.util_pct, 42);
  EXPECT_EQ(s.mem_util_pct, 17);
  EXPECT_EQ(s.mem_used_mib, 2048);
  EXPECT_EQ(s.power_w, 252);
  EXPECT_EQ(s.temp_c, 63);
  EXPECT_EQ(s.sm_mhz, 1410);
  EXPECT_EQ(s.mem_mhz, 1593);
  EXPECT_EQ(s.enc_pct, std::nullopt);
  EXPECT_EQ(s.activity, Activity::Busy);
  const store::GpuSample& b = (*samples)[1];
  EXPECT_EQ(b.util_pct, std::nullopt);
  EXPECT_EQ(b.mem_used_mib, std::nullopt);
  EXPECT_EQ(b.power_w, std::nullopt);
  EXPECT_EQ(b.activity, Activity::Idle);
}

TEST_F(TrackerTest, ProcessesAtZeroPercentBecomeHoldingOnceTheSamplesSpanHoldingAfter) {
  // GPU 0: a process holding 73 % of memory (starved until holding); GPU 1: a light process
  // (1 % of memory, idle until holding). Samples every 10 s; holding_after = 60 s.
  for (int i = 0; i <= 9; ++i) {
    observe(snapshot({device(0, 0, {process(100, 30000)}), device(1, 0, {process(200, 512)})}), kT0 + i * 10 * kS);
  }
  std::vector<Activity> starved_then_holding(6, Activity::Starved);
  starved_then_holding.resize(10, Activity::Holding);
  EXPECT_EQ(sample_classes(0), starved_then_holding);
  std::vector<Activity> idle_then_holding(6, Activity::Idle);
  idle_then_holding.resize(10, Activity::Holding);
  EXPECT_EQ(sample_classes(1), idle_then_holding);

  // The change closes the old span at the sample that changed the class (60 s), where the new one starts.
  const auto s0 = spans(0);
  ASSERT_EQ(s0.size(), 2U);
  EXPECT_EQ(span(s0[0]), std::make_tuple(Activity::Starved, kT0, kT0 + 60 * kS));
  EXPECT_EQ(span(s0[1]), std::make_tuple(Activity::Holding, kT0 + 60 * kS, kT0 + 90 * kS));
  const auto s1 = spans(1);
  ASSERT_EQ(s1.size(), 2U);
  EXPECT_EQ(span(s1[0]), std::make_tuple(Activity::Idle, kT0, kT0 + 60 * kS));
  EXPECT_EQ(span(s1[1]), std::make_tuple(Activity::Holding, kT0 + 60 * kS, kT0 + 90 * kS));
  EXPECT_EQ(tracker_.classes(), (std::map<unsigned, Activity>{{0, Activity::Holding}, {1, Activity::Holding}}));
}

TEST_F(TrackerTest, AnyUtilizationRestartsTheHoldingClock) {
  const auto held = [](unsigned util) { return snapshot({device(0, util, {process(100, 30000)})}); };
  for (int i = 0; i <= 5; ++i) observe(held(0), kT0 + i * 10 * kS);  // 0..50 s at 0 %
  observe(held(5), kT0 + 60 * kS);                                    // a blip of work
  for (int i = 7; i <= 12; ++i) observe(held(0), kT0 + i * 10 * kS);  // 70..120 s at 0 %
  // 50 s at 0 % after the blip (70 s -> 120 s): not yet holding, although 0 % began 120 s ago.
  EXPECT_EQ(sample_classes(0), std::vector<Activity>(13, Activity::Starved));
  observe(held(0), kT0 + 130 * kS);  // 60 s since the blip
  EXPECT_EQ(tracker_.classes().at(0), Activity::Holding);
}

TEST_F(TrackerTest, AClassChangeClosesTheOldSpanAtTheNewSamplesTime) {
  observe(snapshot({device(0, 95, {process(100, 30000)})}), kT0);
  observe(snapshot({device(0, 95, {process(100, 30000)})}), kT0 + 10 * kS);
  observe(snapshot({device(0, 0)}), kT0 + 20 * kS);
  observe(snapshot({device(0, 0)}), kT0 + 30 * kS);
  const auto s = spans(0);
  ASSERT_EQ(s.size(), 2U);
  EXPECT_EQ(span(s[0]), std::make_tuple(Activity::Busy, kT0, kT0 + 20 * kS));
  EXPECT_EQ(span(s[1]), std::make_tuple(Activity::Idle, kT0 + 20 * kS, kT0 + 30 * kS));
}

TEST_F(TrackerTest, AGpuTheSchedulerGaveOutWithNothingOnItIsReservedIdle) {
  gpu::Device leased = device(0, 0);
  leased.id.uuid = "GPU-leased";
  gpu::Device free = device(1, 0);
  free.id.uuid = "GPU-free";
  const std::set<std::string> given = {"GPU-leased"};
  tracker_.observe(snapshot({leased, free}), kT0, true, recorder_, given);
  tracker_.observe(snapshot({leased, free}), kT0 + 10 * kS, true, recorder_, given);
  EXPECT_EQ(tracker_.classes(), (std::map<unsigned, Activity>{{0, Activity::ReservedIdle}, {1, Activity::Idle}}));
  // Once used, it is busy like any other; once given back, idle.
  gpu::Device working = device(0, 90, {process(100, 30000)});
  working.id.uuid = "GPU-leased";
  tracker_.observe(snapshot({working, free}), kT0 + 20 * kS, true, recorder_, given);
  EXPECT_EQ(tracker_.classes().at(0), Activity::Busy);
  tracker_.observe(snapshot({leased, free}), kT0 + 30 * kS, true, recorder_, {});
  EXPECT_EQ(tracker_.classes().at(0), Activity::Idle);
  const auto s = spans(0);
  ASSERT_EQ(s.size(), 3U);
  EXPECT_EQ(span(s[0]), std::make_tuple(Activity::ReservedIdle, kT0, kT0 + 20 * kS));
}

TEST_F(TrackerTest, AGapLongerThanGapMsStartsNewSpansInsteadOfStretchingTheOld) {
  observe(snapshot({device(0, 90)}), kT0);
  observe(snapshot({device(0, 90)}), kT0 + 10 * kS);
  observe(snapshot({device(0, 90)}), kT0 + 100 * kS);  // 90 s later; gap_ms is 30 s
  observe(snapshot({device(0, 90)}), kT0 + 110 * kS);
  const auto s = spans(0);
  ASSERT_EQ(s.size(), 2U);
  EXPECT_EQ(span(s[0]), std::make_tuple(Activity::Busy, kT0, kT0 + 10 * kS));
  EXPECT_EQ(span(s[1]), std::make_tuple(Activity::Busy, kT0 + 100 * kS, kT0 + 110 * kS));
}

TEST_F(TrackerTest, AGapOfExactlyGapMsIsNotAGap) {
  observe(snapshot({device(0, 90)}), kT0);
  observe(snapshot({device(0, 90)}), kT0 + 30 * kS);
  const auto s = spans(0);
  ASSERT_EQ(s.size(), 1U);
  EXPECT_EQ(span(s[0]), std::make_tuple(Activity::Busy, kT0, kT0 + 30 * kS));
}

TEST_F(TrackerTest, AGapRestartsTheHoldingClock) {
  const auto held = snapshot({device(0, 0, {process(100, 30000)})});
  for (int i = 0; i <= 5; ++i) observe(held, kT0 + i * 10 * kS);  // 50 s at 0 %
  observe(held, kT0 + 200 * kS);                                  // after a gap: not 200 s of holding
  observe(held, kT0 + 210 * kS);
  EXPECT_EQ(tracker_.classes().at(0), Activity::Starved);
}

TEST_F(TrackerTest, AGapEndsProcessSpansToo) {
  // A process seen before and after a gap in sampling gets two spans: the report must not count
  // GPU-hours for it over time nobody saw (tracker.hpp: a gap ends every span).
  const auto with_job = snapshot({device(0, 90, {process(100, 30000)})});
  observe(with_job, kT0);
  observe(with_job, kT0 + 10 * kS);
  observe(with_job, kT0 + 600 * kS);  // ten minutes unobserved
  observe(with_job, kT0 + 610 * kS);
  auto p = process_spans();
  std::sort(p.begin(), p.end(), [](const auto& a, const auto& b) { return a.first_ms < b.first_ms; });
  ASSERT_EQ(p.size(), 2U);
  EXPECT_EQ(std::make_pair(p[0].first_ms, p[0].last_ms), std::make_pair(kT0, kT0 + 10 * kS));
  EXPECT_EQ(std::make_pair(p[1].first_ms, p[1].last_ms), std::make_pair(kT0 + 600 * kS, kT0 + 610 * kS));
}

TEST_F(TrackerTest, ProcessesArrivingAndLeavingGiveEventsAndSpans) {
  observe(snapshot({device(0, 0)}), kT0);
  observe(snapshot({device(0, 50, {process(100, 1000)})}), kT0 + 10 * kS);
  observe(snapshot({device(0, 50, {process(100, 2000), process(200, 500, 1736150100, "bob", "./bench")})}),
          kT0 + 20 * kS);
  observe(snapshot({device(0, 50, {process(100, 1500), process(200, 700, 1736150100, "bob", "./bench")})}),
          kT0 + 30 * kS);
  observe(snapshot({device(0, 50, {process(200, 600, 1736150100, "bob", "./bench")})}), kT0 + 40 * kS);
  observe(snapshot({device(0, 0)}), kT0 + 50 * kS);

  const auto starts = events("process-start");
  ASSERT_EQ(starts.size(), 2U);
  EXPECT_EQ(starts[0].ts_ms, kT0 + 10 * kS);
  EXPECT_EQ(starts[0].gpu, 0U);
  EXPECT_NE(starts[0].detail.find("pid 100"), std::string::npos) << starts[0].detail;
  EXPECT_NE(starts[0].detail.find("alice"), std::string::npos) << starts[0].detail;
  EXPECT_NE(starts[0].detail.find("python train.py"), std::string::npos) << starts[0].detail;
  EXPECT_EQ(starts[1].ts_ms, kT0 + 20 * kS);
  EXPECT_NE(starts[1].detail.find("pid 200"), std::string::npos) << starts[1].detail;

  const auto ends = events("process-end");
  ASSERT_EQ(ends.size(), 2U);
  EXPECT_EQ(ends[0].ts_ms, kT0 + 40 * kS);
  EXPECT_NE(ends[0].detail.find("pid 100"), std::string::npos) << ends[0].detail;
  EXPECT_NE(ends[0].detail.find("2000 MiB"), std::string::npos) << ends[0].detail;
  EXPECT_EQ(ends[1].ts_ms, kT0 + 50 * kS);
  EXPECT_NE(ends[1].detail.find("pid 200"), std::string::npos) << ends[1].detail;

  const auto p = process_spans();
  ASSERT_EQ(p.size(), 2U);
  EXPECT_EQ(p[0].pid, 100U);
  EXPECT_EQ(p[0].gpu, 0U);
  EXPECT_EQ(std::make_pair(p[0].first_ms, p[0].last_ms), std::make_pair(kT0 + 10 * kS, kT0 + 30 * kS));
  EXPECT_EQ(p[0].mem_used_mib_max, 2000);
  EXPECT_EQ(p[0].user, "alice");
  EXPECT_EQ(p[0].command, "python train.py");
  EXPECT_EQ(p[0].start_unix, 1736150000);
  EXPECT_EQ(p[1].pid, 200U);
  EXPECT_EQ(std::make_pair(p[1].first_ms, p[1].last_ms), std::make_pair(kT0 + 20 * kS, kT0 + 40 * kS));
  EXPECT_EQ(p[1].mem_used_mib_max, 700);
  EXPECT_EQ(p[1].user, "bob");
  EXPECT_EQ(p[1].command, "./bench");

  auto samples = read().process_samples(kAll, {});
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(samples->size(), 6U);  // 1 + 2 + 2 + 1
}

TEST_F(TrackerTest, AReusedPidIsANewProcess) {
  observe(snapshot({device(0, 50, {process(100, 1000, 1736150000)})}), kT0);
  observe(snapshot({device(0, 50, {process(100, 1000, 1736153000, "carol", "other")})}), kT0 + 10 * kS);
  EXPECT_EQ(events("process-end").size(), 1U);
  EXPECT_EQ(events("process-start").size(), 2U);
  const auto p = process_spans();
  ASSERT_EQ(p.size(), 2U);
  EXPECT_EQ(p[0].user, "alice");
  EXPECT_EQ(p[0].last_ms, kT0);
  EXPECT_EQ(p[1].user, "carol");
  EXPECT_EQ(p[1].first_ms, kT0 + 10 * kS);
}

TEST_F(TrackerTest, AFastSampleWithoutProcessesKeepsTheLastKnownOnes) {
  observe(snapshot({device(0, 0, {process(100, 30000)})}), kT0, true);
  // Fast samples list no processes; the device's memory still says they are there.
  for (int i = 1; i <= 6; ++i) {
    gpu::Device fast = device(0, 0);
    fast.sample.mem_used_bytes = 30000 * util::kMiB;
    observe(snapshot({fast}), kT0 + i * 10 * kS, false);
  }
  std::vector<Activity> expected(6, Activity::Starved);
  expected.push_back(Activity::Holding);  // 60 s of fast samples at 0 % with the known process
  EXPECT_EQ(sample_classes(0), expected);
  EXPECT_TRUE(events("process-end").empty());
  const auto p = process_spans();
  ASSERT_EQ(p.size(), 1U);
  EXPECT_EQ(p[0].last_ms, kT0);  // only full samples see processes

  // The next full sample without the process ends it.
  observe(snapshot({device(0, 0)}), kT0 + 70 * kS, true);
  EXPECT_EQ(events("process-end").size(), 1U);
  EXPECT_EQ(tracker_.classes().at(0), Activity::Idle);
}

TEST_F(TrackerTest, ThrottlingStartsAndEndsWithTheHarmfulBits) {
  const auto with_reasons = [](std::uint64_t reasons) {
    gpu::Device d = device(0, 95, {process(100, 30000)});
    d.sample.clock_event_reasons = reasons;
    return snapshot({d});
  };
  observe(with_reasons(0x1 | 0x4), kT0);          // idle + software power cap: normal
  observe(with_reasons(0x40 | 0x4), kT0 + 10 * kS);  // HW thermal slowdown starts
  observe(with_reasons(0x40), kT0 + 20 * kS);        // still HW thermal: no new event
  observe(with_reasons(0x4), kT0 + 30 * kS);         // over
  observe(with_reasons(0x0), kT0 + 40 * kS);

  const auto starts = events("throttle-start");
  ASSERT_EQ(starts.size(), 1U);
  EXPECT_EQ(starts[0].ts_ms, kT0 + 10 * kS);
  EXPECT_EQ(starts[0].gpu, 0U);
  EXPECT_EQ(starts[0].detail, "HW thermal");
  const auto ends = events("throttle-end");
  ASSERT_EQ(ends.size(), 1U);
  EXPECT_EQ(ends[0].ts_ms, kT0 + 30 * kS);
  EXPECT_EQ(ends[0].detail, "HW thermal");

  // Slowed clocks are a fault while they last.
  const auto s = spans(0);
  ASSERT_EQ(s.size(), 3U);
  EXPECT_EQ(span(s[0]), std::make_tuple(Activity::Busy, kT0, kT0 + 10 * kS));
  EXPECT_EQ(span(s[1]), std::make_tuple(Activity::Fault, kT0 + 10 * kS, kT0 + 30 * kS));
  EXPECT_EQ(span(s[2]), std::make_tuple(Activity::Busy, kT0 + 30 * kS, kT0 + 40 * kS));
  const auto faults = events("fault");
  ASSERT_EQ(faults.size(), 1U);
  EXPECT_NE(faults[0].detail.find("HW thermal"), std::string::npos) << faults[0].detail;
  const auto cleared = events("fault-cleared");
  ASSERT_EQ(cleared.size(), 1U);
  EXPECT_EQ(cleared[0].ts_ms, kT0 + 30 * kS);
}

TEST_F(TrackerTest, EachXidIsOneEvent) {
  gpu::Device d = device(1, 95);
  d.new_xids = {48, 79};
  gpu::Device none = device(0, 95);
  observe(snapshot({none, d}), kT0);
  d.new_xids.clear();
  d.last_xid = 79;  // seen before: not an event again
  observe(snapshot({none, d}), kT0 + kS);
  const auto xids = events("xid");
  ASSERT_EQ(xids.size(), 2U);
  EXPECT_EQ(xids[0].gpu, 1U);
  EXPECT_EQ(xids[0].detail, "XID 48");
  EXPECT_EQ(xids[1].detail, "XID 79");
  EXPECT_EQ(xids[1].ts_ms, kT0);
}

TEST_F(TrackerTest, PowerBrakeAndHwSlowdownAreHarmfulToo) {
  gpu::Device d = device(0, 95);
  d.sample.clock_event_reasons = 0x80 | 0x8;
  observe(snapshot({d}), kT0);
  const auto starts = events("throttle-start");
  ASSERT_EQ(starts.size(), 1U);
  EXPECT_NE(starts[0].detail.find("power brake"), std::string::npos) << starts[0].detail;
  EXPECT_NE(starts[0].detail.find("HW slowdown"), std::string::npos) << starts[0].detail;
}

TEST_F(TrackerTest, ALostGpuGivesALostEventAndTheFaultClass) {
  observe(snapshot({device(0, 0), device(1, 80)}), kT0);
  gpu::Device lost = device(0, 0);
  lost.sample = {};
  lost.lost = "GPU has fallen off the bus";
  observe(snapshot({lost, device(1, 80)}), kT0 + 10 * kS);
  observe(snapshot({lost, device(1, 80)}), kT0 + 20 * kS);
  observe(snapshot({device(0, 0), device(1, 80)}), kT0 + 30 * kS);

  const auto lost_events = events("lost");
  ASSERT_EQ(lost_events.size(), 1U);
  EXPECT_EQ(lost_events[0].ts_ms, kT0 + 10 * kS);
  EXPECT_EQ(lost_events[0].gpu, 0U);
  EXPECT_NE(lost_events[0].detail.find("fallen off the bus"), std::string::npos) << lost_events[0].detail;
  EXPECT_TRUE(events("fault").empty());
  const auto cleared = events("fault-cleared");
  ASSERT_EQ(cleared.size(), 1U);
  EXPECT_EQ(cleared[0].ts_ms, kT0 + 30 * kS);

  const auto s = spans(0);
  ASSERT_EQ(s.size(), 3U);
  EXPECT_EQ(span(s[0]), std::make_tuple(Activity::Idle, kT0, kT0 + 10 * kS));
  EXPECT_EQ(span(s[1]), std::make_tuple(Activity::Fault, kT0 + 10 * kS, kT0 + 30 * kS));
  EXPECT_EQ(span(s[2]), std::make_tuple(Activity::Idle, kT0 + 30 * kS, kT0 + 30 * kS));
  // The other GPU is untouched.
  const auto other = spans(1);
  ASSERT_EQ(other.size(), 1U);
  EXPECT_EQ(span(other[0]), std::make_tuple(Activity::Busy, kT0, kT0 + 30 * kS));
}

TEST_F(TrackerTest, AGpuLostFromTheFirstSampleIsReportedAtOnce) {
  gpu::Device lost;
  lost.id.index = 3;
  lost.lost = "GPU is lost";
  observe(snapshot({lost}), kT0);
  EXPECT_EQ(tracker_.classes(), (std::map<unsigned, Activity>{{3, Activity::Fault}}));
  const auto lost_events = events("lost");
  ASSERT_EQ(lost_events.size(), 1U);
  EXPECT_EQ(lost_events[0].gpu, 3U);
}

TEST(ProcessCommand, PrefersTheCommandLineOverTheName) {
  gpu::GpuProcess p;
  p.host.name = "python3";
  EXPECT_EQ(process_command(p), "python3");
  p.host.command_line = "";
  EXPECT_EQ(process_command(p), "python3");
  p.host.command_line = "python3 train.py --epochs 3";
  EXPECT_EQ(process_command(p), "python3 train.py --epochs 3");
  EXPECT_EQ(process_command(gpu::GpuProcess{}), "");
}

TEST_F(TrackerTest, ASteadyProcessIsSampledOnChangeAndOnceAMinute) {
  // Read every 5 s for 3 minutes; the memory grows once, at 100 s.
  for (long long t = 0; t <= 180; t += 5) {
    observe(snapshot({device(0, 90, {process(100, t < 100 ? 30000 : 31000)})}), kT0 + t * kS);
  }
  auto samples = read().process_samples(kAll, {});
  ASSERT_TRUE(samples.ok());
  std::vector<long long> at;
  for (const auto& s : *samples) at.push_back((s.ts_ms - kT0) / kS);
  EXPECT_EQ(at, (std::vector<long long>{0, 60, 100, 160}));
  EXPECT_EQ(samples->back().mem_used_mib, 31000);
}

// Per-process utilization is recorded with the model's contract (NULL unknown, 0 idle), and a
// process whose utilization becomes readable is a change: written at once, not a minute later, so
// the store never leaves "unknown" standing for a time the process was known to be idle.
TEST_F(TrackerTest, PerProcessUtilizationIsRecordedAndUnknownToIdleIsAChange) {
  auto at = [&](long long t, std::optional<unsigned> sm, std::optional<unsigned> mem) {
    auto p = process(100, 6144);
    p.sm_util_pct = sm;
    p.mem_util_pct = mem;
    observe(snapshot({device(0, 90, {p})}), kT0 + t * kS);
  };
  at(0, std::nullopt, std::nullopt);
  at(5, std::nullopt, std::nullopt);  // unchanged: not written
  at(10, 0U, 0U);                     // unknown -> idle
  at(15, 0U, 0U);
  at(20, 0U, 7U);                     // memory utilization alone changes
  at(25, 92U, 7U);
  auto samples = read().process_samples(kAll, {});
  ASSERT_TRUE(samples.ok());
  std::vector<std::tuple<long long, std::optional<long long>, std::optional<long long>>> got;
  for (const auto& s : *samples) got.emplace_back((s.ts_ms - kT0) / kS, s.sm_util_pct, s.mem_util_pct);
  using Row = std::tuple<long long, std::optional<long long>, std::optional<long long>>;
  EXPECT_EQ(got, (std::vector<Row>{Row{0, std::nullopt, std::nullopt}, Row{10, 0, 0}, Row{20, 0, 7}, Row{25, 92, 7}}));
}

// H4 in the store: a process busy only on the encoder, decoder, JPEG or OFA engine is recorded as
// such (other_util_pct, the busiest of them; schema 3), with the same rule: a row when it changes.
// The old tracker wrote SM and memory only, and an NVENC job read idle in its whole history.
TEST_F(TrackerTest, TheOtherEnginesAreRecordedAsTheirBusiestAndAChangeIsARow) {
  auto at = [&](long long t, std::optional<unsigned> enc, std::optional<unsigned> jpg) {
    auto p = process(100, 6144);
    p.sm_util_pct = 0;
    p.mem_util_pct = 0;
    p.enc_util_pct = enc;
    p.dec_util_pct = enc ? std::optional<unsigned>(0U) : std::nullopt;
    p.jpg_util_pct = jpg;
    observe(snapshot({device(0, 90, {p})}), kT0 + t * kS);
  };
  at(0, std::nullopt, std::nullopt);  // no engine known: NULL
  at(5, 0U, std::nullopt);            // unknown -> idle: a change
  at(10, 0U, std::nullopt);           // unchanged: not written
  at(15, 55U, std::nullopt);          // the encoder alone gets busy
  at(20, 10U, 30U);                   // the busiest of them
  auto samples = read().process_samples(kAll, {});
  ASSERT_TRUE(samples.ok());
  using Row = std::tuple<long long, std::optional<long long>, std::optional<long long>>;
  std::vector<Row> got;
  for (const auto& s : *samples) got.emplace_back((s.ts_ms - kT0) / kS, s.sm_util_pct, s.other_util_pct);
  EXPECT_EQ(got, (std::vector<Row>{Row{0, 0, std::nullopt}, Row{5, 0, 0}, Row{15, 0, 55}, Row{20, 0, 30}}));
}

// The proof reap needs that a listing is the process's own (its third review's H1): the agent saw
// the listing begin while the process had the pid. A process started (whole seconds: before
// start + 1 s) before a full listing that did not show it, and listed after, is proven; one listed
// from the first sample after it started, after a gap, or after a failed listing is not.
TEST_F(TrackerTest, AListingIsProvenTheProcesssOnlyWhenASampleAfterItStartedDidNotListIt) {
  const long long start = kT0 / 1000;  // started in the second of kT0
  observe(snapshot({device(0, 0), device(1, 0)}), kT0 + 2 * kS);  // both started, neither listed yet
  observe(snapshot({device(0, 0, {process(100, 4096, start)}), device(1, 0)}), kT0 + 7 * kS);
  // GPU 1: listed at the first sample after it started (a stale context's may be): unproven.
  observe(snapshot({device(0, 0, {process(100, 4096, start)}), device(1, 0, {process(200, 4096, kT0 / 1000 + 8)})}),
          kT0 + 12 * kS);
  const auto spans = process_spans();
  ASSERT_EQ(spans.size(), 2U);
  for (const auto& s : spans) EXPECT_EQ(s.listed_after_start, s.pid == 100) << s.pid;
}

TEST_F(TrackerTest, NoListingIsProvenAcrossAGapOrAFailedListing) {
  const long long start = kT0 / 1000;
  observe(snapshot({device(0, 0), device(1, 0)}), kT0 + 2 * kS);
  // 40 s nobody sampled (a stalled or stopped agent): the pid may have changed hands meanwhile.
  observe(snapshot({device(0, 0, {process(100, 4096, start)}), device(1, 0)}), kT0 + 42 * kS);
  // GPU 1's listing failed at 42 s: a process missing from it was not shown to be unlisted.
  gpu::Device failed = device(1, 0);
  failed.errors.push_back(gpu::ReadError{"compute_processes", "Unknown Error (NVML_ERROR_UNKNOWN)"});
  observe(snapshot({device(0, 0, {process(100, 4096, start)}), failed}), kT0 + 47 * kS);
  observe(snapshot({device(0, 0, {process(100, 4096, start)}), device(1, 0, {process(200, 4096, start)})}), kT0 + 52 * kS);
  const auto spans = process_spans();
  ASSERT_EQ(spans.size(), 2U);
  for (const auto& s : spans) EXPECT_FALSE(s.listed_after_start) << s.pid;
  // A fast sample (no listing) between two process samples neither proves nor breaks anything.
  observe(snapshot({device(2, 0)}), kT0 + 53 * kS);
  observe(snapshot({device(2, 0)}), kT0 + 54 * kS, false);
  observe(snapshot({device(2, 0, {process(300, 4096, start)})}), kT0 + 58 * kS);
  for (const auto& s : process_spans()) EXPECT_EQ(s.listed_after_start, s.pid == 300) << s.pid;
}

}  // namespace
}  // namespace tarmac::agent

namespace tarmac::agent::test_support {
namespace {

// A board in MIG mode with two MIG devices (GPU instances 7 and 8), a process on the first.
gpu::Device mig_board(bool process_on_first) {
  gpu::Device d = device(0, 0, process_on_first ? std::vector{process(100, 3000)} : std::vector<gpu::GpuProcess>{});
  d.sample.util_gpu_pct.reset();
  d.modes.mig_mode_current = true;
  for (unsigned k = 0; k < 2; ++k) {
    gpu::MigDevice m;
    m.index = k;
    m.gpu_instance_id = 7 + k;
    m.compute_instance_id = 0;
    m.profile = "1g.5gb";
    m.slices = 1;
    m.mem_total_bytes = 4864 * util::kMiB;
    d.mig.push_back(m);
  }
  if (process_on_first) d.processes[0].mig = 0U;
  return d;
}

TEST_F(TrackerTest, EachMigDeviceHasItsOwnClassSpansInTheStore) {
  for (int i = 0; i < 3; ++i) observe(snapshot({mig_board(true)}), kT0 + i * 10 * kS);
  observe(snapshot({mig_board(false)}), kT0 + 30 * kS);  // the process left
  auto reader = read();
  auto spans = reader.mig_activity(kAll);
  ASSERT_TRUE(spans.ok()) << spans.error().message;
  ASSERT_EQ(spans->size(), 3U);
  const auto& busy = (*spans)[0];
  EXPECT_EQ(std::tie(busy.gpu, busy.gpu_instance, busy.profile, busy.slices), std::make_tuple(0U, 7U, std::string("1g.5gb"), 1U));
  EXPECT_EQ(busy.activity, Activity::Busy);  // in use, no GPM: from process presence
  EXPECT_FALSE(busy.measured);
  EXPECT_EQ(std::tie(busy.start_ms, busy.end_ms), std::make_tuple(kT0, kT0 + 30 * kS));
  const auto& idle_after = (*spans)[1];
  EXPECT_EQ(std::tie(idle_after.gpu_instance, idle_after.activity), std::make_tuple(7U, Activity::Idle));
  EXPECT_EQ(idle_after.start_ms, kT0 + 30 * kS);
  const auto& other = (*spans)[2];
  EXPECT_EQ(std::tie(other.gpu_instance, other.activity), std::make_tuple(8U, Activity::Idle));
  EXPECT_TRUE(other.measured);  // an empty slice is known idle
  EXPECT_EQ(std::tie(other.start_ms, other.end_ms), std::make_tuple(kT0, kT0 + 30 * kS));
  // The board: as active as its most active slice while the process ran, never holding from no utilization.
  EXPECT_EQ(sample_classes(0), (std::vector<Activity>{Activity::Busy, Activity::Busy, Activity::Busy, Activity::Idle}));
}

}  // namespace
}  // namespace tarmac::agent::test_support
