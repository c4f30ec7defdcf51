#include "tarmac/reap/kill.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include <filesystem>
#include <fstream>

#include "../store/temp_dir.hpp"
#include "reap_test_support.hpp"
#include "tarmac/reap/gather.hpp"
#include "tarmac/reap/pass.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::reap {
namespace {

constexpr long long kHang = 30'000;  // only a hang reaches it: every wait below ends on an event

// A GPU backend that lists nothing: every holder's memory reads as freed.
class NoGpus final : public gpu::Backend {
 public:
  Result<gpu::Snapshot> snapshot(const gpu::SnapshotOptions&) override { return gpu::Snapshot{}; }
};

util::Child start(const std::string& script) {
  util::ProcessSpec spec;
  spec.path = "/bin/sh";
  spec.argv = {"sh", "-c", script};
  spec.env = {"PATH=/bin:/usr/bin"};
  spec.fds = {{0, util::kDevNull}, {1, util::kDevNull}, {2, util::kDevNull}};
  auto child = util::start_process(spec);
  EXPECT_TRUE(child.ok()) << child.error().message;
  return std::move(*child);
}

// Polls `condition` (what /proc shows) until it holds; false on a hang.
template <typename Condition>
bool eventually(Condition condition) {
  for (long long waited = 0; waited < kHang; waited += 5) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

bool wait_state(const host::ProcReader& proc, unsigned pid, char state) {
  return eventually([&] { return proc.read(pid).state == state; });
}

Caller me(const host::ProcReader& proc) {
  return Caller{geteuid(), getpid(), ancestors_of(proc, static_cast<unsigned>(getpid())), false};
}

using test_support::kMin;
using test_support::LiveGpus;
using test_support::test_device_file;

// What gather gives a holder on GPU 0 whose device file (test_device_file) its descriptor 0 is.
ProcessEvidence evidence_of(const host::ProcReader& proc, unsigned pid) {
  ProcessEvidence e;
  e.gpu = 0;
  e.gpu_uuid = "GPU-0";
  e.process.pid = pid;
  e.process.host = proc.read(pid);
  e.process.used_mem_bytes = 4 * util::kGiB;
  e.identity = proc.identity(pid);
  e.device_file = test_device_file();
  e.holding = proc.holds_device(pid, *e.device_file);
  return e;
}

// The same holder as a candidate of a pass: idle 20 minutes, old enough.
Row candidate_row(const host::ProcReader& proc, unsigned pid) {
  Row row;
  row.evidence = evidence_of(proc, pid);
  row.evidence.source = EvidenceSource::Store;  // what root's --kill acts on
  row.evidence.age_ms = 60 * kMin;
  std::vector<Observation> obs;
  for (long long t = 0; t <= 20; ++t) obs.push_back({t * kMin, 0U, 4 * util::kGiB, UtilSource::PerProcess});
  row.evidence.history = idle_history(obs, 2 * kMin);
  row.decision = {Reason::Candidate, "idle 20m"};
  return row;
}

// The survey's decisions for the tree of `pid`: every one of its processes a candidate.
SurveyDecisions candidates(const host::ProcReader& proc, unsigned pid) {
  SurveyDecisions out{{pid, Reason::Candidate}};
  for (const unsigned d : proc.descendants(pid)) out[d] = Reason::Candidate;
  return out;
}

// A --kill pass whose one candidate is `pid`, surveyed a candidate with its whole tree.
Pass kill_pass(const host::ProcReader& proc, unsigned pid) {
  Pass pass;
  pass.kill = true;
  pass.rules.min_age_ms = 0;
  pass.rules.kill_switch = "/nonexistent/reap.disabled";
  pass.rules.grace_ms = kHang;
  pass.rows = {candidate_row(proc, pid)};
  pass.surveyed = candidates(proc, pid);
  return pass;
}

bool alive(const util::Child& child) {
  const auto status = util::wait_for(child, 0);
  return status.ok() && !status->has_value();
}

void end(util::Child& child) {
  (void)util::send_signal(child, SIGKILL);
  (void)util::wait_for(child, kHang);
}

TEST(Kill, SigtermEndsAHolderThroughItsPidfd) {
  const host::ProcReader proc = test_support::test_proc_reader();
  auto child = start("exec sleep 1000");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  NoGpus gpus;
  ReaperConfig config;
  config.grace_ms = kHang;
  const util::SystemClock clock;
  const auto pid = static_cast<unsigned>(child.pid);
  const auto result = reap_process(evidence_of(proc, pid), config, me(proc), proc, gpus, clock, candidates(proc, pid));
  EXPECT_EQ(result.outcome, Outcome::Ended) << result.message;
  ASSERT_EQ(result.steps.size(), 1U);
  EXPECT_TRUE(result.steps[0].sent);
  EXPECT_EQ(result.last_signal, SIGTERM);
  const auto status = util::wait_for(child, kHang);
  ASSERT_TRUE(status.ok() && status->has_value());
  EXPECT_TRUE(WIFSIGNALED(**status) && WTERMSIG(**status) == SIGTERM);
}

TEST(Kill, APidWhoseStartTimeChangedIsNeverSignalled) {
  const host::ProcReader proc = test_support::test_proc_reader();
  auto child = start("exec sleep 1000");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  const auto pid = static_cast<unsigned>(child.pid);
  auto e = evidence_of(proc, pid);
  // What was recorded at first sight belonged to an earlier process with the same pid.
  e.identity->starttime_ticks -= 1;
  NoGpus gpus;
  const util::SystemClock clock;
  const auto result = reap_process(e, ReaperConfig{}, me(proc), proc, gpus, clock, candidates(proc, pid));
  EXPECT_EQ(result.outcome, Outcome::IdentityChanged) << result.message;
  EXPECT_TRUE(result.steps.empty());
  EXPECT_EQ(result.last_signal, 0);
  const auto status = util::wait_for(child, 0);
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE(status->has_value()) << "the process whose identity did not match was signalled";
  // Another boot's record is another process too.
  e = evidence_of(proc, pid);
  e.identity->boot_id = "another boot";
  const auto again = reap_process(e, ReaperConfig{}, me(proc), proc, gpus, clock, candidates(proc, pid));
  EXPECT_EQ(again.outcome, Outcome::IdentityChanged) << again.message;
  EXPECT_FALSE(util::wait_for(child, 0)->has_value());
  end(child);
}

TEST(Kill, AHolderThatIgnoresSigtermGetsSigkillAfterTheGrace) {
  const host::ProcReader proc = test_support::test_proc_reader();
  auto child = start("trap '' TERM; exec sleep 1000");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  // exec'd sleep keeps SIGTERM ignored: wait until the exec happened.
  ASSERT_TRUE(eventually([&] { return proc.read(static_cast<unsigned>(child.pid)).name == "sleep"; }));
  NoGpus gpus;
  ReaperConfig config;
  config.grace_ms = 200;
  const util::SystemClock clock;
  const auto pid = static_cast<unsigned>(child.pid);
  const auto result = reap_process(evidence_of(proc, pid), config, me(proc), proc, gpus, clock, candidates(proc, pid));
  EXPECT_EQ(result.outcome, Outcome::Killed) << result.message;
  EXPECT_EQ(result.last_signal, SIGKILL);
  const auto status = util::wait_for(child, kHang);
  ASSERT_TRUE(status.ok() && status->has_value());
  EXPECT_TRUE(WIFSIGNALED(**status) && WTERMSIG(**status) == SIGKILL);
}

TEST(Kill, ReapProcessEndsTheTreeAndSeesTheMemoryFreed) {
  const host::ProcReader proc = test_support::test_proc_reader();
  // A holder with a worker child (a DataLoader's shape).
  auto child = start("sleep 1000 & wait");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  std::vector<unsigned> kids;
  ASSERT_TRUE(eventually([&] { return !(kids = proc.children(static_cast<unsigned>(child.pid))).empty(); }));
  ASSERT_EQ(kids.size(), 1U);
  NoGpus gpus;
  ReaperConfig config;
  config.grace_ms = kHang;
  const util::SystemClock clock;
  const auto result = reap_process(evidence_of(proc, static_cast<unsigned>(child.pid)), config, me(proc), proc, gpus, clock, candidates(proc, static_cast<unsigned>(child.pid)));
  EXPECT_EQ(result.outcome, Outcome::Ended) << result.message;
  ASSERT_EQ(result.steps.size(), 2U);
  EXPECT_EQ(result.steps[1].role, "descendant");
  EXPECT_EQ(result.steps[1].pid, kids[0]);
  EXPECT_EQ(result.memory_freed, true);
  (void)util::wait_for(child, kHang);
}

// Critical finding C1 of the review: a listed pid whose process does not have the GPU's device file
// open is not the holder (the listed one ended, its context kept by a child that inherited the
// file, and the pid now names someone else): nothing is sent. The old code signalled it.
TEST(Kill, AHolderWithoutTheGpusDeviceFileOpenGetsNoSignal) {
  const host::ProcReader proc = test_support::test_proc_reader();
  auto child = start("exec sleep 1000");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  auto e = evidence_of(proc, static_cast<unsigned>(child.pid));
  e.device_file = test_support::unheld_device_file();
  NoGpus gpus;
  const util::SystemClock clock;
  auto result = reap_process(e, ReaperConfig{}, me(proc), proc, gpus, clock, candidates(proc, e.process.pid));
  EXPECT_EQ(result.outcome, Outcome::Refused);
  EXPECT_NE(result.message.find("does not have the GPU's device file"), std::string::npos) << result.message;
  EXPECT_TRUE(result.steps.empty());
  // A GPU whose file cannot be told (MIG, no minor number): fail closed.
  e.device_file.reset();
  result = reap_process(e, ReaperConfig{}, me(proc), proc, gpus, clock, candidates(proc, e.process.pid));
  EXPECT_EQ(result.outcome, Outcome::Refused);
  EXPECT_TRUE(alive(child)) << "a process that does not hold the GPU was signalled";
  end(child);
}

// High finding H2: a descendant passes the rules the holder passed; one that is protected refuses
// the whole candidate (never half a tree). The old code ended both.
TEST(Kill, AProtectedDescendantRefusesTheWholeTree) {
  const host::ProcReader proc = test_support::test_proc_reader();
  auto child = start("sleep 1000 & wait");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  std::vector<unsigned> kids;
  ASSERT_TRUE(eventually([&] {
    kids = proc.children(static_cast<unsigned>(child.pid));
    return kids.size() == 1 && proc.read(kids[0]).name == "sleep";
  }));
  NoGpus gpus;
  ReaperConfig config;
  config.allow_commands = {"sleep"};
  const util::SystemClock clock;
  const auto result = reap_process(evidence_of(proc, static_cast<unsigned>(child.pid)), config, me(proc), proc, gpus, clock, candidates(proc, static_cast<unsigned>(child.pid)));
  EXPECT_EQ(result.outcome, Outcome::Refused);
  EXPECT_NE(result.message.find("is protected: reaper.allow_commands (sleep)"), std::string::npos) << result.message;
  EXPECT_EQ(result.last_signal, 0);
  EXPECT_TRUE(alive(child));
  EXPECT_TRUE(wait_state(proc, kids[0], 'S')) << "neither stopped nor ended (a sleep just exec'd may still be running)";
  ::kill(static_cast<pid_t>(kids[0]), SIGKILL);  // the test's own child's child, by the test
  end(child);
}

// A fake /proc under which the real process `holder` (its entry a link to the real one) has for
// a descendant `tid`, a thread of this test: pidfd_open refuses a thread that is not its group's
// leader (EINVAL), a failure to hold it that is not "it had already ended".
class TreeWithAnUnholdableDescendant {
 public:
  TreeWithAnUnholdableDescendant(unsigned holder, unsigned tid)
      : root_(std::filesystem::temp_directory_path() / ("tarmac-kill-" + std::to_string(getpid()))) {
    namespace fs = std::filesystem;
    fs::create_directories(root_ / std::to_string(tid));
    fs::create_directory_symlink("/proc/" + std::to_string(holder), root_ / std::to_string(holder));
    fs::create_directory_symlink("/proc/sys", root_ / "sys");  // the boot id
    fs::create_symlink("/proc/stat", root_ / "stat");          // the boot time
    std::ifstream real("/proc/self/task/" + std::to_string(tid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(real)), std::istreambuf_iterator<char>());
    // "tid (comm) S ppid ...": the parent becomes the holder.
    const auto after = stat.rfind(')') + 4;
    stat.replace(after, stat.find(' ', after) - after, std::to_string(holder));
    std::ofstream(root_ / std::to_string(tid) / "stat") << stat;
  }
  ~TreeWithAnUnholdableDescendant() { std::filesystem::remove_all(root_); }
  [[nodiscard]] std::string root() const { return root_.string(); }

 private:
  std::filesystem::path root_;
};

// L1 of the third review: a descendant that cannot be held (in production, pidfd_open out of
// descriptors in a large tree) refuses the whole candidate: it never met the rules a descendant
// must pass. The old code skipped it and ended the holder.
TEST(Kill, ADescendantThatCannotBeHeldRefusesTheWholeTree) {
  auto child = start("exec sleep 1000");
  const auto pid = static_cast<unsigned>(child.pid);
  ASSERT_TRUE(wait_state(test_support::test_proc_reader(), pid, 'S'));
  std::promise<unsigned> tid;
  std::promise<void> done;
  std::thread thread([&] {
    tid.set_value(static_cast<unsigned>(gettid()));
    done.get_future().wait();
  });
  const TreeWithAnUnholdableDescendant tree(pid, tid.get_future().get());
  const host::ProcReader proc(tree.root(), test_support::kTestDevicePath);
  ASSERT_EQ(proc.descendants(pid).size(), 1U);
  NoGpus gpus;
  ReaperConfig config;
  config.grace_ms = kHang;
  const util::SystemClock clock;
  const auto result = reap_process(evidence_of(proc, pid), config, me(proc), proc, gpus, clock, candidates(proc, pid));
  done.set_value();
  thread.join();
  EXPECT_EQ(result.outcome, Outcome::Refused) << to_string(result.outcome);
  EXPECT_NE(result.message.find("cannot be held"), std::string::npos) << result.message;
  EXPECT_EQ(result.last_signal, 0);
  EXPECT_TRUE(alive(child));
  end(child);
}

// H2: a descendant the driver lists as busy on any GPU refuses the whole candidate.
TEST(Kill, ABusyDescendantRefusesTheWholeTree) {
  const host::ProcReader proc = test_support::test_proc_reader();
  auto child = start("sleep 1000 & wait");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  std::vector<unsigned> kids;
  ASSERT_TRUE(eventually([&] { return (kids = proc.children(static_cast<unsigned>(child.pid))).size() == 1; }));
  LiveGpus gpus({{0, static_cast<unsigned>(child.pid), 0U}, {1, kids[0], 50U}}, 2);
  const util::SystemClock clock;
  auto result = reap_process(evidence_of(proc, static_cast<unsigned>(child.pid)), ReaperConfig{}, me(proc), proc, gpus, clock, candidates(proc, static_cast<unsigned>(child.pid)));
  EXPECT_EQ(result.outcome, Outcome::Refused);
  EXPECT_NE(result.message.find("is busy on GPU 1 (50 %)"), std::string::npos) << result.message;
  gpus.set(1, kids[0], std::nullopt);  // unknown is never idle
  result = reap_process(evidence_of(proc, static_cast<unsigned>(child.pid)), ReaperConfig{}, me(proc), proc, gpus, clock, candidates(proc, static_cast<unsigned>(child.pid)));
  EXPECT_EQ(result.outcome, Outcome::Refused);
  EXPECT_NE(result.message.find("unknown utilization"), std::string::npos) << result.message;
  EXPECT_TRUE(alive(child));
  ::kill(static_cast<pid_t>(kids[0]), SIGKILL);
  end(child);
}

// High finding H3: a true zombie holds no GPU memory; it is refused, and its parent (which may be
// a session's server) is never signalled. The old code ended the parent.
TEST(Kill, ATrueZombieIsRefusedAndItsParentLeftAlone) {
  const host::ProcReader proc = test_support::test_proc_reader();
  // sh starts `true`, then becomes `sleep`, which never reaps it: a zombie whose parent lives on.
  auto child = start("true & exec sleep 1000");
  const auto parent = static_cast<unsigned>(child.pid);
  unsigned zombie = 0;
  ASSERT_TRUE(eventually([&] {
    const auto kids = proc.children(parent);
    if (kids.size() != 1 || proc.read(parent).name != "sleep" || proc.read(kids[0]).state != 'Z') return false;
    zombie = kids[0];
    return true;
  }));
  NoGpus gpus;
  const util::SystemClock clock;
  const auto result = reap_process(evidence_of(proc, zombie), ReaperConfig{}, me(proc), proc, gpus, clock, candidates(proc, zombie));
  EXPECT_EQ(result.outcome, Outcome::Refused);
  EXPECT_NE(result.message.find("look for the real holder by its device files"), std::string::npos) << result.message;
  EXPECT_TRUE(result.steps.empty());
  EXPECT_TRUE(alive(child)) << "the zombie's parent was signalled";
  end(child);
}

// H3: a thread-group leader that exited while its other threads run shows Z but holds what the
// process holds: it is signalled through its own pidfd.
TEST(Kill, ADefunctLeaderWithLiveThreadsIsEndedThroughItsOwnPidfd) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "needs /usr/bin/python3 to exit a main thread alone";
  const host::ProcReader proc = test_support::test_proc_reader();
  util::ProcessSpec spec;
  spec.path = "/usr/bin/python3";
  spec.argv = {"python3", "-c",
               "import ctypes, threading, time\n"
               "threading.Thread(target=time.sleep, args=(1000,)).start()\n"
               "ctypes.CDLL(None).pthread_exit(None)\n"};
  spec.fds = {{0, util::kDevNull}, {1, util::kDevNull}, {2, util::kDevNull}};
  auto started = util::start_process(spec);
  ASSERT_TRUE(started.ok()) << started.error().message;
  auto child = std::move(*started);
  const auto pid = static_cast<unsigned>(child.pid);
  ASSERT_TRUE(eventually([&] { return proc.read(pid).state == 'Z' && proc.live_threads(pid).value_or(0) >= 1; }));
  NoGpus gpus;
  ReaperConfig config;
  config.grace_ms = kHang;
  const util::SystemClock clock;
  const auto result = reap_process(evidence_of(proc, pid), config, me(proc), proc, gpus, clock, candidates(proc, pid));
  EXPECT_EQ(result.outcome, Outcome::Ended) << result.message;
  ASSERT_FALSE(result.steps.empty());
  EXPECT_EQ(result.steps[0].role, "holder");
  EXPECT_EQ(result.steps[0].pid, pid);
  const auto status = util::wait_for(child, kHang);
  ASSERT_TRUE(status.ok() && status->has_value());
  EXPECT_TRUE(WIFSIGNALED(**status) && WTERMSIG(**status) == SIGTERM);
}

// Medium finding (d): a kill switch created during the grace stops the SIGKILL. The holder
// ignores SIGTERM and creates the switch when it gets it. The old code read the switch once.
TEST(Kill, AKillSwitchCreatedDuringTheGraceStopsTheSigkill) {
  store::test_support::TempDir dir;
  const std::string kill_switch = dir.path() + "/reap.disabled";
  const host::ProcReader proc = test_support::test_proc_reader();
  // Its descendant lives long (a loop of short sleeps made a new child every 50 ms, and a CI run
  // under the sanitizers saw one end while its facts were read, which rightly stops the reaper); a
  // trapped SIGTERM interrupts `wait` at once, and the loop starts another sleep.
  auto child = start("trap 'echo > " + kill_switch + "' TERM; while :; do sleep 30 & wait $!; done");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  NoGpus gpus;
  ReaperConfig config;
  // The whole grace is waited (the holder ignores SIGTERM): long enough for a loaded machine's
  // shell to finish its sleep and run the trap (1 s was not, under a sanitizer run).
  config.grace_ms = 4000;
  config.kill_switch = kill_switch;
  const util::SystemClock clock;
  const auto result = reap_process(evidence_of(proc, static_cast<unsigned>(child.pid)), config, me(proc), proc, gpus, clock, candidates(proc, static_cast<unsigned>(child.pid)));
  EXPECT_EQ(result.outcome, Outcome::Stopped) << result.message;
  EXPECT_EQ(result.last_signal, SIGTERM);
  EXPECT_TRUE(std::filesystem::exists(kill_switch));
  EXPECT_TRUE(alive(child)) << "SIGKILL went out after the kill switch appeared";
  const auto sleeps = proc.descendants(static_cast<unsigned>(child.pid));  // the shell's sleep
  end(child);
  for (const unsigned pid : sleeps) ::kill(static_cast<pid_t>(pid), SIGKILL);
}

// Medium finding (a): a candidate is decided again right before its signal, by one fresh reading.
// Busy now: left, nothing sent (the old code acted on the survey's evidence).
TEST(Kill, ACandidateIsDecidedAgainBeforeItsSignal) {
  const host::ProcReader proc = test_support::test_proc_reader();
  auto child = start("exec sleep 1000");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  const auto pid = static_cast<unsigned>(child.pid);
  LiveGpus gpus({{0, pid, 40U}});
  Pass pass = kill_pass(proc, pid);
  const util::SystemClock clock;
  const Caller caller = me(proc);
  kill_candidates(pass, caller, proc, gpus, clock);
  EXPECT_FALSE(pass.rows[0].action);
  EXPECT_NE(pass.rows[0].left_because.find("decided again before the signal: busy"), std::string::npos)
      << pass.rows[0].left_because;
  EXPECT_TRUE(alive(child));
  // Idle now too: ended, and its memory freed.
  gpus.set(0, pid, 0U);
  pass.rows = {candidate_row(proc, pid)};
  kill_candidates(pass, caller, proc, gpus, clock);
  ASSERT_TRUE(pass.rows[0].action) << pass.rows[0].left_because;
  EXPECT_EQ(pass.rows[0].action->outcome, Outcome::Ended) << pass.rows[0].action->message;
  EXPECT_EQ(pass.rows[0].action->memory_freed, true);
  EXPECT_TRUE(util::wait_for(child, kHang)->has_value());
}

// N1's residual: whatever intent the caller surveyed with, kill_candidates decides for killing,
// so root ends nothing on a watch's evidence (a listing it cannot tie to the process now at the
// pid). Before the intent was the library's own, a pass surveyed as a report ended it.
TEST(Kill, RootEndsNothingOnAWatchsEvidenceWhateverTheSurveyWasFor) {
  const host::ProcReader proc = test_support::test_proc_reader();
  auto child = start("exec sleep 1000");
  const auto pid = static_cast<unsigned>(child.pid);
  ASSERT_TRUE(wait_state(proc, pid, 'S'));
  LiveGpus gpus({{0, pid, 0U}});
  Pass pass = kill_pass(proc, pid);
  pass.rows[0].evidence.source = EvidenceSource::Watch;
  Caller caller = me(proc);
  caller.uid = 0;
  caller.intent = Intent::Report;
  const util::SystemClock clock;
  kill_candidates(pass, caller, proc, gpus, clock);
  EXPECT_FALSE(pass.rows[0].action);
  EXPECT_NE(pass.rows[0].left_because.find("not-holding"), std::string::npos) << pass.rows[0].left_because;
  EXPECT_NE(pass.rows[0].left_because.find("store's evidence only"), std::string::npos) << pass.rows[0].left_because;
  EXPECT_TRUE(alive(child));
  pass.rows = {candidate_row(proc, pid)};  // the store's evidence
  kill_candidates(pass, caller, proc, gpus, clock);
  ASSERT_TRUE(pass.rows[0].action) << pass.rows[0].left_because;
  EXPECT_EQ(pass.rows[0].action->outcome, Outcome::Ended) << pass.rows[0].action->message;
  EXPECT_TRUE(util::wait_for(child, kHang)->has_value());
}

TEST(Kill, AHolderGoneBeforeTheFirstSignalGetsNone) {
  const host::ProcReader proc = test_support::test_proc_reader();
  auto child = start("exec sleep 1000");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  const auto e = evidence_of(proc, static_cast<unsigned>(child.pid));
  end(child);  // reaped: the pid names nobody (or, later, somebody else)
  NoGpus gpus;
  const util::SystemClock clock;
  const auto result = reap_process(e, ReaperConfig{}, me(proc), proc, gpus, clock, candidates(proc, e.process.pid));
  EXPECT_TRUE(result.outcome == Outcome::Gone || result.outcome == Outcome::IdentityChanged) << to_string(result.outcome);
  EXPECT_TRUE(result.steps.empty());
}

// N2 of the second review: the survey's decision of every listed tree member stands. A
// descendant the survey found busy is not ended because a fresh reading says 0 %, nor is one the
// driver lists now that the survey never saw. The old code ended the tree.
TEST(Kill, ADescendantTheSurveyDidNotFindACandidateRefusesTheTree) {
  const host::ProcReader proc = test_support::test_proc_reader();
  auto child = start("sleep 1000 & wait");
  const auto pid = static_cast<unsigned>(child.pid);
  ASSERT_TRUE(wait_state(proc, pid, 'S'));
  std::vector<unsigned> kids;
  ASSERT_TRUE(eventually([&] { return (kids = proc.children(pid)).size() == 1; }));
  LiveGpus gpus({{0, pid, 0U}, {1, kids[0], 0U}}, 2);
  ReaperConfig config;
  config.grace_ms = kHang;
  const util::SystemClock clock;
  auto surveyed = candidates(proc, pid);
  surveyed[kids[0]] = Reason::Busy;
  auto result = reap_process(evidence_of(proc, pid), config, me(proc), proc, gpus, clock, surveyed);
  EXPECT_EQ(result.outcome, Outcome::Refused);
  EXPECT_NE(result.message.find("was busy in the survey"), std::string::npos) << result.message;
  surveyed.erase(kids[0]);
  result = reap_process(evidence_of(proc, pid), config, me(proc), proc, gpus, clock, surveyed);
  EXPECT_EQ(result.outcome, Outcome::Refused);
  EXPECT_NE(result.message.find("was not in the survey"), std::string::npos) << result.message;
  EXPECT_TRUE(result.steps.empty());
  EXPECT_TRUE(alive(child));
  ::kill(static_cast<pid_t>(kids[0]), SIGKILL);
  end(child);
}

}  // namespace
}  // namespace tarmac::reap
