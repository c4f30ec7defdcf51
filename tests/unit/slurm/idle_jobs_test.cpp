#include "tarmac/slurm/idle_jobs.hpp"

#include <gtest/gtest.h>

namespace tarmac::slurm {
namespace {

using gpu::Activity;
using Kind = IdleJobDecision::Kind;

constexpr long long kMin = 60 * 1000;

IdleJobSettings cancel_after(long long warn_min, long long cancel_min) {
  return {IdleJobAction::Cancel, warn_min * kMin, cancel_min * kMin, false};
}

std::vector<std::pair<Kind, std::string>> kinds(const std::vector<IdleJobDecision>& ds) {
  std::vector<std::pair<Kind, std::string>> out;
  for (const auto& d : ds) out.emplace_back(d.kind, d.job);
  return out;
}

TEST(IdleJobs, AJobWhoseGpusAllSitIdleIsWarnedThenCancelledOnce) {
  IdleJobs policy(cancel_after(60, 120));
  const host::JobMap map{{0, {"77"}}, {1, {"77"}}};
  const host::JobInfos infos{{"77", {"alice", "gpu"}}};
  const std::map<unsigned, Activity> idle{{0, Activity::ReservedIdle}, {1, Activity::Holding}};
  EXPECT_TRUE(policy.observe(map, infos, idle, 0).empty());
  EXPECT_TRUE(policy.observe(map, infos, idle, 59 * kMin).empty());
  auto warned = policy.observe(map, infos, idle, 60 * kMin);
  ASSERT_EQ(kinds(warned), (decltype(kinds(warned)){{Kind::Warn, "77"}}));
  EXPECT_EQ(warned[0].gpus, (std::vector<unsigned>{0, 1}));
  EXPECT_EQ(warned[0].info.user, "alice");
  EXPECT_EQ(warned[0].idle_since_ms, 0);
  EXPECT_TRUE(policy.observe(map, infos, idle, 90 * kMin).empty()) << "warned once";
  EXPECT_EQ(kinds(policy.observe(map, infos, idle, 120 * kMin)), (decltype(kinds(warned)){{Kind::Cancel, "77"}}));
  EXPECT_TRUE(policy.observe(map, infos, idle, 200 * kMin).empty()) << "cancelled once";
  auto gone = policy.observe({}, {}, idle, 201 * kMin);
  ASSERT_EQ(kinds(gone), (decltype(kinds(warned)){{Kind::Resolved, "77"}}));
  EXPECT_TRUE(gone[0].gone);
}

TEST(IdleJobs, OneBusyGpuKeepsTheJobAndWorkRestartsTheClock) {
  IdleJobs policy(cancel_after(60, 120));
  const host::JobMap map{{0, {"77"}}, {1, {"77"}}};
  std::map<unsigned, Activity> classes{{0, Activity::Idle}, {1, Activity::Busy}};
  for (long long m = 0; m <= 180; m += 10) EXPECT_TRUE(policy.observe(map, {}, classes, m * kMin).empty());
  classes[1] = Activity::Idle;
  EXPECT_TRUE(policy.observe(map, {}, classes, 200 * kMin).empty());
  EXPECT_EQ(policy.observe(map, {}, classes, 260 * kMin).size(), 1U);  // warned 60 min after going idle
  classes[0] = Activity::Starved;  // working, if slowly
  auto back = policy.observe(map, {}, classes, 270 * kMin);
  ASSERT_EQ(back.size(), 1U);
  EXPECT_EQ(back[0].kind, Kind::Resolved);
  EXPECT_FALSE(back[0].gone);
  classes[0] = Activity::Idle;
  EXPECT_TRUE(policy.observe(map, {}, classes, 300 * kMin).empty()) << "the clock starts again";
}

TEST(IdleJobs, NotifyNeverCancelsAndOffDoesNothingAndAnUnsampledGpuIsNotIdle) {
  const host::JobMap map{{0, {"77"}}};
  const std::map<unsigned, Activity> idle{{0, Activity::Idle}};
  IdleJobs notify({IdleJobAction::Notify, 60 * kMin, 120 * kMin, false});
  EXPECT_TRUE(notify.observe(map, {}, idle, 0).empty());
  EXPECT_EQ(notify.observe(map, {}, idle, 60 * kMin).size(), 1U);
  EXPECT_TRUE(notify.observe(map, {}, idle, 600 * kMin).empty());
  IdleJobs off({IdleJobAction::Off, 60 * kMin, 120 * kMin, false});
  EXPECT_TRUE(off.observe(map, {}, idle, 0).empty());
  EXPECT_TRUE(off.observe(map, {}, idle, 600 * kMin).empty());
  IdleJobs unsampled(cancel_after(1, 2));
  EXPECT_TRUE(unsampled.observe(map, {}, {}, 0).empty());
  EXPECT_TRUE(unsampled.observe(map, {}, {}, 600 * kMin).empty());
  EXPECT_TRUE(unsampled.observe({}, {}, {}, 601 * kMin).empty()) << "never warned: nothing to resolve";
}

TEST(IdleJobs, ScontrolSaysWhetherAJobIsInteractive) {
  EXPECT_EQ(interactive_from_scontrol("JobId=77 JobName=sh UserId=bob(1001) BatchFlag=0 Reboot=0"), true);
  EXPECT_EQ(interactive_from_scontrol("JobId=77 JobName=wrap BatchFlag=1 Reboot=0\n"), false);
  EXPECT_EQ(interactive_from_scontrol("JobId=77 Comment=xBatchFlag=0 BatchFlag=1"), false) << "a whole field only";
  EXPECT_EQ(interactive_from_scontrol("slurm_load_jobs error: Invalid job id specified"), std::nullopt);
  EXPECT_EQ(interactive_from_scontrol(""), std::nullopt);
  EXPECT_EQ(idle_job_action_from("cancel"), IdleJobAction::Cancel);
  EXPECT_EQ(idle_job_action_from("kill"), std::nullopt);
}

}  // namespace
}  // namespace tarmac::slurm
