#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tarmac/report/format.hpp"
#include "tarmac/report/report.hpp"

namespace tarmac::report {
namespace {

using gpu::Activity;

constexpr long long kH = 3600LL * 1000;  // one hour in ms
constexpr long long kDay = 24 * kH;
constexpr long long kD = 1736121600000;  // Monday 2025-01-06 00:00:00 UTC

store::ActivitySpan span(unsigned gpu, Activity a, double start_h, double end_h) {
  return {gpu, a, kD + static_cast<long long>(start_h * kH), kD + static_cast<long long>(end_h * kH)};
}

store::ProcessSpan proc(unsigned gpu, unsigned pid, double first_h, double last_h, const std::string& user,
                        const std::string& command, const std::string& container = "", const std::string& job = "") {
  store::ProcessSpan p;
  p.gpu = gpu;
  p.pid = pid;
  p.first_ms = kD + static_cast<long long>(first_h * kH);
  p.last_ms = kD + static_cast<long long>(last_h * kH);
  p.user = user;
  p.command = command;
  p.container = container;
  p.slurm_job = job;
  return p;
}

store::Rollup hour(unsigned gpu, long long ts_ms, long long samples, double util_avg, double mem_avg = 0) {
  store::Rollup r;
  r.ts_ms = ts_ms;
  r.gpu = gpu;
  r.samples = samples;
  r.util_avg = util_avg;
  r.mem_used_mib_avg = mem_avg;
  return r;
}

std::vector<store::GpuInfo> two_gpus() {
  return {{0, "GPU-0000", "NVIDIA H100 80GB HBM3", "00000000:07:00.0", 81559},
          {1, "GPU-1111", "NVIDIA H100 80GB HBM3", "00000000:0F:00.0", 81559}};
}

ReportOptions day(std::optional<double> price = std::nullopt) { return {{kD, kD + kDay}, price, {}}; }

// (gpu, start, end) of an idle window, for one-line comparisons.
std::tuple<unsigned, long long, long long> window(const IdleWindow& w) { return {w.gpu, w.start_ms, w.end_ms}; }

TEST(Format, Money) {
  EXPECT_EQ(format_money(1234.5), "$1,234.50");
  EXPECT_EQ(format_money(0.004), "$0.00");
  EXPECT_EQ(format_money(0), "$0.00");
  EXPECT_EQ(format_money(999.999), "$1,000.00");
  EXPECT_EQ(format_money(1234567.891), "$1,234,567.89");
  EXPECT_EQ(format_money(100), "$100.00");
  EXPECT_EQ(format_money(-42.5), "-$42.50");
}

TEST(Format, Hours) {
  EXPECT_EQ(format_hours(0), "0 h");
  EXPECT_EQ(format_hours(12.34), "12.3 h");
  EXPECT_EQ(format_hours(168), "168.0 h");
  // Short ranges in minutes or seconds, not "0.0 h".
  EXPECT_EQ(format_hours(0.5), "30 min");
  EXPECT_EQ(format_hours(0.96), "1.0 h");
  EXPECT_EQ(format_hours(40.0 / 3600), "40 s");
  EXPECT_EQ(format_hours(59.7 / 3600), "1 min");
  EXPECT_EQ(format_hours(-0.25), "-15 min");
}

TEST(Format, TimesAreUtc) {
  constexpr long long kMonday9 = 1736154000000;  // 2025-01-06 09:00:00 UTC
  EXPECT_EQ(format_utc(kMonday9), "2025-01-06 09:00");
  EXPECT_EQ(format_iso(kMonday9), "2025-01-06T09:00:00Z");
  EXPECT_EQ(format_day(kMonday9), "Mon 01-06");
  EXPECT_EQ(format_iso(kMonday9 + 61 * 1000 + 999), "2025-01-06T09:01:01Z");  // milliseconds dropped
  EXPECT_EQ(format_day(kMonday9 + 6 * kDay), "Sun 01-12");
}

TEST(Compute, TwoGpusOverADayGiveHoursAndIdleCost) {
  ReportInput in;
  in.gpus = two_gpus();
  in.activity = {span(0, Activity::Busy, 0, 8), span(0, Activity::Idle, 8, 24), span(1, Activity::Idle, 0, 24)};
  const Report r = compute(in, day(2.5));

  EXPECT_EQ(r.since_ms, kD);
  EXPECT_EQ(r.until_ms, kD + kDay);
  ASSERT_EQ(r.gpus.size(), 2U);
  const GpuReport& g0 = r.gpus[0];
  EXPECT_EQ(g0.gpu, 0U);
  EXPECT_EQ(g0.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g0.uuid, "GPU-0000");
  EXPECT_DOUBLE_EQ(g0.hours.of(Activity::Busy), 8.0);
  EXPECT_DOUBLE_EQ(g0.hours.of(Activity::Idle), 16.0);
  EXPECT_DOUBLE_EQ(g0.hours.recorded(), 24.0);
  EXPECT_DOUBLE_EQ(g0.hours.unrecorded, 0.0);
  ASSERT_TRUE(g0.idle_cost.has_value());
  EXPECT_DOUBLE_EQ(*g0.idle_cost, 16 * 2.5);
  EXPECT_DOUBLE_EQ(g0.holding_cost.value_or(-1), 0.0);
  const GpuReport& g1 = r.gpus[1];
  EXPECT_EQ(g1.uuid, "GPU-1111");
  EXPECT_DOUBLE_EQ(g1.hours.of(Activity::Idle), 24.0);
  EXPECT_DOUBLE_EQ(g1.hours.of(Activity::Busy), 0.0);
  EXPECT_DOUBLE_EQ(g1.hours.unrecorded, 0.0);
  EXPECT_DOUBLE_EQ(g1.idle_cost.value_or(-1), 24 * 2.5);

  EXPECT_DOUBLE_EQ(r.fleet.of(Activity::Busy), 8.0);
  EXPECT_DOUBLE_EQ(r.fleet.idle(), 40.0);
  EXPECT_DOUBLE_EQ(r.fleet.unrecorded, 0.0);
  EXPECT_DOUBLE_EQ(r.idle_cost.value_or(-1), 40 * 2.5);
  EXPECT_DOUBLE_EQ(r.holding_cost.value_or(-1), 0.0);
  EXPECT_EQ(r.price_per_gpu_hour, 2.5);
  // No hourly rollups: no utilization to report, rather than 0 %.
  EXPECT_FALSE(g0.util_avg_pct.has_value());
  EXPECT_FALSE(r.fleet_util_avg_pct.has_value());
}

TEST(Compute, AMigDevicesIdleHoursCostItsShareOfTheBoard) {
  ReportInput in;
  using A = gpu::Activity;
  // GPU 4: a 3g slice idle 10 h and busy 14 h (from processes); a 1g slice idle all day (GPM); a
  // span that starts before the range counts from its start.
  in.gpus = {{4, "GPU-4", "NVIDIA H200", "00000000:9A:00.0", 143771}};
  in.activity = {span(4, A::Busy, 0, 24)};
  in.mig = {{4, 2, "3g.71gb", 3, A::Idle, true, kD, kD + 10 * kH},
            {4, 2, "3g.71gb", 3, A::Busy, false, kD + 10 * kH, kD + kDay},
            {4, 9, "1g.18gb", 1, A::Idle, true, kD - 5 * kH, kD + kDay},
            {6, 1, "4g.71gb", 4, A::ReservedIdle, true, kD, kD + 7 * kH}};
  const Report r = compute(in, day(7.0));
  ASSERT_EQ(r.mig.size(), 3u);
  EXPECT_EQ((std::pair{r.mig[0].gpu, r.mig[0].gpu_instance}), (std::pair{4U, 2U}));
  EXPECT_DOUBLE_EQ(r.mig[0].hours.idle(), 10);
  EXPECT_DOUBLE_EQ(r.mig[0].unmeasured_hours, 14);
  EXPECT_DOUBLE_EQ(r.mig[0].idle_slice_hours, 10 * 3 / 7.0);
  EXPECT_DOUBLE_EQ(r.mig[1].idle_slice_hours, 24 / 7.0);     // clipped to the range
  EXPECT_DOUBLE_EQ(r.mig[2].idle_slice_hours, 7 * 4 / 7.0);  // reserved-idle is idle
  EXPECT_DOUBLE_EQ(r.mig_idle_slice_hours, 30 / 7.0 + 24 / 7.0 + 4);
  ASSERT_TRUE(r.mig_idle_cost);
  EXPECT_NEAR(*r.mig_idle_cost, (30 / 7.0 + 24 / 7.0 + 4) * 7.0, 1e-9);
  EXPECT_NEAR(*r.mig[2].idle_cost, 28.0, 1e-9);
  // The same GPU instance id with another profile later is another row, at its own share.
  in.mig.push_back({6, 1, "3g.71gb", 3, A::Idle, true, kD + 7 * kH, kD + 14 * kH});
  const Report two = compute(in, day(7.0));
  ASSERT_EQ(two.mig.size(), 4u);
  EXPECT_DOUBLE_EQ(two.mig_idle_slice_hours - r.mig_idle_slice_hours, 7 * 3 / 7.0);
  // Asked for other GPUs: none of these.
  ReportOptions only0 = day(7.0);
  only0.gpus = {0};
  EXPECT_TRUE(compute(in, only0).mig.empty());
  const std::string text = render_text(r, false);
  EXPECT_NE(text.find("GPU 4   GI 2   3g.71gb    3 of 7 slices: 10.0 h idle, 14.0 h busy, idle $30.00"), std::string::npos) << text;
  EXPECT_NE(text.find("from process presence"), std::string::npos);
  EXPECT_NE(render_json(r).find("\"idle_slice_hours\""), std::string::npos);
}

TEST(Compute, ReservedIdleCostsLikeIdle) {
  ReportInput in;
  in.activity = {span(0, Activity::ReservedIdle, 0, 6), span(0, Activity::Idle, 6, 10), span(0, Activity::Holding, 10, 13),
                 span(0, Activity::Busy, 13, 24)};
  const Report r = compute(in, day(3.0));
  ASSERT_EQ(r.gpus.size(), 1U);  // known from its spans alone
  EXPECT_DOUBLE_EQ(r.gpus[0].hours.idle(), 10.0);
  EXPECT_DOUBLE_EQ(r.gpus[0].idle_cost.value_or(-1), 30.0);
  EXPECT_DOUBLE_EQ(r.gpus[0].holding_cost.value_or(-1), 9.0);
  EXPECT_DOUBLE_EQ(r.idle_cost.value_or(-1), 30.0);
  EXPECT_DOUBLE_EQ(r.holding_cost.value_or(-1), 9.0);
}

TEST(Compute, WithoutAPriceThereAreNoCosts) {
  ReportInput in;
  in.activity = {span(0, Activity::Idle, 0, 24)};
  const Report r = compute(in, day());
  ASSERT_EQ(r.gpus.size(), 1U);
  EXPECT_FALSE(r.gpus[0].idle_cost.has_value());
  EXPECT_FALSE(r.gpus[0].holding_cost.has_value());
  EXPECT_FALSE(r.idle_cost.has_value());
  EXPECT_FALSE(r.holding_cost.has_value());
  EXPECT_FALSE(r.price_per_gpu_hour.has_value());
}

TEST(Compute, SpansAreClippedAtTheRangeEdges) {
  ReportInput in;
  in.activity = {span(0, Activity::Busy, -2, 2),     // 2 h inside
                 span(0, Activity::Idle, 2, 23),     // 21 h
                 span(0, Activity::Starved, 23, 26),  // 1 h inside
                 span(0, Activity::Busy, 30, 40),    // after the range: nothing
                 span(0, Activity::Fault, -10, -5)};  // before: nothing
  const Report r = compute(in, day(1.0));
  ASSERT_EQ(r.gpus.size(), 1U);
  const ClassHours& h = r.gpus[0].hours;
  EXPECT_DOUBLE_EQ(h.of(Activity::Busy), 2.0);
  EXPECT_DOUBLE_EQ(h.of(Activity::Idle), 21.0);
  EXPECT_DOUBLE_EQ(h.of(Activity::Starved), 1.0);
  EXPECT_DOUBLE_EQ(h.of(Activity::Fault), 0.0);
  EXPECT_DOUBLE_EQ(h.recorded(), 24.0);
  EXPECT_DOUBLE_EQ(h.unrecorded, 0.0);
  // Windows are clipped too.
  ASSERT_EQ(r.idle_windows.size(), 1U);
  EXPECT_EQ(window(r.idle_windows[0]), std::make_tuple(0U, kD + 2 * kH, kD + 23 * kH));
}

TEST(Compute, AGapInTheSpansIsUnrecorded) {
  ReportInput in;
  in.gpus = two_gpus();
  in.activity = {span(0, Activity::Busy, 0, 8), span(0, Activity::Idle, 10, 24),  // 2 h nobody recorded
                 span(1, Activity::Idle, 0, 12)};                                 // nothing after noon
  const Report r = compute(in, day(2.0));
  ASSERT_EQ(r.gpus.size(), 2U);
  EXPECT_DOUBLE_EQ(r.gpus[0].hours.recorded(), 22.0);
  EXPECT_DOUBLE_EQ(r.gpus[0].hours.unrecorded, 2.0);
  EXPECT_DOUBLE_EQ(r.gpus[1].hours.unrecorded, 12.0);
  EXPECT_DOUBLE_EQ(r.fleet.unrecorded, 14.0);
  // Unrecorded time is not idle time: it costs nothing.
  EXPECT_DOUBLE_EQ(r.gpus[1].idle_cost.value_or(-1), 24.0);
}

TEST(Compute, AGpuWithNoSpansIsAllUnrecorded) {
  ReportInput in;
  in.gpus = two_gpus();
  in.activity = {span(0, Activity::Busy, 0, 24)};
  const Report r = compute(in, day());
  ASSERT_EQ(r.gpus.size(), 2U);
  EXPECT_DOUBLE_EQ(r.gpus[1].hours.recorded(), 0.0);
  EXPECT_DOUBLE_EQ(r.gpus[1].hours.unrecorded, 24.0);
}

TEST(Compute, IdleWindowsMergeTouchingIdleAndReservedIdleSpansLongestFirst) {
  ReportInput in;
  in.activity = {span(0, Activity::Idle, 6, 7),  // out of order on purpose: compute sorts
                 span(0, Activity::Idle, 0, 2),         span(0, Activity::ReservedIdle, 2, 5),
                 span(0, Activity::Busy, 5, 6),         span(1, Activity::Idle, 1, 5),
                 span(1, Activity::Starved, 5, 8),      span(1, Activity::ReservedIdle, 9, 10.5)};
  const Report r = compute(in, day());
  ASSERT_EQ(r.idle_windows.size(), 4U);
  EXPECT_EQ(window(r.idle_windows[0]), std::make_tuple(0U, kD, kD + 5 * kH));
  EXPECT_EQ(window(r.idle_windows[1]), std::make_tuple(1U, kD + kH, kD + 5 * kH));
  EXPECT_EQ(window(r.idle_windows[2]), std::make_tuple(1U, kD + 9 * kH, kD + 10 * kH + kH / 2));
  EXPECT_EQ(window(r.idle_windows[3]), std::make_tuple(0U, kD + 6 * kH, kD + 7 * kH));
}

TEST(Compute, AtMostTenIdleWindows) {
  ReportInput in;
  for (int h = 0; h < 24; h += 2) {  // 12 separate idle hours
    in.activity.push_back(span(0, Activity::Idle, h, h + 1));
    in.activity.push_back(span(0, Activity::Busy, h + 1, h + 2));
  }
  in.activity.push_back(span(1, Activity::Idle, 0, 3));
  const Report r = compute(in, day());
  ASSERT_EQ(r.idle_windows.size(), 10U);
  EXPECT_EQ(window(r.idle_windows[0]), std::make_tuple(1U, kD, kD + 3 * kH));
  for (std::size_t i = 1; i < r.idle_windows.size(); ++i) {
    EXPECT_EQ(r.idle_windows[i].end_ms - r.idle_windows[i].start_ms, kH);
  }
}

TEST(Compute, HoldingIncidentsListTheProcessesSeenThenLongestFirst) {
  ReportInput in;
  in.gpus = two_gpus();
  in.activity = {span(0, Activity::Busy, 0, 1), span(0, Activity::Holding, 1, 3), span(0, Activity::Idle, 3, 24),
                 span(1, Activity::Idle, 0, 10), span(1, Activity::Holding, 10, 14), span(1, Activity::Idle, 14, 24)};
  in.processes = {proc(0, 1, 0, 4, "alice", "python train.py"),   // overlaps GPU 0's incident
                  proc(0, 2, 5, 6, "bob", "./bench"),             // later: not part of it
                  proc(1, 3, 1, 2, "carol", "jupyter"),           // another GPU at that time
                  proc(1, 4, 9, 12, "dave", "python serve.py")};  // GPU 1's incident
  const Report r = compute(in, day(2.0));
  ASSERT_EQ(r.holding.size(), 2U);
  const HoldingIncident& longest = r.holding[0];
  EXPECT_EQ(longest.gpu, 1U);
  EXPECT_EQ(longest.start_ms, kD + 10 * kH);
  EXPECT_EQ(longest.end_ms, kD + 14 * kH);
  ASSERT_EQ(longest.processes.size(), 1U);
  EXPECT_EQ(longest.processes[0].pid, 4U);
  const HoldingIncident& other = r.holding[1];
  EXPECT_EQ(other.gpu, 0U);
  EXPECT_EQ(other.start_ms, kD + 1 * kH);
  EXPECT_EQ(other.end_ms, kD + 3 * kH);
  ASSERT_EQ(other.processes.size(), 1U);
  EXPECT_EQ(other.processes[0].pid, 1U);
  EXPECT_EQ(other.processes[0].user, "alice");

  EXPECT_DOUBLE_EQ(r.fleet.of(Activity::Holding), 6.0);
  EXPECT_DOUBLE_EQ(r.holding_cost.value_or(-1), 12.0);
  EXPECT_DOUBLE_EQ(r.gpus[0].holding_cost.value_or(-1), 4.0);
}

TEST(Compute, WellKnownHoldersAreNamedAndTheirHoursAddedUp) {
  ReportInput in;
  in.gpus = two_gpus();
  in.activity = {span(0, Activity::Holding, 0, 2), span(0, Activity::Busy, 2, 3), span(0, Activity::Holding, 3, 4),
                 span(1, Activity::Holding, 0, 5)};
  auto kernel = proc(0, 1, 0, 24, "bob", "/usr/bin/python3 -m ipykernel_launcher -f /home/bob/kernel-1.json");
  kernel.mem_used_mib_max = 20000;
  auto helper = proc(0, 2, 0, 24, "bob", "python helper.py");  // smaller: not the holder
  helper.mem_used_mib_max = 100;
  auto plain = proc(1, 3, 0, 24, "carol", "python train.py");  // not a well-known kind
  plain.mem_used_mib_max = 30000;
  in.processes = {kernel, helper, plain};
  const Report r = compute(in, day());
  ASSERT_EQ(r.holding.size(), 3U);
  for (const auto& h : r.holding) {
    if (h.gpu == 0) {
      EXPECT_EQ(h.holder, "Jupyter kernel");
      EXPECT_EQ(h.holder_user, "bob");
    } else {
      EXPECT_EQ(h.holder, "");
    }
  }
  ASSERT_EQ(r.holders.size(), 1U);
  EXPECT_EQ(r.holders[0].holder, "Jupyter kernel");
  EXPECT_EQ(r.holders[0].user, "bob");
  EXPECT_DOUBLE_EQ(r.holders[0].gpu_hours, 3.0);  // both of GPU 0's runs
  EXPECT_EQ(r.holders[0].incidents, 2U);
  const std::string text = render_text(r, false);
  EXPECT_NE(text.find("Jupyter kernel of bob: 3.0 h in 2 incidents"), std::string::npos) << text;
  EXPECT_NE(text.find("for 2.0 h: an idle Jupyter kernel of bob"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(render_json(r));
  EXPECT_EQ(j["holders"][0]["kind"], "Jupyter kernel");
  EXPECT_DOUBLE_EQ(j["holders"][0]["gpu_hours"].get<double>(), 3.0);
  EXPECT_TRUE(j["holding"][0]["holder"].is_null());  // GPU 1's, the longest: a plain process
}

TEST(Compute, ConsumersAreSortedByGpuHours) {
  ReportInput in;
  in.processes = {proc(0, 1, 0, 3, "alice", "python train.py", "docker:abc", "101"),
                  proc(1, 2, 0, 1, "alice", "python train.py", "", "101"),
                  proc(1, 3, 2, 7, "bob", "./bench"),
                  proc(0, 4, 0, 0.5, "carol", "jupyter"),
                  proc(0, 5, 10, 12, "", ""),                   // /proc could not say
                  proc(0, 6, -5, -1, "dave", "old job"),        // before the range
                  proc(1, 7, 22.5, 27, "erin", "late job")};    // 1.5 h inside
  const Report r = compute(in, day());

  ASSERT_EQ(r.users.size(), 5U);
  EXPECT_EQ(r.users[0].name, "bob");
  EXPECT_DOUBLE_EQ(r.users[0].gpu_hours, 5.0);
  EXPECT_EQ(r.users[1].name, "alice");
  EXPECT_DOUBLE_EQ(r.users[1].gpu_hours, 4.0);
  EXPECT_EQ(r.users[1].processes, 2U);
  EXPECT_EQ(r.users[2].name, "(unknown)");
  EXPECT_DOUBLE_EQ(r.users[2].gpu_hours, 2.0);
  EXPECT_EQ(r.users[3].name, "erin");
  EXPECT_DOUBLE_EQ(r.users[3].gpu_hours, 1.5);
  EXPECT_EQ(r.users[4].name, "carol");
  EXPECT_DOUBLE_EQ(r.users[4].gpu_hours, 0.5);

  ASSERT_EQ(r.commands.size(), 5U);
  EXPECT_EQ(r.commands[0].name, "./bench");
  EXPECT_EQ(r.commands[1].name, "python train.py");
  EXPECT_EQ(r.commands[1].processes, 2U);

  ASSERT_EQ(r.containers.size(), 1U);  // processes outside containers are not a container
  EXPECT_EQ(r.containers[0].name, "docker:abc");
  EXPECT_DOUBLE_EQ(r.containers[0].gpu_hours, 3.0);
  ASSERT_EQ(r.slurm_jobs.size(), 1U);
  EXPECT_EQ(r.slurm_jobs[0].name, "101");
  EXPECT_DOUBLE_EQ(r.slurm_jobs[0].gpu_hours, 4.0);
  EXPECT_EQ(r.slurm_jobs[0].processes, 2U);
}

TEST(Compute, AtMostTenConsumersEach) {
  ReportInput in;
  for (unsigned i = 0; i < 12; ++i) {
    in.processes.push_back(proc(0, 100 + i, 0, 1 + i, "user" + std::to_string(i), "cmd" + std::to_string(i)));
  }
  const Report r = compute(in, day());
  ASSERT_EQ(r.users.size(), 10U);
  EXPECT_EQ(r.users[0].name, "user11");
  EXPECT_EQ(r.users[9].name, "user2");
  EXPECT_EQ(r.commands.size(), 10U);
}

store::JobSpan job(const std::string& id, unsigned gpu, double first_h, double last_h, const std::string& user = "",
                   const std::string& partition = "") {
  return {id, gpu, kD + static_cast<long long>(first_h * kH), kD + static_cast<long long>(last_h * kH), user, partition};
}

TEST(Compute, EachSlurmJobGetsTheClassesOfItsGpusWhileItHeldThemMostHeldIdleFirst) {
  ReportInput in;
  in.gpus = two_gpus();
  in.activity = {span(0, Activity::Busy, 0, 4), span(0, Activity::Holding, 4, 6), span(0, Activity::Idle, 6, 24),
                 span(1, Activity::ReservedIdle, 0, 10), span(1, Activity::Busy, 10, 12), span(1, Activity::Idle, 12, 24)};
  in.jobs = {job("busy", 0, 0, 5, "alice", "gpu"),   // 4 h busy, 1 h holding
             job("lunch", 1, 1, 10, "bob", "long"),  // 9 h reserved-idle
             job("lunch", 1, 10, 11),                // the same job again, a second span: 1 h busy
             job("late", 0, 23, 26),                 // runs past the range: clipped at 24 h
             job("gap", 1, 30, 31)};                 // outside the range
  const Report r = compute(in, day(2.0));
  ASSERT_EQ(r.jobs.size(), 3U);
  const JobUse& lunch = r.jobs[0];
  EXPECT_EQ(lunch.job, "lunch");
  EXPECT_EQ(lunch.user, "bob");
  EXPECT_EQ(lunch.partition, "long");
  EXPECT_EQ(lunch.gpus, (std::vector<unsigned>{1}));
  EXPECT_DOUBLE_EQ(lunch.hours.of(Activity::ReservedIdle), 9.0);
  EXPECT_DOUBLE_EQ(lunch.hours.of(Activity::Busy), 1.0);
  EXPECT_DOUBLE_EQ(lunch.held_idle(), 9.0);
  EXPECT_DOUBLE_EQ(lunch.gpu_hours(), 10.0);
  EXPECT_DOUBLE_EQ(lunch.idle_cost.value_or(-1), 18.0);
  EXPECT_EQ(lunch.first_ms, kD + 1 * kH);
  EXPECT_EQ(lunch.last_ms, kD + 11 * kH);
  EXPECT_EQ(r.jobs[1].job, "busy");
  EXPECT_DOUBLE_EQ(r.jobs[1].hours.of(Activity::Busy), 4.0);
  EXPECT_DOUBLE_EQ(r.jobs[1].held_idle(), 1.0);  // holding counts: memory held at 0 %
  EXPECT_EQ(r.jobs[2].job, "late");
  EXPECT_DOUBLE_EQ(r.jobs[2].gpu_hours(), 1.0);
  EXPECT_EQ(r.jobs[2].last_ms, kD + kDay);

  // A job held where no class was recorded: unrecorded, never idle.
  ReportInput gap;
  gap.jobs = {job("dark", 0, 2, 3)};
  const Report g = compute(gap, day());
  ASSERT_EQ(g.jobs.size(), 1U);
  EXPECT_DOUBLE_EQ(g.jobs[0].hours.unrecorded, 1.0);
  EXPECT_DOUBLE_EQ(g.jobs[0].held_idle(), 0.0);
  EXPECT_FALSE(g.jobs[0].idle_cost.has_value());

  // The GPU filter applies to jobs too; the renderings carry them.
  ReportOptions only1 = day();
  only1.gpus = {1};
  EXPECT_EQ(compute(in, only1).jobs.size(), 1U);
  const auto j = nlohmann::json::parse(render_jobs_json(r));
  EXPECT_EQ(j["jobs"][0]["job"], "lunch");
  EXPECT_DOUBLE_EQ(j["jobs"][0]["held_idle_gpu_hours"].get<double>(), 9.0);
  EXPECT_TRUE(j["jobs"][2]["user"].is_null());
  EXPECT_EQ(nlohmann::json::parse(render_json(r))["jobs"].size(), 3U);
  const std::string text = render_jobs_text(r, false);
  EXPECT_LT(text.find("lunch"), text.find("busy")) << text;
  EXPECT_NE(text.find("bob"), std::string::npos) << text;
  EXPECT_NE(render_text(r, false).find("Slurm jobs that held GPUs idle"), std::string::npos);
}

TEST(Compute, TheHeatMapHasOneRowPerUtcDayWithTheFleetsHourlyMean) {
  ReportInput in;
  in.gpus = two_gpus();
  in.hours = {hour(0, kD + 9 * kH, 60, 80, 1000), hour(1, kD + 9 * kH, 20, 0, 3000),
              hour(0, kD + kDay + 3 * kH, 60, 50, 2000),
              hour(0, kD + 2 * kDay, 60, 99)};  // at the range's end: outside
  const Report r = compute(in, {{kD, kD + 2 * kDay}, std::nullopt, {}});

  ASSERT_EQ(r.heat.size(), 2U);
  EXPECT_EQ(r.heat[0].day_start_ms, kD);
  EXPECT_EQ(r.heat[1].day_start_ms, kD + kDay);
  ASSERT_TRUE(r.heat[0].util_pct[9].has_value());
  EXPECT_DOUBLE_EQ(*r.heat[0].util_pct[9], 60.0);  // (80 x 60 + 0 x 20) / 80 samples
  ASSERT_TRUE(r.heat[1].util_pct[3].has_value());
  EXPECT_DOUBLE_EQ(*r.heat[1].util_pct[3], 50.0);
  for (std::size_t h = 0; h < 24; ++h) {
    EXPECT_EQ(r.heat[0].util_pct[h].has_value(), h == 9) << "day 0 hour " << h;
    EXPECT_EQ(r.heat[1].util_pct[h].has_value(), h == 3) << "day 1 hour " << h;
  }

  ASSERT_EQ(r.gpus.size(), 2U);
  EXPECT_DOUBLE_EQ(r.gpus[0].util_avg_pct.value_or(-1), 65.0);
  EXPECT_DOUBLE_EQ(r.gpus[0].mem_used_avg_mib.value_or(-1), 1500.0);
  EXPECT_DOUBLE_EQ(r.gpus[1].util_avg_pct.value_or(-1), 0.0);
  ASSERT_TRUE(r.fleet_util_avg_pct.has_value());
  EXPECT_NEAR(*r.fleet_util_avg_pct, (80.0 * 60 + 50.0 * 60) / 140, 1e-9);
}

TEST(Compute, TheHeatMapCoversWholeDaysAroundARangeThatStartsAtNoon) {
  ReportInput in;
  in.hours = {hour(0, kD + 9 * kH, 60, 80), hour(0, kD + kDay + 3 * kH, 60, 50)};
  const Report r = compute(in, {{kD + 12 * kH, kD + kDay + 12 * kH}, std::nullopt, {}});
  ASSERT_EQ(r.heat.size(), 2U);
  EXPECT_EQ(r.heat[0].day_start_ms, kD);
  EXPECT_EQ(r.heat[1].day_start_ms, kD + kDay);
  EXPECT_FALSE(r.heat[0].util_pct[9].has_value());  // before the range
  EXPECT_DOUBLE_EQ(r.heat[1].util_pct[3].value_or(-1), 50.0);
}

TEST(Compute, TheGpuFilterKeepsOnlyTheChosenGpus) {
  ReportInput in;
  in.gpus = two_gpus();
  in.activity = {span(0, Activity::Busy, 0, 24), span(1, Activity::Idle, 0, 20), span(1, Activity::Holding, 20, 24)};
  in.hours = {hour(0, kD, 60, 100), hour(1, kD, 60, 10)};
  in.processes = {proc(0, 1, 0, 24, "alice", "train"), proc(1, 2, 20, 24, "bob", "hold")};
  in.events = {{kD + kH, 0u, "fault", "HW thermal"},
               {kD + kH, 1u, "throttle-start", "power brake"},
               {kD + 2 * kH, 1u, "process-start", "pid 2"},
               {kD + 3 * kH, std::nullopt, "lost", "fleet-wide"}};
  ReportOptions options = day(1.0);
  options.gpus = {1};
  const Report r = compute(in, options);

  ASSERT_EQ(r.gpus.size(), 1U);
  EXPECT_EQ(r.gpus[0].gpu, 1U);
  EXPECT_DOUBLE_EQ(r.fleet.of(Activity::Busy), 0.0);
  EXPECT_DOUBLE_EQ(r.fleet.idle(), 20.0);
  EXPECT_DOUBLE_EQ(r.idle_cost.value_or(-1), 20.0);
  EXPECT_DOUBLE_EQ(r.fleet_util_avg_pct.value_or(-1), 10.0);
  EXPECT_DOUBLE_EQ(r.heat[0].util_pct[0].value_or(-1), 10.0);
  ASSERT_EQ(r.users.size(), 1U);
  EXPECT_EQ(r.users[0].name, "bob");
  ASSERT_EQ(r.idle_windows.size(), 1U);
  EXPECT_EQ(r.idle_windows[0].gpu, 1U);
  ASSERT_EQ(r.holding.size(), 1U);
  EXPECT_EQ(r.holding[0].gpu, 1U);
  ASSERT_EQ(r.holding[0].processes.size(), 1U);
  EXPECT_EQ(r.holding[0].processes[0].user, "bob");
  EXPECT_EQ(r.fault_events, 2U);  // GPU 1's throttle-start and the event of no GPU in particular
}

TEST(Compute, FaultEventsCountFaultsLossesAndThrottling) {
  ReportInput in;
  in.events = {{kD, 0u, "fault", ""},           {kD, 0u, "lost", ""},       {kD, 0u, "throttle-start", ""},
               {kD, 0u, "throttle-end", ""},    {kD, 0u, "fault-cleared", ""}, {kD, 0u, "process-start", ""},
               {kD, std::nullopt, "agent-start", ""}};
  EXPECT_EQ(compute(in, day()).fault_events, 3U);
}

TEST(Compute, BackfillWorkIsTheSumOfItsStintsReadAsHostile) {
  ReportInput in;
  in.gpus = two_gpus();
  in.events = {
      {kD + 1, std::nullopt, "backfill",
       R"({"batch":1,"done":40,"failed":2,"prompt_tokens":400,"completion_tokens":900,"busy_ms":1800000,"gpus":0})"},
      {kD + 2, std::nullopt, "backfill", R"({"batch":1,"done":8,"failed":0,"busy_ms":360000})"},
      {kD + 3, 2u, "backfill", R"({"batch":7,"done":10,"busy_ms":3600000,"gpus":2})"},
      {kD + 4, std::nullopt, "backfill", R"({"batch":9,"done":-5,"failed":"3","busy_ms":1e300})"},  // hostile: 0s
      {kD + 5, std::nullopt, "backfill", "not json"},
      {kD + 6, std::nullopt, "reap", R"({"batch":3,"done":100})"},  // another kind
  };
  const Report r = compute(in, day());
  EXPECT_EQ(r.backfill.batches, 3U) << "1, 7 and the hostile 9";
  EXPECT_EQ(r.backfill.requests, 40 + 2 + 8 + 10);
  EXPECT_EQ(r.backfill.failed, 2);
  EXPECT_EQ(r.backfill.prompt_tokens, 400);
  EXPECT_EQ(r.backfill.completion_tokens, 900);
  EXPECT_DOUBLE_EQ(r.backfill.busy_hours, 0.5 + 0.1 + 1.0);
  EXPECT_DOUBLE_EQ(r.backfill.gpu_hours, 2.0) << "only the managed server's stint knows its GPUs";
  const Report gpu2 = compute(in, {day().range, std::nullopt, {2}});
  EXPECT_EQ(gpu2.backfill.requests, 10) << "a report of some GPUs counts only work placed on them";
  EXPECT_NE(render_text(r, false).find("Idle hours turned into work (docs/backfill.md): 60 requests of 3 batches"),
            std::string::npos)
      << render_text(r, false);
  EXPECT_EQ(nlohmann::json::parse(render_json(r))["backfill"]["requests"], 60);
  EXPECT_NE(render_html(r).find("<h2>Idle hours turned into work</h2>"), std::string::npos);
}

TEST(Compute, ZombiesFoundAreHoldEventsAndReapedAreReapEventsThatFreedMemory) {
  ReportInput in;
  in.events = {
      {kD + 1, 3u, "hold", R"({"pid":4242,"idle_ms":360000})"},
      {kD + 2, 3u, "hold", R"({"pid":4243})"},
      {kD + 3, 3u, "reap", R"({"pid":4242,"user":"alice","command":"python3 -m ipykernel","outcome":"ended",)"
                           R"("memory_freed":true,"freed_bytes":40802189312})"},
      {kD + 4, 3u, "reap", R"({"pid":4243,"user":"bob","command":"x","outcome":"survived","memory_freed":false})"},
      {kD + 5, 1u, "reap", R"({"pid":7,"outcome":"killed","memory_freed":true,"freed_bytes":1073741824})"},
      {kD + 6, 1u, "reap", R"(not json {)"},                          // a hostile row: ignored
      {kD + 7, 1u, "reap", R"({"pid":"8","memory_freed":"yes"})"},   // wrong types: counted, nothing freed
  };
  const Report r = compute(in, day());
  EXPECT_EQ(r.zombies.found, 2U);
  EXPECT_EQ(r.zombies.actions, 4U);
  EXPECT_EQ(r.zombies.reaped, 2U);
  EXPECT_EQ(r.zombies.freed_bytes, 40802189312ULL + 1073741824ULL);
  ASSERT_EQ(r.zombies.recent.size(), 4U);
  EXPECT_EQ(r.zombies.recent[0].ts_ms, kD + 7) << "newest first";
  EXPECT_EQ(r.zombies.recent[3].pid, 4242U);
  EXPECT_EQ(r.zombies.recent[3].user, "alice");
  const Report gpu3 = compute(in, {day().range, std::nullopt, {3}});
  EXPECT_EQ(gpu3.zombies.reaped, 1U) << "the GPU filter applies to the zombies too";
}

TEST(Compute, AnEmptyRangeGivesAnEmptyReport) {
  ReportInput in;
  in.activity = {span(0, Activity::Busy, 0, 24)};
  const Report r = compute(in, {{kD, kD}, 2.0, {}});
  EXPECT_TRUE(r.heat.empty());
  ASSERT_EQ(r.gpus.size(), 1U);
  EXPECT_DOUBLE_EQ(r.gpus[0].hours.recorded(), 0.0);
  EXPECT_DOUBLE_EQ(r.gpus[0].hours.unrecorded, 0.0);
  EXPECT_TRUE(r.idle_windows.empty());
}

}  // namespace
}  // namespace tarmac::report
