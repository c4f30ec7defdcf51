#include "tarmac/cli/reap_command.hpp"

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "../reap/reap_test_support.hpp"
#include "cli_test_support.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {
namespace {

using detail::ReapFlags;
using detail::ReapReport;
using detail::ReapRow;
using testing::has_raw_control;
using testing::TempDir;

constexpr long long kMin = 60 * 1000;

class NoGpus final : public gpu::Backend {
 public:
  Result<gpu::Snapshot> snapshot(const gpu::SnapshotOptions&) override { return gpu::Snapshot{}; }
};

std::string settings_error(const ReapFlags& flags) {
  const auto s = detail::reap_settings(flags, reap::ReaperConfig{});
  return s.ok() ? std::string() : s.error().message;
}

// A candidate: 4 GiB at 0 % for 20 minutes, with a hostile command line.
ReapRow candidate_row(unsigned pid, const std::string& command = "python3 -m ipykernel\x1b]0;owned\x07") {
  ReapRow row;
  auto& e = row.evidence;
  e.gpu = 2;
  e.process.pid = pid;
  e.process.used_mem_bytes = 4 * util::kGiB;
  e.process.host.user = "alice";
  e.process.host.uid = 1000;
  e.process.host.name = "python3";
  e.process.host.command_line = command;
  e.tty = "pts/3";
  std::vector<reap::Observation> obs;
  for (long long t = 0; t <= 20; ++t) obs.push_back({t * kMin, 0U, 4 * util::kGiB, reap::UtilSource::PerProcess});
  e.history = reap::idle_history(obs, 2 * kMin);
  row.decision = {reap::Reason::Candidate, "idle 20m (SM 0 %, per-process)"};
  return row;
}

ReapRow busy_row() {
  ReapRow row = candidate_row(77, "python3 train.py");
  row.decision = {reap::Reason::Busy, "SM 90 %"};
  return row;
}

TEST(ReapSettings, DefaultsFromTheConfigurationAndTheCappedWindow) {
  const auto s = detail::reap_settings({}, reap::ReaperConfig{});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->rules.idle_for_ms, 10 * kMin);
  EXPECT_EQ(s->gather.window_ms, 5 * kMin) << "the default watch is --idle-for, at most 5 minutes";
  EXPECT_EQ(s->gather.idle_for_ms, 10 * kMin);
  EXPECT_FALSE(s->kill);
  const auto t = detail::reap_settings({.idle_for = "2s", .min_memory = "1GiB", .gpus = "0,3", .user = "alice",
                                        .grace = "1s", .kill = true},
                                       reap::ReaperConfig{});
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->gather.window_ms, 2000);
  EXPECT_EQ(t->rules.min_memory_bytes, util::kGiB);
  EXPECT_EQ(t->gather.gpus, (std::vector<unsigned>{0, 3}));
  EXPECT_EQ(t->gather.user, "alice");
  EXPECT_EQ(t->rules.grace_ms, 1000);
  EXPECT_TRUE(t->kill);
  EXPECT_EQ(detail::reap_settings({.idle_for = "1h", .window = "30s"}, {})->gather.window_ms, 30'000);
}

TEST(ReapSettings, BadFlagsAreNamed) {
  EXPECT_EQ(settings_error({.idle_for = "soon"}), "reap --idle-for soon: expected a duration like 30s or 10m");
  EXPECT_EQ(settings_error({.min_memory = "lots"}), "reap --min-memory lots: expected a size like 512MiB or 2GiB");
  EXPECT_EQ(settings_error({.gpus = "x"}), "reap --gpu x: expected GPU indices like 0,2");
  EXPECT_EQ(settings_error({.window = "2h"}), "reap --window: at most 1h");
  EXPECT_EQ(settings_error({.grace = "2h"}), "reap --grace: at most 1h (a holder gets SIGKILL within that bound)");
}

TEST(ReapReport, TextShowsEvidenceEscaped) {
  ReapReport report;
  report.watched_ms = 2000;
  report.store_note = "no agent store at /var/lib/tarmac/tarmac.db";
  report.rows = {candidate_row(4242), busy_row()};
  const std::string text = detail::report_text(report);
  EXPECT_FALSE(has_raw_control(text)) << text;
  EXPECT_NE(text.find("evidence: watched 2s (no agent store at /var/lib/tarmac/tarmac.db)"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU 2  pid 4242  alice  python3 -m ipykernel\\x1b]0;owned\\x07  4.0 GiB  CANDIDATE: idle 20m"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("busy: SM 90 %"), std::string::npos) << text;
  EXPECT_NE(text.find("tty pts/3"), std::string::npos) << text;
  EXPECT_NE(text.find("1 candidate; dry run: nothing was signalled (add --kill to end it)"), std::string::npos) << text;
}

TEST(ReapReport, JsonFollowsTheSchema) {
  ReapReport report;
  report.time_unix_ms = 1'800'000'000'000;
  report.rows = {candidate_row(4242), busy_row()};
  const auto j = detail::report_json(report);
  EXPECT_EQ(j["schema"], "tarmac.reap/1");
  EXPECT_EQ(j["mode"], "dry-run");
  EXPECT_EQ(j["evidence"]["source"], "watch");
  EXPECT_EQ(j["candidates"], 1);
  EXPECT_EQ(j["reaped"], 0);
  const auto& p = j["processes"][0];
  EXPECT_EQ(p["pid"], 4242);
  EXPECT_EQ(p["decision"], "candidate");
  EXPECT_EQ(p["idle_ms"], 20 * kMin);
  EXPECT_EQ(p["observed_ms"], 20 * kMin);
  EXPECT_EQ(p["idle_since_unix_ms"], 1'800'000'000'000 - 20 * kMin);
  EXPECT_EQ(p["util_source"], "per-process");
  EXPECT_EQ(p["history"].size(), reap::kRecentObservations);
  EXPECT_TRUE(p["action"].is_null());
  EXPECT_EQ(j["processes"][1]["decision"], "busy");
  for (const char* key : {"gpu_uuid", "user", "uid", "name", "command", "state", "start_time_unix", "age_ms", "tty",
                          "parent_pid", "children", "container", "slurm_job", "tarmac_job", "mem_used_bytes",
                          "hidden_holders", "sm_util_pct", "why"}) {
    EXPECT_TRUE(p.contains(key)) << key;
  }
}

TEST(ReapExitCode, CandidatesLeftAreProblems) {
  ReapReport report;
  report.rows = {busy_row()};
  EXPECT_EQ(detail::reap_exit_code(report), kExitOk);
  report.rows.push_back(candidate_row(4242));
  EXPECT_EQ(detail::reap_exit_code(report), kExitProblems) << "a dry run with a candidate";
  report.kill = true;
  report.rows.back().action = reap::KillResult{};
  report.rows.back().action->outcome = reap::Outcome::Ended;
  report.rows.back().action->memory_freed = true;
  EXPECT_EQ(detail::reap_exit_code(report), kExitOk);
  report.rows.back().action->memory_freed = false;
  EXPECT_EQ(detail::reap_exit_code(report), kExitProblems) << "a holder whose memory was not freed";
}

// A process the kill switch must protect: a real one, so that a signal would show.
util::Child sleeper() {
  util::ProcessSpec spec;
  spec.path = "/bin/sleep";
  spec.argv = {"sleep", "1000"};
  spec.fds = {{0, util::kDevNull}};  // the tests' stand-in for the GPU's device file
  auto child = util::start_process(spec);
  EXPECT_TRUE(child.ok());
  return std::move(*child);
}

ReapReport kill_report_for(const util::Child& child, const host::ProcReader& proc) {
  ReapReport report;
  report.kill = true;
  ReapRow row = candidate_row(static_cast<unsigned>(child.pid));
  row.evidence.process.host = proc.read(static_cast<unsigned>(child.pid));
  row.evidence.identity = proc.identity(static_cast<unsigned>(child.pid));
  row.evidence.gpu = 0;
  row.evidence.gpu_uuid = "GPU-0";
  row.evidence.age_ms = 60 * kMin;
  row.evidence.source = reap::EvidenceSource::Store;  // what root's --kill acts on
  row.evidence.device_file = reap::test_support::test_device_file();
  row.evidence.holding = host::Holding::Holds;
  report.rows = {row};
  report.surveyed = {{row.evidence.process.pid, reap::Reason::Candidate}};
  report.rules.grace_ms = 30'000;
  return report;
}

TEST(ReapKill, TheKillSwitchStopsEverything) {
  TempDir dir;
  const std::string kill_switch = dir.path() + "/reap.disabled";
  std::ofstream(kill_switch) << "maintenance\n";
  const host::ProcReader proc = reap::test_support::test_proc_reader();
  auto child = sleeper();
  ReapReport report = kill_report_for(child, proc);
  report.rules.kill_switch = kill_switch;
  NoGpus gpus;
  const util::SystemClock clock;
  reap::kill_candidates(report, reap::Caller{geteuid(), getpid(), {}, false}, proc, gpus, clock);
  EXPECT_TRUE(report.kill_switch_present);
  EXPECT_FALSE(report.rows[0].action);
  EXPECT_EQ(report.rows[0].left_because, "the kill switch " + kill_switch + " exists");
  EXPECT_FALSE(util::wait_for(child, 0)->has_value()) << "the kill switch did not stop the signal";
  EXPECT_EQ(detail::reap_exit_code(report), kExitProblems);
  EXPECT_EQ(detail::report_json(report)["processes"][0]["action"]["outcome"], "left");
  (void)util::send_signal(child, SIGKILL);
  (void)util::wait_for(child, 30'000);
}

// Medium finding (c): for --kill, a missing lock directory means "no tarmac jobs" only outside
// /tmp, where a private /tmp (systemd's PrivateTmp=) can hide the real one.
TEST(ReapKill, AMissingLockDirectoryUnderTmpStopsKill) {
  EXPECT_TRUE(detail::missing_lock_dir_refusal("/tmp/tarmac-reap-test-no-such-locks", true));
  EXPECT_TRUE(detail::missing_lock_dir_refusal("/var/tmp/tarmac-reap-test-no-such-locks", true));
  EXPECT_FALSE(detail::missing_lock_dir_refusal("/tmp/tarmac-reap-test-no-such-locks", false)) << "a dry run goes on";
  EXPECT_FALSE(detail::missing_lock_dir_refusal("/run/tarmac-reap-test-no-such/locks", true));
  TempDir dir;
  EXPECT_FALSE(detail::missing_lock_dir_refusal(dir.path(), true)) << "one that exists is read";
}

// Root's --kill without an agent store to read stops before it watches: a watch's evidence never
// lets root end a process (reap/decide.cpp), so the watch would change nothing. A dry run, and a
// user's own --kill, go on.
TEST(ReapKill, RootsKillWithoutAStoreStopsBeforeItWatches) {
  TempDir dir;
  const std::string missing = dir.path() + "/none.db";
  reap::Caller caller;
  caller.uid = 0;
  caller.intent = reap::Intent::Kill;
  const auto refusal = detail::storeless_kill_refusal(caller, missing);
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->find("no agent store at " + missing), std::string::npos) << *refusal;
  EXPECT_NE(refusal->find("nothing was done"), std::string::npos) << *refusal;
  std::ofstream(missing) << "";
  EXPECT_FALSE(detail::storeless_kill_refusal(caller, missing)) << "a store to read: the pass goes on";
  std::filesystem::remove(missing);
  caller.intent = reap::Intent::Report;
  EXPECT_FALSE(detail::storeless_kill_refusal(caller, missing)) << "a dry run watches";
  caller.intent = reap::Intent::Kill;
  caller.uid = 1000;
  EXPECT_FALSE(detail::storeless_kill_refusal(caller, missing)) << "a user's own --kill watches";
}

// N5 of reap's second review: reap (a dry run too) reads the scheduler's leases without removing
// a stale lease file: as root it could otherwise delete any user's.
TEST(ReapLeases, AStaleLeaseFileIsLeftInPlace) {
  TempDir tmp;
  const std::string dir = tmp / "locks";
  auto leases = sched::LeaseDir::open(dir);
  ASSERT_TRUE(leases.ok()) << leases.error().message;
  const sched::Lease expired{.uuid = "GPU-old", .pid = 0, .starttime = 0, .expires_unix_ms = 1, .job_id = "old", .user = "bob"};
  const sched::Lease mine{.uuid = "GPU-mine", .pid = ::getpid(), .starttime = *sched::process_starttime(::getpid()),
                          .expires_unix_ms = 0, .job_id = "mine", .user = "me"};
  ASSERT_TRUE(leases->write({expired, mine}).ok());
  const auto listed = detail::job_leases(dir, 0);
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  ASSERT_EQ(listed->size(), 1U);
  EXPECT_EQ(listed->front().job_id, "mine");
  EXPECT_TRUE(std::filesystem::exists(dir + "/gpu-GPU-old.lease")) << "the stale lease file was removed";
}

// N4: a user holding the directory's `.lock` (0644: flock works on a read-only descriptor) does not
// stop the listing, so cannot switch --kill off.
TEST(ReapLeases, AHeldLockDoesNotStopTheListing) {
  TempDir tmp;
  const std::string dir = tmp / "locks";
  auto leases = sched::LeaseDir::open(dir);
  ASSERT_TRUE(leases.ok()) << leases.error().message;
  auto held = leases->lock();
  ASSERT_TRUE(held.ok()) << held.error().message;
  const auto listed = detail::job_leases(dir, 0);
  EXPECT_TRUE(listed.ok()) << listed.error().message;
}

// Low finding: as root, $STATE_DIRECTORY does not decide which store reap takes its evidence from.
// (Both rules run whoever runs the tests: the caller's euid is a parameter.)
TEST(ReapKill, AsRootTheEnvironmentDoesNotChooseTheStore) {
  ::setenv("STATE_DIRECTORY", "/tmp/tarmac-reap-test-somebodys", 1);
  config::Config config;
  EXPECT_EQ(detail::reap_store_path(config, "", 0), store::database_path("/var/lib/tarmac"));
  // A user's reap finds the store as `history` does: $STATE_DIRECTORY is theirs to set.
  EXPECT_EQ(detail::reap_store_path(config, "", 1000), store::database_path("/tmp/tarmac-reap-test-somebodys"));
  config.agent.state_dir = "/srv/tarmac";
  EXPECT_EQ(detail::reap_store_path(config, "", 0), store::database_path("/srv/tarmac"));
  EXPECT_EQ(detail::reap_store_path(config, "/x/t.db", 0), "/x/t.db");
  ::unsetenv("STATE_DIRECTORY");
}

TEST(ReapKill, AtMostMaxKills) {
  const host::ProcReader proc = reap::test_support::test_proc_reader();
  auto child = sleeper();
  ReapReport report = kill_report_for(child, proc);
  report.rules.kill_switch = "/nonexistent/reap.disabled";
  report.rules.max_kills = 0;
  reap::test_support::LiveGpus gpus({{0, static_cast<unsigned>(child.pid), 0U}});
  const util::SystemClock clock;
  reap::kill_candidates(report, reap::Caller{geteuid(), getpid(), {}, false}, proc, gpus, clock);
  EXPECT_EQ(report.rows[0].left_because, "reaper.max_kills (0) reached");
  EXPECT_FALSE(util::wait_for(child, 0)->has_value());
  report.rules.max_kills = 1;
  report.rows[0].left_because.clear();
  reap::kill_candidates(report, reap::Caller{geteuid(), getpid(), {}, false}, proc, gpus, clock);
  ASSERT_TRUE(report.rows[0].action);
  EXPECT_EQ(report.rows[0].action->outcome, reap::Outcome::Ended);
  EXPECT_EQ(detail::reap_exit_code(report), kExitOk);
  EXPECT_TRUE(util::wait_for(child, 30'000)->has_value());
}

}  // namespace
}  // namespace tarmac::cli
