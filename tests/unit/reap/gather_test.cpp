#include "tarmac/reap/gather.hpp"

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>

#include "../store/temp_dir.hpp"
#include "tarmac/reap/decide.hpp"
#include "tarmac/reap/pass.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/units.hpp"
#include "reap_test_support.hpp"

namespace tarmac::reap {
namespace {

using test_support::kMin;
using test_support::LiveGpus;
using test_support::test_device_file;

// One GPU ("GPU-a") with the processes given; every snapshot the same.
class OneGpu final : public gpu::Backend {
 public:
  explicit OneGpu(std::vector<gpu::GpuProcess> processes, std::optional<unsigned> util_gpu_pct = 0) {
    device_.id.index = 0;
    device_.id.uuid = "GPU-a";
    device_.id.minor_number = 0;
    device_.sample.util_gpu_pct = util_gpu_pct;
    device_.processes = std::move(processes);
  }
  Result<gpu::Snapshot> snapshot(const gpu::SnapshotOptions&) override {
    gpu::Snapshot s;
    s.devices = {device_};
    return s;
  }

 private:
  gpu::Device device_;
};

// A clock that never waits: each sleep moves it to the target.
class InstantClock final : public util::Clock {
 public:
  [[nodiscard]] long long monotonic_ms() const override { return now_; }
  [[nodiscard]] long long wall_ms() const override { return util::wall_ms(); }
  void sleep_until(long long target_ms, const std::atomic<bool>&) const override { now_ = std::max(now_, target_ms); }

 private:
  mutable long long now_ = 1'000'000;
};

// A real process (so that /proc has its identity) listed on GPU-a with 4 GiB and no per-process reading.
struct Holder {
  util::Child child;
  gpu::GpuProcess process;
  Holder() {
    util::ProcessSpec spec;
    spec.path = "/bin/sleep";
    spec.argv = {"sleep", "1000"};
    spec.fds = {{0, util::kDevNull}};  // the test's stand-in for the GPU's device file
    child = util::start_process(spec).value();
    process.pid = static_cast<unsigned>(child.pid);
    process.used_mem_bytes = 4 * util::kGiB;
    process.host = host::ProcReader().read(process.pid);
  }
  ~Holder() {
    (void)util::send_signal(child, SIGKILL);
    (void)util::wait_for(child, 30'000);
  }
};

// A store that recorded `holder` on GPU-a at 0 % for the last 20 minutes.
// The agent's record of `holder` idle on GPU `index` for 20 minutes up to `last_ago_ms` ago, its
// listing seen to begin while it had the pid unless `proven` is false.
struct Recorded {
  long long last_ago_ms = 10'000;
  bool proven = true;
};
void record(const std::string& path, const Holder& holder, const std::string& uuid = "GPU-a", unsigned index = 0,
            Recorded how = {}) {
  const long long now = util::wall_ms();
  store::RecorderOptions options;
  options.path = path;
  store::Recorder recorder(options);
  recorder.add(store::GpuInfo{index, uuid, "H100", "00000000:07:00.0", 81559}, now);
  recorder.update(store::ActivitySpan{index, gpu::Activity::Holding, now - 20 * kMin, now - 10'000});
  store::ProcessSpan span;
  span.gpu = index;
  span.pid = holder.process.pid;
  span.first_ms = now - 20 * kMin;
  span.last_ms = now - how.last_ago_ms;
  span.start_unix = holder.process.host.start_time_unix;
  span.user = "root";
  span.listed_after_start = how.proven;
  recorder.update(span);
  recorder.add(store::ProcessSample{now - 20 * kMin, index, holder.process.pid, 4096, 0, 0, 0});
  ASSERT_TRUE(recorder.flush().ok);
}

// Adds a span of `pid` on GPU `index` to the store at `path`: the agent's record of the driver
// listing the pid from `first_ms` to `last_ms` for the process started at `start_unix` (nullopt:
// no such pid in /proc then).
void record_listing(const std::string& path, unsigned pid, long long first_ms, long long last_ms,
                    std::optional<long long> start_unix, unsigned index = 0) {
  store::RecorderOptions options;
  options.path = path;
  store::Recorder recorder(options);
  store::ProcessSpan span;
  span.gpu = index;
  span.pid = pid;
  span.first_ms = first_ms;
  span.last_ms = last_ms;
  span.start_unix = start_unix;
  recorder.update(span);
  ASSERT_TRUE(recorder.flush().ok);
}

// The store's evidence of `holder` listed on GPU-a, decided as root with min_age 0.
struct StoreDecision {
  ProcessEvidence evidence;
  Decision decision;
};
StoreDecision decide_from_store(const std::string& db, const Holder& holder) {
  OneGpu gpus({holder.process});
  InstantClock clock;
  GatherOptions options;
  options.store_path = db;
  options.idle_for_ms = 10 * kMin;
  options.device_file_override = test_device_file();
  const auto gathered = gather(gpus, test_support::test_proc_reader(), options, clock);
  EXPECT_TRUE(gathered.ok()) << gathered.error().message;
  EXPECT_EQ(gathered->source, EvidenceSource::Store) << gathered->store_note;
  ReaperConfig rules;
  rules.min_age_ms = 0;
  const auto& e = gathered->processes.at(0);
  return {e, decide_one(e, rules, Caller{0, getpid(), {}, false})};
}

// N1: the attacker's X allocated memory on the GPU, forked a child that kept its device file, and
// exited; the driver went on listing X's pid, which the agent recorded with X's start time, then
// with none (no such pid in /proc), until the victim's W got the pid. W holds the device file and
// reads the stale context's 0 %: the old code made it a candidate.
TEST(Gather, AListingThatPredatesTheProcessAtThePidIsNotItsOwn) {
  store::test_support::TempDir dir;
  Holder w;
  const std::string db = dir.path() + "/tarmac.db";
  record(db, w);
  const long long start = *w.process.host.start_time_unix;
  record_listing(db, w.process.pid, (start - 3600) * 1000, (start - 120) * 1000, start - 4000);  // X
  record_listing(db, w.process.pid, (start - 115) * 1000, start * 1000 - 3000, std::nullopt);   // X's stale context
  const auto got = decide_from_store(db, w);
  EXPECT_EQ(got.evidence.holding, host::Holding::Holds);
  EXPECT_EQ(got.decision.reason, Reason::NotHolding) << got.decision.detail;
  EXPECT_NE(got.decision.detail.find("for a process started at " + std::to_string(start - 4000) + " until 2m before this process started"),
            std::string::npos)
      << got.decision.detail;
}

// A pid reused long after its last listing for another process (beyond kListingMarginMs) is the
// new process's: still a candidate.
TEST(Gather, AListingLongBeforeTheProcessStartedDoesNotStopIt) {
  store::test_support::TempDir dir;
  Holder w;
  const std::string db = dir.path() + "/tarmac.db";
  record(db, w);
  const long long start_ms = *w.process.host.start_time_unix * 1000;
  record_listing(db, w.process.pid, start_ms - 60 * kMin, start_ms - kListingMarginMs - 1000, std::nullopt);
  const auto got = decide_from_store(db, w);
  EXPECT_FALSE(got.evidence.listed_before.has_value()) << *got.evidence.listed_before;
  EXPECT_EQ(got.decision.reason, Reason::Candidate) << got.decision.detail;
}

// Third review, H1: no other process's listing in the store is not enough. A stale context's
// listing under a pid that changed hands while the agent was not sampling (a gap, or between two
// samples) shows no other owner; the listing counts only when the agent saw it begin while this
// process had the pid. Before, this was a candidate.
TEST(Gather, AListingTheAgentNeverSawBeginIsNotTheProcesss) {
  store::test_support::TempDir dir;
  Holder w;
  const std::string db = dir.path() + "/tarmac.db";
  record(db, w, "GPU-a", 0, Recorded{10'000, false});
  const auto got = decide_from_store(db, w);
  EXPECT_EQ(got.evidence.holding, host::Holding::Holds);
  EXPECT_EQ(got.decision.reason, Reason::NotHolding) << got.decision.detail;
  EXPECT_NE(got.decision.detail.find("never saw the driver's listing of pid"), std::string::npos) << got.decision.detail;
}

// Third review, M1: a span whose last sample is older than store_fresh_ms (30 s) does not speak
// for the time between it and reap's own reading, which nobody watched (a stalled agent can hide
// a burst of work there). Before, a span up to 3 minutes old made it a candidate idle 20 minutes.
TEST(Gather, ASpanThatEndedLongBeforeNowIsNotTheHistory) {
  store::test_support::TempDir dir;
  Holder w;
  const std::string db = dir.path() + "/tarmac.db";
  record(db, w, "GPU-a", 0, Recorded{2 * kMin, true});
  const auto got = decide_from_store(db, w);
  EXPECT_NE(got.decision.reason, Reason::Candidate) << got.decision.detail;
  EXPECT_LT(got.evidence.history.idle_ms(), kMin);
}

TEST(Gather, ListingsForAnotherProcessAreMatchedByStartTimeAndMargin) {
  const long long start = 1'700'000'000;
  auto span = [](long long last_ms, std::optional<long long> start_unix) {
    store::ProcessSpan s;
    s.pid = 7;
    s.first_ms = last_ms - kMin;
    s.last_ms = last_ms;
    s.start_unix = start_unix;
    return s;
  };
  EXPECT_FALSE(listed_for_another({span(start * 1000 + 60'000, start)}, 7, start));  // its own
  EXPECT_FALSE(listed_for_another({span(start * 1000 - kListingMarginMs - 1, start - 900)}, 7, start));
  EXPECT_TRUE(listed_for_another({span(start * 1000 - kListingMarginMs, start - 900)}, 7, start));
  const auto later = listed_for_another({span(start * 1000 + 5000, std::nullopt)}, 7, start);
  ASSERT_TRUE(later);
  EXPECT_NE(later->find("after this process started"), std::string::npos) << *later;
  EXPECT_TRUE(listed_for_another({}, 7, std::nullopt));  // no start time: nothing can be tied to it
}

TEST(Gather, TheStoreIsTheEvidenceWhenItRecordsThisMachine) {
  store::test_support::TempDir dir;
  Holder holder;
  const std::string db = dir.path() + "/tarmac.db";
  record(db, holder);
  const auto got = decide_from_store(db, holder);
  EXPECT_GE(got.evidence.history.idle_ms(), 20 * kMin - 1000);
  EXPECT_EQ(got.evidence.holding, host::Holding::Holds);
  EXPECT_FALSE(got.evidence.listed_before.has_value());  // no earlier listing of its pid: its own
  EXPECT_EQ(got.decision.reason, Reason::Candidate) << got.decision.detail;
}

// Low finding: the store's rows are matched by the GPU's UUID, not its index (the agent recorded
// this GPU as index 5; it is index 0 now). The old code found no history and no candidate.
TEST(Gather, StoreRowsAreMatchedByUuidNotIndex) {
  store::test_support::TempDir dir;
  Holder holder;
  const std::string db = dir.path() + "/tarmac.db";
  record(db, holder, "GPU-a", 5);
  OneGpu gpus({holder.process});
  InstantClock clock;
  GatherOptions options;
  options.store_path = db;
  options.idle_for_ms = 10 * kMin;
  const auto gathered = gather(gpus, test_support::test_proc_reader(), options, clock);
  ASSERT_TRUE(gathered.ok()) << gathered.error().message;
  ASSERT_EQ(gathered->source, EvidenceSource::Store) << gathered->store_note;
  EXPECT_GE(gathered->processes.at(0).history.idle_ms(), 20 * kMin - 1000);
}

// C1 at gather time: a listed pid whose process does not have the GPU's file open is decided
// not-holding, whatever its utilization says.
TEST(Gather, AListedPidWithoutTheDeviceFileIsNotHolding) {
  Holder holder;
  OneGpu gpus({holder.process});
  InstantClock clock;
  GatherOptions options;
  options.window_ms = 2000;
  options.device_file_override = test_support::unheld_device_file();
  const auto gathered = gather(gpus, test_support::test_proc_reader(), options, clock);
  ASSERT_TRUE(gathered.ok());
  const auto& e = gathered->processes.at(0);
  EXPECT_EQ(e.holding, host::Holding::NotHeld);
  ReaperConfig rules;
  rules.min_age_ms = 0;
  rules.idle_for_ms = 1000;
  EXPECT_EQ(decide_one(e, rules, Caller{0, getpid(), {}, false}).reason, Reason::NotHolding);
  // Without an override the GPU's own file (195:0) is looked for: a sleep does not hold it either.
  options.device_file_override.reset();
  const auto real = gather(gpus, test_support::test_proc_reader(), options, clock);
  ASSERT_TRUE(real.ok());
  EXPECT_EQ(real->processes.at(0).device_file, (host::DeviceNumber{195, 0}));
  EXPECT_EQ(real->processes.at(0).holding, host::Holding::NotHeld);
}

// H1: --gpu filters what is shown, not the evidence: the holder idle on GPU 0 and busy on GPU 1
// is busy in the row --gpu 0 shows (the old code saw GPU 0 alone and made it a candidate).
TEST(Gather, TheGpuFilterDoesNotHideABusyListingElsewhere) {
  Holder holder;
  LiveGpus gpus({{0, holder.process.pid, 0U}, {1, holder.process.pid, 70U}}, 2);
  InstantClock clock;
  GatherOptions options;
  options.window_ms = 2000;
  options.gpus = {0};
  options.device_file_override = test_device_file();
  ReaperConfig rules;
  rules.min_age_ms = 0;
  rules.idle_for_ms = 1000;
  const auto pass = survey(gpus, test_support::test_proc_reader(), options, rules, Caller{0, getpid(), {}, false}, clock);
  ASSERT_TRUE(pass.ok()) << pass.error().message;
  ASSERT_EQ(pass->rows.size(), 1U);
  EXPECT_EQ(pass->rows[0].evidence.gpu, 0U);
  EXPECT_EQ(pass->rows[0].decision.reason, Reason::Busy) << pass->rows[0].decision.detail;
  EXPECT_EQ(pass->rows[0].decision.detail, "on GPU 1: SM 70 %");
}

// Low finding: kill_switch_present is reported by a dry run too (the old code said false).
TEST(Gather, ADryRunReportsTheKillSwitch) {
  store::test_support::TempDir dir;
  LiveGpus gpus({});
  InstantClock clock;
  GatherOptions options;
  options.window_ms = 200;
  ReaperConfig rules;
  rules.kill_switch = dir.path();  // any file that exists
  const auto pass = survey(gpus, test_support::test_proc_reader(), options, rules, Caller{0, getpid(), {}, false}, clock);
  ASSERT_TRUE(pass.ok());
  EXPECT_TRUE(pass->kill_switch_present);
}

// H4: an NVENC pipeline at SM 0 % is working; so is a GPU whose only process it is, by the
// device's encoder figure (the old code read both as idle).
TEST(Gather, EveryEngineCountsNotOnlySm) {
  gpu::Device device;
  gpu::GpuProcess transcoder;
  transcoder.pid = 10;
  transcoder.sm_util_pct = 0;
  transcoder.mem_util_pct = 0;
  transcoder.enc_util_pct = 45;
  device.processes = {transcoder};
  EXPECT_EQ(observe(device, transcoder, 0).sm_util_pct, 45U);
  transcoder.enc_util_pct = 0;
  transcoder.dec_util_pct = 0;
  transcoder.ofa_util_pct = 12;
  EXPECT_EQ(observe(device, transcoder, 0).sm_util_pct, 12U);
  gpu::GpuProcess alone;  // no per-process reading: the device's figures, the busiest of them
  alone.pid = 11;
  device.processes = {alone};
  device.sample.util_gpu_pct = 0;
  device.sample.util_mem_pct = 0;
  device.sample.util_decoder_pct = 30;
  const auto o = observe(device, alone, 0);
  EXPECT_EQ(o.sm_util_pct, 30U);
  EXPECT_EQ(o.source, UtilSource::DeviceAlone);
}

TEST(Gather, AnotherMachinesStoreIsNotEvidence) {
  store::test_support::TempDir dir;
  Holder holder;
  const std::string db = dir.path() + "/tarmac.db";
  record(db, holder, "GPU-elsewhere");
  OneGpu gpus({holder.process});
  InstantClock clock;
  GatherOptions options;
  options.store_path = db;
  options.window_ms = 2000;
  options.device_file_override = test_device_file();
  const auto gathered = gather(gpus, test_support::test_proc_reader(), options, clock);
  ASSERT_TRUE(gathered.ok());
  EXPECT_EQ(gathered->source, EvidenceSource::Watch);
  EXPECT_NE(gathered->store_note.find("does not record this machine's GPUs"), std::string::npos);
  EXPECT_EQ(gathered->watched_ms, 2000);
  // Watched 2 s, alone on an idle GPU: idle by the device's figure, and no longer than watched.
  const auto& h = gathered->processes.at(0).history;
  EXPECT_EQ(h.last_source, UtilSource::DeviceAlone);
  EXPECT_EQ(h.idle_ms(), 2000);
  EXPECT_FALSE(gathered->processes.at(0).listed_before.has_value());  // the watch saw only this process
}

// N1 in a watch: the driver listed the pid without a process in /proc (a stale context) before the
// holder appeared at it; the old code keyed the watch by start time and made the holder a
// candidate on its own readings.
TEST(Gather, AWatchThatSawThePidListedForAnotherProcessRefusesIt) {
  class StaleThenHolder final : public gpu::Backend {
   public:
    explicit StaleThenHolder(gpu::GpuProcess holder) : holder_(std::move(holder)) {}
    Result<gpu::Snapshot> snapshot(const gpu::SnapshotOptions&) override {
      gpu::Device d;
      d.id.uuid = "GPU-a";
      d.id.minor_number = 0;
      gpu::GpuProcess p = holder_;
      p.sm_util_pct = 0;
      p.mem_util_pct = 0;
      if (calls_++ < 2) p.host = host::ProcessInfo{};  // no such pid in /proc yet: start time unknown
      d.processes = {p};
      gpu::Snapshot s;
      s.devices = {d};
      return s;
    }

   private:
    gpu::GpuProcess holder_;
    int calls_ = 0;
  };
  Holder holder;
  StaleThenHolder gpus(holder.process);
  InstantClock clock;
  GatherOptions options;
  options.window_ms = 2000;
  options.device_file_override = test_device_file();
  const auto gathered = gather(gpus, test_support::test_proc_reader(), options, clock);
  ASSERT_TRUE(gathered.ok());
  const auto& e = gathered->processes.at(0);
  ASSERT_TRUE(e.listed_before.has_value());
  ReaperConfig rules;
  rules.min_age_ms = 0;
  rules.idle_for_ms = 1000;
  const auto d = decide_one(e, rules, Caller{0, getpid(), {}, false});
  EXPECT_EQ(d.reason, Reason::NotHolding) << d.detail;
  EXPECT_NE(d.detail.find("for another process (start time unknown)"), std::string::npos) << d.detail;
}

TEST(Gather, TheDevicesFigureSpeaksOnlyForAProcessAlone) {
  gpu::Device device;
  device.sample.util_gpu_pct = 0;
  gpu::GpuProcess a;
  a.pid = 10;
  device.processes = {a};
  EXPECT_EQ(observe(device, a, 0).source, UtilSource::DeviceAlone);
  gpu::GpuProcess b;
  b.pid = 11;
  device.processes = {a, b};
  EXPECT_FALSE(observe(device, a, 0).sm_util_pct);
  b.sm_util_pct = 101;  // garbage: unknown
  EXPECT_FALSE(observe(device, b, 0).sm_util_pct);
  b.sm_util_pct = 0;
  EXPECT_EQ(observe(device, b, 0).source, UtilSource::PerProcess);
  b.mem_util_pct = 30;  // no kernel, but its copies keep the memory busy
  EXPECT_EQ(observe(device, b, 0).sm_util_pct, 30U);
}

}  // namespace
}  // namespace tarmac::reap
