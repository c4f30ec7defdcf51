// The Tracker's tests' shared pieces: fixed times, hand-built processes, devices and snapshots, and
// a Tracker feeding a Recorder in a fresh directory (tracker_test.cpp, tracker_jobs_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../store/temp_dir.hpp"
#include "tarmac/agent/tracker.hpp"
#include "tarmac/store/reader.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::agent::test_support {

using gpu::Activity;
using store::test_support::TempDir;

inline constexpr long long kT0 = 1736154000000;  // Monday 2025-01-06 09:00:00 UTC
inline constexpr long long kS = 1000;              // one second in ms
inline constexpr std::uint64_t kTotalMib = 40960;
inline constexpr store::TimeRange kAll{0, 4'000'000'000'000};

inline gpu::GpuProcess process(unsigned pid, std::uint64_t mem_mib, long long start_unix = 1736150000,
                        const std::string& user = "alice", const std::string& command = "python train.py") {
  gpu::GpuProcess p;
  p.pid = pid;
  p.used_mem_bytes = mem_mib * util::kMiB;
  p.host.pid = pid;
  p.host.user = user;
  p.host.command_line = command;
  p.host.name = "python";
  p.host.start_time_unix = start_unix;
  return p;
}

inline gpu::Device device(unsigned index, unsigned util, std::vector<gpu::GpuProcess> processes = {}) {
  gpu::Device d;
  d.id.index = index;
  d.id.mem_total_bytes = kTotalMib * util::kMiB;
  d.sample.util_gpu_pct = util;
  std::uint64_t used = 0;
  for (const auto& p : processes) used += p.used_mem_bytes.value_or(0);
  d.sample.mem_used_bytes = used;
  d.processes = std::move(processes);
  return d;
}

inline gpu::Snapshot snapshot(std::vector<gpu::Device> devices) {
  gpu::Snapshot s;
  s.devices = std::move(devices);
  return s;
}

inline gpu::ActivityThresholds thresholds() {
  gpu::ActivityThresholds t;
  t.holding_after_s = 60;
  return t;
}

// A tracker feeding a recorder in a fresh directory; read() flushes and opens the store.
class TrackerTest : public ::testing::Test {
 protected:
  TrackerTest() : recorder_({store::database_path(dir_.path()), {}, 100000}) {}

  void observe(const gpu::Snapshot& s, long long ts_ms, bool with_processes = true) {
    tracker_.observe(s, ts_ms, with_processes, recorder_);
  }

  store::Reader read() {
    const store::FlushStatus st = recorder_.flush();
    EXPECT_TRUE(st.ok) << st.message;
    auto reader = store::Reader::open(store::database_path(dir_.path()));
    EXPECT_TRUE(reader.ok()) << (reader.ok() ? "" : reader.error().message);
    return std::move(reader).value();
  }

  std::vector<store::ActivitySpan> spans(unsigned gpu) {
    auto all = read().activity(kAll);
    EXPECT_TRUE(all.ok());
    std::vector<store::ActivitySpan> out;
    for (const auto& s : *all) {
      if (s.gpu == gpu) out.push_back(s);
    }
    return out;
  }

  std::vector<Activity> sample_classes(unsigned gpu) {
    auto samples = read().samples(kAll, {gpu});
    EXPECT_TRUE(samples.ok());
    std::vector<Activity> out;
    for (const auto& s : *samples) out.push_back(s.activity);
    return out;
  }

  std::vector<store::Event> events(const std::string& kind = "") {
    auto all = read().events(kAll);
    EXPECT_TRUE(all.ok());
    std::vector<store::Event> out;
    for (const auto& e : *all) {
      if (kind.empty() || e.kind == kind) out.push_back(e);
    }
    return out;
  }

  std::vector<store::ProcessSpan> process_spans() {
    auto all = read().processes(kAll);
    EXPECT_TRUE(all.ok());
    return *all;
  }

  TempDir dir_;
  store::Recorder recorder_;
  Tracker tracker_{thresholds(), 30 * kS};
};

}  // namespace tarmac::agent::test_support
