#include "tarmac/reap/policy.hpp"

#include <gtest/gtest.h>

#include "tarmac/util/units.hpp"
#include "reap_test_support.hpp"

namespace tarmac::reap {
namespace {

using test_support::kMin;

ReaperConfig policy_rules() {
  ReaperConfig c;
  c.warn_after_ms = 5 * kMin;
  c.idle_for_ms = 10 * kMin;
  return c;
}

// A holder on `gpu` at 0 % for `idle_min` minutes, decided `reason`.
Row holder(unsigned gpu, unsigned pid, long long idle_min, Reason reason, unsigned long long start = 1000) {
  Row r;
  r.evidence.gpu = gpu;
  r.evidence.gpu_uuid = "GPU-" + std::to_string(gpu);
  r.evidence.process.pid = pid;
  r.evidence.process.used_mem_bytes = 38 * util::kGiB;
  r.evidence.process.host.user = "alice";
  r.evidence.process.host.command_line = "/opt/conda/bin/python3 -m ipykernel_launcher -f /run/k.json";
  r.evidence.identity = host::ProcessIdentity{pid, start, "boot"};
  r.evidence.history.observed_since_ms = 0;
  r.evidence.history.observed_until_ms = 60 * kMin;
  r.evidence.history.idle_since_ms = 60 * kMin - idle_min * kMin;
  r.evidence.history.last_util_pct = 0;
  r.decision.reason = reason;
  return r;
}

Pass pass_of(std::vector<Row> rows, long long t_min = 0) {
  Pass p;
  p.rows = std::move(rows);
  p.time_unix_ms = t_min * kMin;
  return p;
}

TEST(Policy, WarnsOnceAtWarnAfterThenReapsInALaterPassOnceACandidate) {
  Policy policy(policy_rules());
  auto plan = policy.step(pass_of({holder(3, 4242, 4, Reason::RecentlyBusy)}), Killing::On);
  EXPECT_TRUE(plan.warn.empty()) << "4 minutes idle is before warn_after";
  plan = policy.step(pass_of({holder(3, 4242, 6, Reason::RecentlyBusy)}), Killing::On);
  EXPECT_EQ(plan.warn, std::vector<std::size_t>{0});
  EXPECT_TRUE(plan.reap.empty());
  plan = policy.step(pass_of({holder(3, 4242, 7, Reason::RecentlyBusy)}), Killing::On);
  EXPECT_TRUE(plan.warn.empty()) << "warned twice for the same process";
  plan = policy.step(pass_of({holder(3, 4242, 10, Reason::Candidate)}), Killing::On);
  EXPECT_TRUE(plan.warn.empty());
  EXPECT_EQ(plan.reap, std::vector<std::size_t>{0});
}

TEST(Policy, ACandidateNeverWarnedIsWarnedFirstAndReapedOnlyAtTheNextPass) {
  Policy policy(policy_rules());
  auto plan = policy.step(pass_of({holder(0, 7, 30, Reason::Candidate)}), Killing::On);
  EXPECT_EQ(plan.warn, std::vector<std::size_t>{0});
  EXPECT_TRUE(plan.reap.empty()) << "ended in the pass that warned its owner";
  plan = policy.step(pass_of({holder(0, 7, 31, Reason::Candidate)}), Killing::On);
  EXPECT_EQ(plan.reap, std::vector<std::size_t>{0});
}

// What the kill did with a row the policy chose: an action, or a reason it was left.
Row killed(Row row, Outcome outcome) {
  row.action = KillResult{};
  row.action->outcome = outcome;
  return row;
}

TEST(Policy, AHolderThatOutlivesItsActionIsNotTriedEveryPass) {
  Policy policy(policy_rules());
  (void)policy.step(pass_of({holder(0, 7, 30, Reason::Candidate)}), Killing::On);
  EXPECT_EQ(policy.step(pass_of({holder(0, 7, 31, Reason::Candidate)}), Killing::On).reap.size(), 1u);
  policy.after_kill(killed(holder(0, 7, 31, Reason::Candidate), Outcome::Uninterruptible));
  const auto plan = policy.step(pass_of({holder(0, 7, 32, Reason::Candidate)}), Killing::On);  // in D state
  EXPECT_TRUE(plan.reap.empty()) << "a holder the kill could not end is signalled and announced every pass";
  EXPECT_TRUE(plan.warn.empty());
  EXPECT_EQ(plan.holding.at(0), 1u) << "still counted as holding";
}

// The third review ("not security"): a candidate the kill left without acting (the kill switch,
// reaper.max_kills, decided again before the signal) is asked for again while it stays idle, and
// only an action ends the asking. The old code marked it done when it planned the kill.
TEST(Policy, ACandidateTheKillLeftIsAskedForAgainWhileItStaysIdle) {
  Policy policy(policy_rules());
  (void)policy.step(pass_of({holder(0, 7, 30, Reason::Candidate)}), Killing::On);
  EXPECT_EQ(policy.step(pass_of({holder(0, 7, 31, Reason::Candidate)}), Killing::On).reap.size(), 1u);
  Row left = holder(0, 7, 31, Reason::Candidate);
  left.left_because = "the kill switch /etc/tarmac/reap.disabled exists";
  policy.after_kill(left);
  EXPECT_EQ(policy.step(pass_of({holder(0, 7, 32, Reason::Candidate)}), Killing::On).reap, std::vector<std::size_t>{0})
      << "a candidate the kill switch kept is never retried";
  policy.after_kill(killed(holder(0, 7, 32, Reason::Candidate), Outcome::Survived));
  EXPECT_TRUE(policy.step(pass_of({holder(0, 7, 33, Reason::Candidate)}), Killing::On).reap.empty());
}

TEST(Policy, WithKillingOffItWarnsAndNeverReaps) {
  Policy policy(policy_rules());
  EXPECT_EQ(policy.step(pass_of({holder(0, 7, 30, Reason::Candidate)}), Killing::Off).warn.size(), 1u);
  const auto plan = policy.step(pass_of({holder(0, 7, 31, Reason::Candidate)}), Killing::Off);
  EXPECT_TRUE(plan.reap.empty());
  EXPECT_TRUE(plan.warn.empty());
}

TEST(Policy, ForgetsAHolderThatLeftOrGotBusySoIdlingAgainWarnsAgain) {
  Policy policy(policy_rules());
  (void)policy.step(pass_of({holder(0, 7, 6, Reason::RecentlyBusy), holder(1, 8, 6, Reason::RecentlyBusy)}),
                    Killing::On);
  EXPECT_EQ(policy.warned_count(), 2u);
  auto busy = holder(0, 7, 0, Reason::Busy);
  busy.evidence.history.idle_since_ms.reset();
  busy.evidence.history.last_util_pct = 80;
  auto plan = policy.step(pass_of({busy}), Killing::On);  // pid 8 left, pid 7 works
  EXPECT_EQ(policy.warned_count(), 0u);
  plan = policy.step(pass_of({holder(0, 7, 6, Reason::RecentlyBusy)}), Killing::On);
  EXPECT_EQ(plan.warn, std::vector<std::size_t>{0});
  EXPECT_TRUE(plan.reap.empty()) << "a warning from before it got busy counts for nothing";
}

TEST(Policy, AReusedPidIsAnotherProcessAndIsWarnedBeforeAnythingElse) {
  Policy policy(policy_rules());
  (void)policy.step(pass_of({holder(0, 7, 6, Reason::RecentlyBusy, 1000)}), Killing::On);
  const auto plan = policy.step(pass_of({holder(0, 7, 30, Reason::Candidate, 2000)}), Killing::On);
  EXPECT_EQ(plan.warn, std::vector<std::size_t>{0});
  EXPECT_TRUE(plan.reap.empty()) << "the new process behind a warned pid was ended without a warning";
}

TEST(Policy, ProtectedUnknownAndInvisibleHoldersAreNeverWarnedButCountAsHolding) {
  Policy policy(policy_rules());
  auto invisible = holder(2, 9, 30, Reason::NotVisible);
  invisible.evidence.identity.reset();
  auto unknown = holder(2, 10, 30, Reason::UnknownUtilization);
  unknown.evidence.history.last_util_pct.reset();
  unknown.evidence.history.idle_since_ms.reset();
  const auto plan = policy.step(pass_of({holder(2, 7, 30, Reason::Protected), holder(2, 8, 30, Reason::OtherUser),
                                         invisible, unknown, holder(1, 11, 2, Reason::RecentlyBusy)}),
                                Killing::On);
  EXPECT_TRUE(plan.warn.empty());
  EXPECT_EQ(plan.holding, (std::map<unsigned, unsigned>{{2, 3}})) << "holding: known 0 % past warn_after, any decision";
}

TEST(Policy, TheNoticesSayWhoHowMuchWhereAndWhen) {
  const auto row = holder(3, 4242, 6, Reason::RecentlyBusy);
  EXPECT_EQ(warning_text(row, policy_rules(), Killing::On),
            "pid 4242 (alice, python3 -m ipykernel_launcher) holds 38.0 GiB on GPU 3 at 0 % for 6m; reaped at 10m");
  EXPECT_NE(warning_text(row, policy_rules(), Killing::Off).find("does not reap"), std::string::npos);
  auto done = row;
  done.action = KillResult{};
  done.action->outcome = Outcome::Ended;
  done.action->memory_freed = true;
  done.action->freed_bytes = 38 * util::kGiB;
  done.action->took_ms = 12'000;
  EXPECT_EQ(action_summary(done), "reaped pid 4242 (alice, python3 -m ipykernel_launcher) on GPU 3: 38.0 GiB free after 12s");
  done.action->outcome = Outcome::Survived;
  done.action->memory_freed = false;
  done.action->last_signal = 9;
  EXPECT_EQ(action_summary(done),
            "pid 4242 (alice, python3 -m ipykernel_launcher) on GPU 3: survived after SIGKILL: its memory was NOT freed");
  const auto detail = hold_detail(row);
  EXPECT_EQ(detail["pid"], 4242);
  EXPECT_EQ(detail["idle_ms"], 6 * kMin);
  EXPECT_EQ(detail["mem_used_bytes"], 38 * util::kGiB);
}

}  // namespace
}  // namespace tarmac::reap
