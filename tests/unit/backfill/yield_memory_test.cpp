// The yield's NVML confirmation (backfill/yield_memory.hpp): the bounded wait (returns at the first
// look that lists none of the server's memory; gives up after its bound, so that the SIGTERM
// follows; ends at once when NVML cannot be read), which processes count, and how a process is
// known to be the job's.
#include "tarmac/backfill/yield_memory.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <deque>

#include "tarmac/util/process.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::backfill {
namespace {

// A clock that never waits: each sleep moves it to the target.
class InstantClock final : public util::Clock {
 public:
  [[nodiscard]] long long monotonic_ms() const override { return now_; }
  [[nodiscard]] long long wall_ms() const override { return util::wall_ms(); }
  void sleep_until(long long target_ms, const std::atomic<bool>&) const override {
    sleeps_.push_back(target_ms - now_);
    now_ = std::max(now_, target_ms);
  }
  mutable std::vector<long long> sleeps_;

 private:
  mutable long long now_ = 1'000'000;
};

// A look that answers `answers` in turn (the last one for ever after), counting its calls.
ServerMemory answering(std::deque<std::optional<std::uint64_t>> answers, int& calls) {
  return [answers = std::move(answers), &calls](const sched::Job&) mutable {
    ++calls;
    auto a = answers.front();
    if (answers.size() > 1) answers.pop_front();
    return a;
  };
}

sched::Job server_job() {
  sched::Job job;
  job.id = 7;
  job.gpu_uuids = {"GPU-a"};
  return job;
}

TEST(WaitMemoryFreed, ReturnsAtTheFirstLookThatListsNone) {
  InstantClock clock;
  int calls = 0;
  const auto w = wait_memory_freed(answering({2 * util::kGiB, util::kGiB, 0}, calls), server_job(), clock, 5000, 50);
  EXPECT_EQ(w.outcome, MemoryOutcome::Freed);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(w.looks, 3);
  EXPECT_EQ(w.ms, 100);
  EXPECT_EQ(w.held_bytes, 0U);
  EXPECT_EQ(clock.sleeps_, (std::vector<long long>{50, 50}));
}

TEST(WaitMemoryFreed, MemoryFreedBeforeTheFirstLookIsNoWait) {
  InstantClock clock;
  int calls = 0;
  const auto w = wait_memory_freed(answering({0}, calls), server_job(), clock, 5000, 50);
  EXPECT_EQ(w.outcome, MemoryOutcome::Freed);
  EXPECT_EQ(w.ms, 0);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(clock.sleeps_.empty());
}

// Memory never freed: the wait gives up at its bound (the caller's SIGTERM follows), having asked
// every poll period, the last look exactly at the bound.
TEST(WaitMemoryFreed, GivesUpAfterItsBound) {
  InstantClock clock;
  int calls = 0;
  const auto w = wait_memory_freed(answering({3 * util::kGiB}, calls), server_job(), clock, 5000, 50);
  EXPECT_EQ(w.outcome, MemoryOutcome::Held);
  EXPECT_EQ(w.ms, 5000);
  EXPECT_EQ(calls, 5000 / 50 + 1);
  EXPECT_EQ(w.held_bytes, 3 * util::kGiB);
}

// A bound that is not a multiple of the period: the last sleep is cut to the bound, never past it.
TEST(WaitMemoryFreed, NeverSleepsPastItsBound) {
  InstantClock clock;
  int calls = 0;
  const auto w = wait_memory_freed(answering({1}, calls), server_job(), clock, 120, 50);
  EXPECT_EQ(w.outcome, MemoryOutcome::Held);
  EXPECT_EQ(w.ms, 120);
  EXPECT_EQ(clock.sleeps_, (std::vector<long long>{50, 50, 20}));
}

TEST(WaitMemoryFreed, AnUnreadableNvmlEndsTheWaitAtOnce) {
  InstantClock clock;
  int calls = 0;
  const auto w = wait_memory_freed(answering({std::nullopt}, calls), server_job(), clock, 5000, 50);
  EXPECT_EQ(w.outcome, MemoryOutcome::Unknown);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(w.ms, 0);
  // Memory seen, then NVML gone: unknown, not freed.
  int calls2 = 0;
  const auto w2 = wait_memory_freed(answering({util::kGiB, std::nullopt}, calls2), server_job(), clock, 5000, 50);
  EXPECT_EQ(w2.outcome, MemoryOutcome::Unknown);
  EXPECT_EQ(calls2, 2);
}

gpu::GpuProcess process(unsigned pid, std::optional<std::uint64_t> bytes) {
  gpu::GpuProcess p;
  p.pid = pid;
  p.used_mem_bytes = bytes;
  return p;
}

gpu::Device device(std::string uuid, std::vector<gpu::GpuProcess> processes) {
  gpu::Device d;
  d.id.uuid = std::move(uuid);
  d.processes = std::move(processes);
  return d;
}

// Only the server's processes on the server's GPUs count; one whose memory NVML does not say is
// still there (1 byte), one listed with 0 bytes holds nothing.
TEST(MemoryOf, CountsTheServersProcessesOnItsGpusOnly) {
  gpu::Snapshot snap;
  snap.devices.push_back(device("GPU-a", {process(10, 2 * util::kGiB), process(11, 4 * util::kGiB),
                                          process(12, std::nullopt), process(13, 0)}));
  snap.devices.push_back(device("GPU-b", {process(10, 3 * util::kGiB)}));
  gpu::Device no_uuid = device("", {process(10, util::kGiB)});
  no_uuid.id.uuid.reset();
  snap.devices.push_back(no_uuid);
  const auto servers = [](unsigned pid) { return pid == 10 || pid == 12 || pid == 13; };
  EXPECT_EQ(memory_of(snap, {"GPU-a"}, servers), 2 * util::kGiB + 1);
  EXPECT_EQ(memory_of(snap, {"GPU-a", "GPU-b"}, servers), 5 * util::kGiB + 1);
  EXPECT_EQ(memory_of(snap, {"GPU-c"}, servers), 0U);
  EXPECT_EQ(memory_of(snap, {"GPU-a"}, [](unsigned) { return false; }), 0U);
}

// A real process started with TARMAC_JOB_ID=42 (as the job's wrapper starts its command) is job 42's
// and no other's; one without it is no job's.
TEST(ProcessOfJob, ByTheServersAccountAndTheJobIdInItsEnvironment) {
  const auto start = [](std::vector<std::string> env) {
    util::ProcessSpec spec;
    spec.path = "/bin/sleep";
    spec.argv = {"sleep", "1000"};
    spec.env = std::move(env);
    spec.fds = {{0, util::kDevNull}};
    return util::start_process(spec).value();
  };
  util::Child of_42 = start({"TARMAC_JOB_ID=42", "PATH=/bin"});
  util::Child of_none = start({"PATH=/bin"});
  const host::ProcReader proc;
  const unsigned me = ::geteuid();
  EXPECT_TRUE(process_of_job(proc, static_cast<unsigned>(of_42.pid), 42, me));
  EXPECT_FALSE(process_of_job(proc, static_cast<unsigned>(of_42.pid), 4, me));
  EXPECT_FALSE(process_of_job(proc, static_cast<unsigned>(of_42.pid), 420, me));
  EXPECT_FALSE(process_of_job(proc, static_cast<unsigned>(of_none.pid), 42, me));
  // Another user's process is never the server's, whatever its environment says (a process that
  // names the server's job would otherwise make every yield wait its whole bound).
  EXPECT_FALSE(process_of_job(proc, static_cast<unsigned>(of_42.pid), 42, me + 1));
  for (const auto& c : {&of_42, &of_none}) {
    ::kill(c->pid, SIGKILL);
    ::waitpid(c->pid, nullptr, 0);
  }
}

}  // namespace
}  // namespace tarmac::backfill
