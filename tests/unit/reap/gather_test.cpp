#include "tarmac/reap/gather.hpp"

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>

#include "../store/temp_dir.hpp"
#include "tarmac/reap/decide.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/units.hpp"
#include "reap_test_support.hpp"

namespace tarmac::reap {
namespace {

using test_support::kMin;

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
void record(const std::string& path, const Holder& holder, const std::string& uuid = "GPU-a") {
  const long long now = util::wall_ms();
  store::RecorderOptions options;
  options.path = path;
  store::Recorder recorder(options);
  recorder.add(store::GpuInfo{0, uuid, "H100", "00000000:07:00.0", 81559}, now);
  recorder.update(store::ActivitySpan{0, gpu::Activity::Holding, now - 20 * kMin, now - 10'000});
  store::ProcessSpan span;
  span.gpu = 0;
  span.pid = holder.process.pid;
  span.first_ms = now - 20 * kMin;
  span.last_ms = now - 10'000;
  span.start_unix = holder.process.host.start_time_unix;
  span.user = "root";
  recorder.update(span);
  recorder.add(store::ProcessSample{now - 20 * kMin, 0, holder.process.pid, 4096, 0, 0});
  ASSERT_TRUE(recorder.flush().ok);
}

TEST(Gather, TheStoreIsTheEvidenceWhenItRecordsThisMachine) {
  store::test_support::TempDir dir;
  Holder holder;
  const std::string db = dir.path() + "/tarmac.db";
  record(db, holder);
  OneGpu gpus({holder.process});
  InstantClock clock;
  GatherOptions options;
  options.store_path = db;
  options.idle_for_ms = 10 * kMin;
  const auto gathered = gather(gpus, host::ProcReader(), options, clock);
  ASSERT_TRUE(gathered.ok()) << gathered.error().message;
  EXPECT_EQ(gathered->source, EvidenceSource::Store);
  ASSERT_EQ(gathered->processes.size(), 1U);
  const auto& e = gathered->processes[0];
  EXPECT_GE(e.history.idle_ms(), 20 * kMin - 1000);
  ReaperConfig rules;
  rules.min_age_ms = 0;
  EXPECT_EQ(decide_one(e, rules, Caller{0, getpid(), {}, false}).reason, Reason::Candidate);
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
  const auto gathered = gather(gpus, host::ProcReader(), options, clock);
  ASSERT_TRUE(gathered.ok());
  EXPECT_EQ(gathered->source, EvidenceSource::Watch);
  EXPECT_NE(gathered->store_note.find("does not record this machine's GPUs"), std::string::npos);
  EXPECT_EQ(gathered->watched_ms, 2000);
  // Watched 2 s, alone on an idle GPU: idle by the device's figure, and no longer than watched.
  const auto& h = gathered->processes.at(0).history;
  EXPECT_EQ(h.last_source, UtilSource::DeviceAlone);
  EXPECT_EQ(h.idle_ms(), 2000);
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
