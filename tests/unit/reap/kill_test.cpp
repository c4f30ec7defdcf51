#include "tarmac/reap/kill.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <thread>

#include "tarmac/reap/gather.hpp"
#include "tarmac/util/process.hpp"

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

ProcessEvidence evidence_of(const host::ProcReader& proc, unsigned pid) {
  ProcessEvidence e;
  e.process.pid = pid;
  e.process.host = proc.read(pid);
  e.identity = proc.identity(pid);
  return e;
}

void end(util::Child& child) {
  (void)util::send_signal(child, SIGKILL);
  (void)util::wait_for(child, kHang);
}

TEST(Kill, SigtermEndsAHolderThroughItsPidfd) {
  const host::ProcReader proc;
  auto child = start("exec sleep 1000");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  const auto identity = proc.identity(static_cast<unsigned>(child.pid));
  ASSERT_TRUE(identity);
  KillResult result;
  EXPECT_TRUE(end_targets({{*identity, "holder"}}, proc, kHang, result));
  ASSERT_EQ(result.steps.size(), 1U);
  EXPECT_TRUE(result.steps[0].sent);
  EXPECT_EQ(result.last_signal, SIGTERM);
  const auto status = util::wait_for(child, kHang);
  ASSERT_TRUE(status.ok() && status->has_value());
  EXPECT_TRUE(WIFSIGNALED(**status) && WTERMSIG(**status) == SIGTERM);
}

TEST(Kill, APidWhoseStartTimeChangedIsNeverSignalled) {
  const host::ProcReader proc;
  auto child = start("exec sleep 1000");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  auto identity = *proc.identity(static_cast<unsigned>(child.pid));
  // What was recorded at first sight belonged to an earlier process with the same pid.
  identity.starttime_ticks -= 1;
  KillResult result;
  EXPECT_TRUE(end_targets({{identity, "holder"}}, proc, 100, result));
  ASSERT_EQ(result.steps.size(), 1U);
  EXPECT_FALSE(result.steps[0].sent);
  EXPECT_EQ(result.steps[0].note, "its pid names another process now");
  EXPECT_EQ(result.last_signal, 0);
  const auto status = util::wait_for(child, 0);
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE(status->has_value()) << "the process whose identity did not match was signalled";
  // Another boot's record is another process too.
  identity = *proc.identity(static_cast<unsigned>(child.pid));
  identity.boot_id = "another boot";
  KillResult again;
  EXPECT_TRUE(end_targets({{identity, "holder"}}, proc, 100, again));
  EXPECT_FALSE(again.steps[0].sent);
  EXPECT_FALSE(util::wait_for(child, 0)->has_value());
  end(child);
}

TEST(Kill, AHolderThatIgnoresSigtermGetsSigkillAfterTheGrace) {
  const host::ProcReader proc;
  auto child = start("trap '' TERM; exec sleep 1000");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  // exec'd sleep keeps SIGTERM ignored: wait until the exec happened.
  ASSERT_TRUE(eventually([&] { return proc.read(static_cast<unsigned>(child.pid)).name == "sleep"; }));
  const auto identity = *proc.identity(static_cast<unsigned>(child.pid));
  KillResult result;
  EXPECT_TRUE(end_targets({{identity, "holder"}}, proc, 200, result));
  EXPECT_EQ(result.last_signal, SIGKILL);
  const auto status = util::wait_for(child, kHang);
  ASSERT_TRUE(status.ok() && status->has_value());
  EXPECT_TRUE(WIFSIGNALED(**status) && WTERMSIG(**status) == SIGKILL);
}

TEST(Kill, ReapProcessEndsTheTreeAndSeesTheMemoryFreed) {
  const host::ProcReader proc;
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
  const auto result = reap_process(evidence_of(proc, static_cast<unsigned>(child.pid)), config, me(proc), proc, gpus, clock);
  EXPECT_EQ(result.outcome, Outcome::Ended) << result.message;
  ASSERT_EQ(result.steps.size(), 2U);
  EXPECT_EQ(result.steps[1].role, "descendant");
  EXPECT_EQ(result.steps[1].pid, kids[0]);
  EXPECT_EQ(result.memory_freed, true);
  (void)util::wait_for(child, kHang);
}

TEST(Kill, ADefunctHolderIsEndedThroughItsParentAlone) {
  const host::ProcReader proc;
  // sh starts `true` and a sleeping sibling, then becomes `sleep`, which never reaps `true`: a
  // zombie whose parent lives on, next to another child of that parent.
  auto child = start("true & sleep 1000 & exec sleep 1000");
  const auto parent = static_cast<unsigned>(child.pid);
  std::vector<unsigned> kids;
  unsigned zombie = 0;
  unsigned sibling = 0;
  ASSERT_TRUE(eventually([&] {
    kids = proc.children(parent);
    if (kids.size() != 2 || proc.read(parent).name != "sleep") return false;
    for (const unsigned k : kids) (proc.read(k).state == 'Z' ? zombie : sibling) = k;
    return zombie != 0 && sibling != 0;
  }));
  const auto sibling_identity = proc.identity(sibling);
  NoGpus gpus;
  ReaperConfig config;
  config.grace_ms = kHang;
  const util::SystemClock clock;
  const auto result = reap_process(evidence_of(proc, zombie), config, me(proc), proc, gpus, clock);
  EXPECT_EQ(result.outcome, Outcome::Ended) << result.message;
  ASSERT_EQ(result.steps.size(), 1U) << "the parent alone: its other children are not the holder's";
  EXPECT_EQ(result.steps[0].role, "parent");
  EXPECT_EQ(result.steps[0].pid, parent);
  const auto status = util::wait_for(child, kHang);
  ASSERT_TRUE(status.ok() && status->has_value());
  EXPECT_EQ(proc.identity(sibling), sibling_identity) << "the sibling was signalled";
  ::kill(static_cast<pid_t>(sibling), SIGKILL);  // the test's own child's child, by the test
}

TEST(Kill, AHolderGoneBeforeTheFirstSignalGetsNone) {
  const host::ProcReader proc;
  auto child = start("exec sleep 1000");
  ASSERT_TRUE(wait_state(proc, static_cast<unsigned>(child.pid), 'S'));
  const auto e = evidence_of(proc, static_cast<unsigned>(child.pid));
  end(child);  // reaped: the pid names nobody (or, later, somebody else)
  NoGpus gpus;
  const util::SystemClock clock;
  const auto result = reap_process(e, ReaperConfig{}, me(proc), proc, gpus, clock);
  EXPECT_TRUE(result.outcome == Outcome::Gone || result.outcome == Outcome::IdentityChanged) << to_string(result.outcome);
  EXPECT_TRUE(result.steps.empty());
}

}  // namespace
}  // namespace tarmac::reap
