#include "tarmac/alerts/rules.hpp"

#include <gtest/gtest.h>

#include "test_support.hpp"

namespace tarmac::alerts {
namespace {

using namespace testing;  // NOLINT
constexpr long long kMin = 60 * 1000;

std::map<unsigned, gpu::Activity> zombie_classes() {
  auto c = classes(zombie());
  c[3] = gpu::Activity::Holding;
  return c;
}

std::vector<Notice> run(Evaluator& e, const gpu::Snapshot& s, const std::map<unsigned, gpu::Activity>& c,
                        long long from_ms, long long to_ms, long long step_ms = 1000) {
  std::vector<Notice> all;
  for (long long t = from_ms; t <= to_ms; t += step_ms) {
    auto n = e.observe(s, c, t);
    all.insert(all.end(), n.begin(), n.end());
  }
  return all;
}

TEST(Evaluator, HoldingZombieFiresOnceThenResolves) {
  AlertConfig config;
  config.holding_for_ms = 2 * kMin;
  Evaluator e(config, gpu::ActivityThresholds{});
  // Pending for the first two minutes: nothing announced, nothing firing.
  auto notices = run(e, zombie(), zombie_classes(), 0, 2 * kMin - 1000);
  EXPECT_TRUE(notices.empty());
  EXPECT_TRUE(e.firing().empty());
  notices = run(e, zombie(), zombie_classes(), 2 * kMin, 20 * kMin);
  ASSERT_EQ(notices.size(), 1u);  // announced once, though it holds for 18 more minutes
  const Alert& a = notices[0].alert;
  EXPECT_EQ(notices[0].kind, Notice::Kind::Firing);
  EXPECT_EQ(a.rule, Rule::Holding);
  EXPECT_EQ(a.gpu, 3u);
  EXPECT_EQ(a.pid, 1234u);
  EXPECT_EQ(a.user, "bob");
  EXPECT_EQ(a.since_ms, 0);
  EXPECT_EQ(a.summary, "GPU 3 (GPU-00000003-aaaa): python -m ipykernel_launcher (bob, pid 1234) holds 20.0 GiB at 0 % "
                       "for 2m");
  ASSERT_EQ(e.firing().size(), 1u);
  EXPECT_NE(e.firing()[0].summary.find("for 20m"), std::string::npos) << e.firing()[0].summary;
  // Beyond the host (http.expose_command_lines off): the program's name for its three words.
  EXPECT_EQ(summary_without_arguments(e.firing()[0]).substr(0, 55),
            "GPU 3 (GPU-00000003-aaaa): python (bob, pid 1234) holds");

  // The kernel is killed: the GPU is idle, the alert resolves once.
  auto freed = zombie();
  freed.devices[3] = device(3, 0, 300, 36);
  auto c = zombie_classes();
  c[3] = gpu::Activity::Idle;
  notices = run(e, freed, c, 21 * kMin, 22 * kMin);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].kind, Notice::Kind::Resolved);
  EXPECT_EQ(notices[0].alert.rule, Rule::Holding);
  EXPECT_NE(notices[0].text().find("RESOLVED [warning] holding: GPU 3"), std::string::npos) << notices[0].text();
  EXPECT_TRUE(e.firing().empty());

  // It comes back: pending again from its new start, then fires again.
  notices = run(e, zombie(), zombie_classes(), 30 * kMin, 32 * kMin);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].kind, Notice::Kind::Firing);
  EXPECT_EQ(notices[0].alert.since_ms, 30 * kMin);
}

TEST(Evaluator, ABreakRestartsTheForDuration) {
  AlertConfig config;
  config.thermal_for_ms = kMin;
  Evaluator e(config, gpu::ActivityThresholds{});
  auto hot = balanced();
  hot.devices[1].sample.temp_c = 87;
  EXPECT_TRUE(run(e, hot, classes(hot), 0, 50 * 1000).empty());
  EXPECT_TRUE(run(e, balanced(), classes(hot), 51 * 1000, 51 * 1000).empty());  // cooled for one sample
  EXPECT_TRUE(run(e, hot, classes(hot), 52 * 1000, 111 * 1000).empty());
  auto notices = run(e, hot, classes(hot), 112 * 1000, 112 * 1000);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].alert.rule, Rule::Thermal);
  EXPECT_EQ(notices[0].alert.severity, Severity::Critical);
  EXPECT_EQ(notices[0].alert.gpu, 1u);
  EXPECT_NE(notices[0].alert.summary.find("87 °C (threshold 85 °C)"), std::string::npos) << notices[0].alert.summary;
}

TEST(Evaluator, ABalancedFleetFiresNothing) {
  Evaluator e{AlertConfig{}, gpu::ActivityThresholds{}};
  const auto s = balanced();
  EXPECT_TRUE(run(e, s, classes(s), 0, 3 * 3600 * 1000, 10 * 1000).empty());
  EXPECT_TRUE(e.firing().empty());
}

TEST(Evaluator, ThermalFromAClockEventReason) {
  AlertConfig config;
  config.thermal_for_ms = 0;
  Evaluator e(config, gpu::ActivityThresholds{});
  auto s = balanced();
  s.devices[2].sample.clock_event_reasons = 0x40;  // HW thermal slowdown at 69 °C
  auto notices = e.observe(s, classes(s), 0);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].alert.gpu, 2u);
  EXPECT_NE(notices[0].alert.summary.find("slowed by heat"), std::string::npos);
}

TEST(Evaluator, NearOom) {
  AlertConfig config;
  Evaluator e(config, gpu::ActivityThresholds{});
  auto s = balanced();
  s.devices[0].sample.mem_used_bytes = 40500 * util::kMiB;  // 98.9 %
  auto notices = run(e, s, classes(s), 0, kMin);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].alert.rule, Rule::NearOom);
  EXPECT_EQ(notices[0].alert.gpu, 0u);
  EXPECT_NE(notices[0].alert.summary.find("(98.9 %)"), std::string::npos) << notices[0].alert.summary;
  // 94 % is below the default 98 %.
  Evaluator e2(config, gpu::ActivityThresholds{});
  s.devices[0].sample.mem_used_bytes = 38500 * util::kMiB;
  EXPECT_TRUE(run(e2, s, classes(s), 0, 5 * kMin).empty());
}

TEST(Evaluator, StarvationButNotForHoldingGpus) {
  Evaluator e{AlertConfig{}, gpu::ActivityThresholds{}};
  auto s = balanced();
  s.devices[1].sample.util_gpu_pct = 12;  // starved: 38500 MiB held at 12 %
  s.devices[1].processes[0].host.command_line = "python serve.py";
  auto c = classes(s);
  c[1] = gpu::Activity::Starved;
  // Another job (python serve.py) than the training on GPUs 0, 2, 3, so no imbalance.
  EXPECT_TRUE(run(e, s, c, 0, 10 * kMin - 1000, 1000).empty());
  auto notices = e.observe(s, c, 10 * kMin);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].alert.rule, Rule::Starvation);
  EXPECT_EQ(notices[0].alert.gpu, 1u);
  EXPECT_EQ(notices[0].alert.summary,
            "GPU 1 (GPU-00000001-aaaa): python serve.py (alice, pid 1001) holds 37.6 GiB, 95 % of memory in use, at 12 % "
            "for 10m");

  // A holding GPU is the holding alert's, not starvation's.
  AlertConfig only_starvation;
  for (Rule r : kRules) {
    if (r != Rule::Starvation) only_starvation.disabled.push_back(r);
  }
  Evaluator e3(only_starvation, gpu::ActivityThresholds{});
  EXPECT_TRUE(run(e3, zombie(), zombie_classes(), 0, 20 * kMin, 10 * 1000).empty());
}

TEST(Evaluator, ImbalanceWithinAJob) {
  AlertConfig config;
  Evaluator e(config, gpu::ActivityThresholds{});
  auto s = balanced();
  s.devices[2].sample.util_gpu_pct = 20;  // rank 2 waits: 96 % vs 20 %
  auto notices = run(e, s, classes(s), 0, 5 * kMin, 10 * 1000);
  ASSERT_EQ(notices.size(), 1u);
  const Alert& a = notices[0].alert;
  EXPECT_EQ(a.rule, Rule::Imbalance);
  EXPECT_EQ(a.gpus, (std::vector<unsigned>{0, 1, 2, 3}));
  EXPECT_EQ(a.user, "alice");
  EXPECT_NE(a.summary.find("spread 76 points"), std::string::npos) << a.summary;

  // The same spread across two different users' jobs is no imbalance.
  Evaluator e2(config, gpu::ActivityThresholds{});
  auto two = balanced();
  two.devices[2].sample.util_gpu_pct = 20;
  two.devices[2].processes[0] = process(77, 1000, "carol", "python other.py");
  two.devices[3].processes[0] = process(78, 1000, "carol", "python other.py");
  two.devices[3].sample.util_gpu_pct = 25;
  // carol's GPUs hold what her processes hold (not starved: gpu::is_starved reads memory in use).
  two.devices[2].sample.mem_used_bytes = 1400 * util::kMiB;
  two.devices[3].sample.mem_used_bytes = 1400 * util::kMiB;
  EXPECT_TRUE(run(e2, two, classes(two), 0, 10 * kMin, 10 * 1000).empty());
}

TEST(Evaluator, SlurmJobGroupsDifferentCommands) {
  auto s = balanced();
  s.devices[0].processes[0] = process(1, 100, "dave", "python a.py", "4242");
  s.devices[1].processes[0] = process(2, 100, "dave", "python b.py", "4242");
  s.devices[1].sample.util_gpu_pct = 5;
  AlertConfig config;
  config.imbalance_for_ms = 0;
  Evaluator e(config, gpu::ActivityThresholds{});
  auto notices = e.observe(s, classes(s), 0);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].alert.job, "slurm 4242");
  EXPECT_EQ(notices[0].alert.gpus, (std::vector<unsigned>{0, 1}));
}

TEST(Evaluator, FaultAndLostFireAtOnce) {
  Evaluator e{AlertConfig{}, gpu::ActivityThresholds{}};
  auto s = balanced();
  s.devices[0].lost = "GPU is lost";
  auto c = classes(s);
  c[1] = gpu::Activity::Fault;
  s.devices[1].sample.retired_pages_pending = true;
  auto notices = e.observe(s, c, 0);
  ASSERT_EQ(notices.size(), 2u);
  EXPECT_EQ(notices[0].alert.rule, Rule::Fault);
  EXPECT_EQ(notices[0].alert.gpu, 0u);
  EXPECT_NE(notices[0].alert.summary.find("lost"), std::string::npos);
  EXPECT_EQ(notices[1].alert.gpu, 1u);
}

TEST(Evaluator, IdleAfterItsFor) {
  Evaluator e{AlertConfig{}, gpu::ActivityThresholds{}};
  gpu::Snapshot s;
  s.devices.push_back(device(0, 0, 0));
  auto c = classes(s, gpu::Activity::Idle);
  EXPECT_TRUE(run(e, s, c, 0, 59 * kMin, kMin).empty());
  auto notices = e.observe(s, c, 60 * kMin);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].alert.severity, Severity::Info);
  EXPECT_EQ(notices[0].alert.summary, "GPU 0 (GPU-00000000-aaaa): idle for 1h00m");
}

TEST(Evaluator, DisabledRulesNeverFire) {
  AlertConfig config;
  config.disabled = {Rule::Holding};
  Evaluator e(config, gpu::ActivityThresholds{});
  EXPECT_TRUE(run(e, zombie(), zombie_classes(), 0, 30 * kMin, 10 * 1000).empty());
}

TEST(Rules, NamesAndLists) {
  for (Rule r : kRules) EXPECT_EQ(rule_from_name(to_string(r)), r);
  std::string bad;
  EXPECT_EQ(parse_rule_list(" idle, thermal ,idle"), (std::vector<Rule>{Rule::Idle, Rule::Thermal}));
  EXPECT_FALSE(parse_rule_list("idle,zombie", &bad));
  EXPECT_EQ(bad, "zombie");
  EXPECT_EQ(rule_list_text({Rule::Idle, Rule::NearOom}), "idle,near_oom");
  AlertConfig c;
  EXPECT_EQ(c.longest_for_ms(), 3600 * 1000);
  c.disabled = {Rule::Idle};
  EXPECT_EQ(c.longest_for_ms(), 10 * kMin);
}

TEST(Rules, JobKeyBlursRanks) {
  host::ProcessInfo a;
  a.user = "alice";
  a.command_line = "python train.py --local-rank 0";
  host::ProcessInfo b = a;
  b.command_line = "python train.py --local-rank 12";
  EXPECT_EQ(job_key(a), job_key(b));
  b.user = "bob";
  EXPECT_NE(job_key(a), job_key(b));
  host::ProcessInfo none;
  EXPECT_EQ(job_key(none), "");
}

}  // namespace
}  // namespace tarmac::alerts
