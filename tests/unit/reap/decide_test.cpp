#include "tarmac/reap/decide.hpp"

#include <gtest/gtest.h>

#include "tarmac/util/units.hpp"
#include "reap_test_support.hpp"

namespace tarmac::reap {
namespace {

using test_support::kMin;
constexpr unsigned kAlice = 1000;
constexpr unsigned kBob = 1001;

// Readings every minute from `minutes` ago to now (t = 0 is now), the given SM utilization each.
IdleHistory readings(const std::vector<std::optional<unsigned>>& utils) {
  std::vector<Observation> obs;
  const long long n = static_cast<long long>(utils.size());
  for (long long i = 0; i < n; ++i) {
    obs.push_back({(i - n + 1) * kMin, utils[static_cast<std::size_t>(i)], 4 * util::kGiB, UtilSource::PerProcess});
  }
  return idle_history(obs, 2 * kMin);
}

// Alice's jupyter kernel: 4 GiB at 0 % for 20 minutes, started an hour ago.
ProcessEvidence idle_kernel() {
  ProcessEvidence e;
  e.gpu = 3;
  e.process.pid = 4242;
  e.process.used_mem_bytes = 4 * util::kGiB;
  e.process.host.pid = 4242;
  e.process.host.visibility = host::PidVisibility::Visible;
  e.process.host.uid = kAlice;
  e.process.host.user = "alice";
  e.process.host.name = "python3";
  e.process.host.command_line = "/usr/bin/python3 -m ipykernel_launcher";
  e.identity = host::ProcessIdentity{4242, 123456, "boot"};
  e.age_ms = 60 * kMin;
  e.history = readings(std::vector<std::optional<unsigned>>(21, 0U));
  e.device_file = host::DeviceNumber{host::kNvidiaMajor, 3};
  e.holding = host::Holding::Holds;
  return e;
}

ReaperConfig rules() {
  ReaperConfig c;
  c.idle_for_ms = 10 * kMin;
  c.min_age_ms = 10 * kMin;
  c.min_memory_bytes = util::kGiB;
  return c;
}

Caller root() { return Caller{0, 99, {98, 97}, false}; }
Caller alice() { return Caller{kAlice, 99, {98}, false}; }

Reason reason(const ProcessEvidence& e, const ReaperConfig& c = rules(), const Caller& caller = root()) {
  return decide_one(e, c, caller).reason;
}

TEST(Decide, AnIdleHolderIsACandidate) {
  const auto d = decide_one(idle_kernel(), rules(), root());
  EXPECT_EQ(d.reason, Reason::Candidate);
  EXPECT_NE(d.detail.find("idle 20m"), std::string::npos) << d.detail;
  EXPECT_EQ(reason(idle_kernel(), rules(), alice()), Reason::Candidate);  // her own
}

TEST(Decide, NotVisibleWithoutAnIdentity) {
  auto e = idle_kernel();
  e.identity.reset();
  EXPECT_EQ(reason(e), Reason::NotVisible);
  e = idle_kernel();
  e.process.host.visibility = host::PidVisibility::NotInNamespace;
  EXPECT_EQ(reason(e), Reason::NotVisible);
}

TEST(Decide, ReapAndWhatRunsItAreNeverCandidates) {
  auto e = idle_kernel();
  e.process.pid = 99;
  EXPECT_EQ(reason(e), Reason::Reaper);
  e.process.pid = 97;
  EXPECT_EQ(reason(e), Reason::Reaper);
  e.process.pid = 1;
  EXPECT_EQ(reason(e), Reason::Reaper);
}

TEST(Decide, AllowListedProcessesAreProtected) {
  auto e = idle_kernel();
  e.process.host.name = "nvidia-persiste";  // comm is cut at 15 characters: the program still matches
  e.process.host.command_line = "/usr/bin/nvidia-persistenced --user nvidia-persistenced";
  const auto d = decide_one(e, rules(), root());
  EXPECT_EQ(d.reason, Reason::Protected);
  EXPECT_NE(d.detail.find("built-in"), std::string::npos);
  auto c = rules();
  c.allow_users = {"alice"};
  EXPECT_EQ(reason(idle_kernel(), c), Reason::Protected);
  c = rules();
  c.allow_commands = {"python*"};
  EXPECT_EQ(reason(idle_kernel(), c), Reason::Protected);
  c = rules();
  c.allow_containers = {"3f4e8c"};
  e = idle_kernel();
  e.process.host.container = host::ContainerRef{"docker", "3f4e8c2b9a1d", std::nullopt};
  EXPECT_EQ(reason(e, c), Reason::Protected);
}

// Its command line or environment could not be read in time: an allow-list, a Slurm job or a
// tarmac job may protect it, so it is protected, whatever its idle history.
TEST(Decide, FactsThatCouldNotBeReadProtectIt) {
  auto e = idle_kernel();
  e.process.host.command_line.reset();
  e.process.host.unread = "reading /proc/4242/environ did not finish within 250 ms";
  const auto d = decide_one(e, rules(), root());
  EXPECT_EQ(d.reason, Reason::Protected);
  EXPECT_NE(d.detail.find("/proc/4242/environ"), std::string::npos) << d.detail;
}

TEST(Decide, AnotherUsersProcessOnlyForRoot) {
  Caller bob{kBob, 99, {}, false};
  EXPECT_EQ(reason(idle_kernel(), rules(), bob), Reason::OtherUser);
  auto e = idle_kernel();
  e.process.host.uid.reset();  // an owner that cannot be read is nobody's to end but root's
  EXPECT_EQ(reason(e, rules(), alice()), Reason::OtherUser);
  EXPECT_EQ(reason(e, rules(), root()), Reason::Candidate);
}

TEST(Decide, JobsAreLeftToTheirOwnLimits) {
  auto e = idle_kernel();
  e.tarmac_job = "j42";
  EXPECT_EQ(reason(e), Reason::InTarmacJob);
  e = idle_kernel();
  e.process.host.slurm_job_id = "12345";
  EXPECT_EQ(reason(e), Reason::Candidate);  // no slurmd here: the cgroup name alone does not protect it
  EXPECT_EQ(reason(e, rules(), Caller{0, 99, {}, true}), Reason::InSlurmJob);
}

// Critical finding C1: a listed pid not proven to have the GPU's device file open is not the
// holder (the old code made it a candidate).
TEST(Decide, APidWithoutTheGpusDeviceFileIsNeverACandidate) {
  auto e = idle_kernel();
  e.holding = host::Holding::NotHeld;
  const auto d = decide_one(e, rules(), root());
  EXPECT_EQ(d.reason, Reason::NotHolding);
  EXPECT_NE(d.detail.find("does not have the GPU's device file (195:3) open"), std::string::npos) << d.detail;
  e.holding = host::Holding::Unknown;  // unreadable, or a bound reached first: not proven
  EXPECT_EQ(reason(e), Reason::NotHolding);
  e = idle_kernel();
  e.device_file.reset();  // MIG, or no minor number: fail closed
  EXPECT_EQ(reason(e), Reason::NotHolding);
}

// N1: a listing the store or the watch saw for another process at the pid is not this process's.
TEST(Decide, AListingSeenForAnotherProcessIsNeverACandidate) {
  auto e = idle_kernel();
  e.listed_before = "the driver listed pid 4242 on this GPU for a pid /proc did not show until 3s before this "
                    "process started: the listing may be a stale context's";
  const auto d = decide_one(e, rules(), root());
  EXPECT_EQ(d.reason, Reason::NotHolding);
  EXPECT_EQ(d.detail, *e.listed_before);
}

// N1's residual: without the store a listing older than the watch cannot be tied to its process,
// so --kill (Intent::Kill) takes no watch evidence; a dry run still shows the candidate, and store
// evidence still makes one under --kill.
TEST(Decide, KillTakesNoWatchEvidence) {
  auto e = idle_kernel();
  e.source = EvidenceSource::Watch;
  Caller killing = root();
  killing.intent = Intent::Kill;
  const auto d = decide_one(e, rules(), killing);
  EXPECT_EQ(d.reason, Reason::NotHolding);
  EXPECT_NE(d.detail.find("root's --kill acts on the store's evidence only"), std::string::npos) << d.detail;
  EXPECT_EQ(reason(e), Reason::Candidate);
  e.source = EvidenceSource::Store;
  EXPECT_EQ(reason(e, rules(), killing), Reason::Candidate);
}

// A user's own --kill may act on a watch: it can end only that user's processes (other_user comes
// first), so a stale listing another user steers onto one of them is a residual of the user's own
// choosing (docs/reap.md); another user's process stays other-user.
TEST(Decide, AUsersOwnKillTakesWatchEvidenceForItsOwnProcessesOnly) {
  auto e = idle_kernel();
  e.source = EvidenceSource::Watch;
  Caller owner = root();
  owner.uid = *e.process.host.uid;
  owner.intent = Intent::Kill;
  ASSERT_FALSE(owner.is_root());
  EXPECT_EQ(reason(e, rules(), owner), Reason::Candidate);
  owner.uid += 1;
  EXPECT_EQ(reason(e, rules(), owner), Reason::OtherUser);
}

// High finding H1: one decision per process over every GPU it is listed on. A rank idle on GPU 3
// and busy on GPU 5 is busy (the old code made it a candidate on GPU 3).
TEST(Decide, AProcessBusyOnAnotherGpuIsBusy) {
  auto idle = idle_kernel();
  auto busy_elsewhere = idle_kernel();
  busy_elsewhere.gpu = 5;
  std::vector<std::optional<unsigned>> utils(21, 0U);
  utils.back() = 60U;
  busy_elsewhere.history = readings(utils);
  auto other = idle_kernel();  // another process, idle: still a candidate
  other.process.pid = 5151;
  const auto d = decide({idle, busy_elsewhere, other}, rules(), root());
  EXPECT_EQ(d[0].reason, Reason::Busy);
  EXPECT_EQ(d[0].detail, "on GPU 5: SM 60 %");
  EXPECT_EQ(d[1].reason, Reason::Busy);
  EXPECT_EQ(d[2].reason, Reason::Candidate);
  // Idle on both: a candidate on both.
  const auto both = decide({idle, idle_kernel()}, rules(), root());
  EXPECT_EQ(both[0].reason, Reason::Candidate);
  EXPECT_EQ(both[1].reason, Reason::Candidate);
}

TEST(Decide, BelowMinimumMemory) {
  auto e = idle_kernel();
  e.process.used_mem_bytes = 512 * util::kMiB;
  EXPECT_EQ(reason(e), Reason::BelowMinMemory);
  e.process.used_mem_bytes.reset();
  EXPECT_EQ(reason(e), Reason::BelowMinMemory);
  auto c = rules();
  c.min_memory_bytes = 0;
  e.process.used_mem_bytes = 0;  // holds nothing: ending it frees nothing
  EXPECT_EQ(reason(e, c), Reason::BelowMinMemory);
}

TEST(Decide, TooYoung) {
  auto e = idle_kernel();
  e.age_ms = 5 * kMin;
  EXPECT_EQ(reason(e), Reason::TooYoung);
  e.age_ms.reset();
  EXPECT_EQ(reason(e), Reason::TooYoung);
}

TEST(Decide, UnknownUtilizationIsNeverIdle) {
  auto e = idle_kernel();
  std::vector<std::optional<unsigned>> utils(21, 0U);
  utils.back() = std::nullopt;
  e.history = readings(utils);
  EXPECT_EQ(reason(e), Reason::UnknownUtilization);
  e.history = {};
  EXPECT_EQ(reason(e), Reason::UnknownUtilization);
  // Unknown readings in the middle break the idle run: idle only since the last unknown one.
  utils = std::vector<std::optional<unsigned>>(21, 0U);
  utils[15] = std::nullopt;
  e.history = readings(utils);
  EXPECT_EQ(reason(e), Reason::RecentlyBusy);
}

TEST(Decide, Busy) {
  auto e = idle_kernel();
  std::vector<std::optional<unsigned>> utils(21, 0U);
  utils.back() = 35U;
  e.history = readings(utils);
  const auto d = decide_one(e, rules(), root());
  EXPECT_EQ(d.reason, Reason::Busy);
  EXPECT_EQ(d.detail, "SM 35 %");
}

TEST(Decide, NeverMoreIdleTimeThanObserved) {
  auto e = idle_kernel();
  e.history = readings(std::vector<std::optional<unsigned>>(4, 0U));  // watched 3 minutes, all idle
  const auto d = decide_one(e, rules(), root());
  EXPECT_EQ(d.reason, Reason::ObservedTooShort);
  EXPECT_NE(d.detail.find("watched 3m"), std::string::npos) << d.detail;
}

TEST(Decide, RecentlyBusy) {
  auto e = idle_kernel();
  std::vector<std::optional<unsigned>> utils(21, 0U);
  utils[16] = 80U;  // busy 4 minutes ago: seen idle only from the next reading on
  e.history = readings(utils);
  const auto d = decide_one(e, rules(), root());
  EXPECT_EQ(d.reason, Reason::RecentlyBusy);
  EXPECT_NE(d.detail.find("idle 3m of --idle-for 10m"), std::string::npos) << d.detail;
}

TEST(Decide, SafetyIsNamedBeforeUtilization) {
  // A protected, busy, young process of another user: the first reason is the allow-list.
  auto e = idle_kernel();
  e.process.host.name = "nvidia-smi";
  e.age_ms = kMin;
  e.history = readings({50U});
  EXPECT_EQ(reason(e, rules(), Caller{kBob, 99, {}, false}), Reason::Protected);
}

TEST(Decide, EveryReasonHasAWordAndASentence) {
  for (int r = 0; r <= static_cast<int>(Reason::RecentlyBusy); ++r) {
    EXPECT_STRNE(to_string(static_cast<Reason>(r)), "unknown");
    EXPECT_STRNE(describe(static_cast<Reason>(r)), "unknown");
  }
}

}  // namespace
}  // namespace tarmac::reap
