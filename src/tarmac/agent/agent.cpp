#include "tarmac/agent/agent.hpp"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <map>

#include "tarmac/agent/tracker.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::agent {

namespace {

using Steady = std::chrono::steady_clock;

constexpr long long kPruneEveryMs = 3600LL * 1000;
constexpr std::size_t kFlushRows = 20000;

double seconds_since(Steady::time_point t) {
  return std::chrono::duration<double>(Steady::now() - t).count();
}

store::GpuInfo info_of(const gpu::Device& d) {
  store::GpuInfo g;
  g.gpu = d.id.index;
  g.uuid = d.id.uuid.value_or("");
  g.name = d.id.name.value_or("");
  g.pci_bus_id = d.id.pci_bus_id.value_or("");
  if (d.id.mem_total_bytes) g.mem_total_mib = static_cast<long long>(*d.id.mem_total_bytes / util::kMiB);
  return g;
}

// Logs the store's state when it changes: the first failure, a different failure, the recovery.
class FlushLog {
 public:
  FlushLog(const util::LogSink& log, std::string path) : log_(log), path_(std::move(path)) {}

  void report(const store::FlushStatus& s, long long ts_ms, store::Recorder& rec) {
    if (!s.ok) {
      if (!failing_ || s.message != last_message_) {
        log_(util::LogLevel::Warning, fmt::format("cannot write {}: {}; keeping {} rows in memory and retrying", path_,
                                            s.message, s.pending));
      }
      failing_ = true;
      last_message_ = s.message;
      return;
    }
    if (failing_) {
      log_(util::LogLevel::Info, fmt::format("recording resumed: {} rows written to {}{}", s.written, path_,
                                       s.dropped ? fmt::format(", {} samples dropped while it could not be written",
                                                               s.dropped)
                                                 : std::string()));
      if (s.dropped > 0) {
        rec.add(store::Event{ts_ms, std::nullopt, "recording-gap",
                             fmt::format("{} samples dropped while the store could not be written", s.dropped)});
      }
    }
    failing_ = false;
    last_message_.clear();
  }

 private:
  const util::LogSink& log_;
  std::string path_;
  bool failing_ = false;
  std::string last_message_;
};

}  // namespace

gpu::ValueGroups recorded_groups() {
  using G = gpu::ValueGroup;
  return {G::Name,       G::Uuid,        G::Pci,         G::Board,       G::Memory,    G::Utilization,
          G::CodecUtilization, G::Temperature, G::Power, G::ClockSm, G::ClockMem, G::ClockEvents,
          G::EccErrors,  G::RetiredPages, G::RemappedRows, G::ProcessHost, G::ProcessUtilization};
}

Result<AgentSummary> run_agent(gpu::Backend& backend, const Clock& clock, const AgentOptions& options,
                               const std::atomic<bool>& stop, const util::LogSink& log) {
  store::RecorderOptions ropts;
  ropts.path = store::database_path(options.state_dir);
  ropts.retention = options.retention;
  store::Recorder recorder(ropts);
  // A pause longer than a few intervals, and than 10 s of real time (a slow snapshot under a fast
  // simulation is late, not a gap), is time nobody watched: spans end rather than stretch.
  const long long gap_ms = std::max({3 * options.interval_ms, options.process_interval_ms + options.interval_ms,
                                     static_cast<long long>(10'000 * clock.speed())});
  Tracker tracker(options.thresholds, gap_ms);
  FlushLog flush_log(log, ropts.path);

  gpu::SnapshotOptions fast;
  fast.values = recorded_groups();
  fast.processes = false;
  fast.xid_events = true;
  gpu::SnapshotOptions with_processes = fast;
  with_processes.processes = true;
  gpu::SnapshotOptions slow;
  slow.values = {};
  slow.processes = false;
  slow.slow = true;

  // The first snapshot proves NVML works; without it there is nothing to record.
  TARMAC_TRY_ASSIGN(auto first, backend.snapshot(with_processes));
  // The schedule runs on the clock's monotonic time; wall time only stamps the rows, so a step of
  // the wall clock (NTP) neither stops sampling nor bursts it.
  const long long start_ms = clock.now_ms();
  const long long start_mono = clock.monotonic_ms();
  recorder.add(store::Event{start_ms, std::nullopt, "agent-start",
                            fmt::format("{} GPUs, every {} ms", first.devices.size(), options.interval_ms)});
  log(util::LogLevel::Info, fmt::format("recording {} GPUs every {} ms (processes every {} ms) to {}", first.devices.size(),
                                  options.interval_ms, options.process_interval_ms, ropts.path));

  AgentSummary summary;
  const auto real_start = Steady::now();
  auto last_flush = Steady::now();
  long long next_fast = start_mono;
  long long next_processes = start_mono;
  long long next_slow = start_mono;
  long long last_prune = 0;
  long long last_error_log = -1;
  std::optional<gpu::Snapshot> pending_first(std::move(first));
  long long nvml_errors = 0;
  std::map<unsigned, std::vector<gpu::GpuProcess>> latest_processes;  // for on_sample
  std::map<unsigned, gpu::DeviceSlowSample> latest_slow;

  auto flush = [&](long long ts_ms) {
    auto status = recorder.flush();
    flush_log.report(status, ts_ms, recorder);
    last_flush = Steady::now();
    if (status.ok && (last_prune == 0 || ts_ms - last_prune >= kPruneEveryMs)) {
      if (auto r = recorder.prune(ts_ms); !r.ok()) {
        log(util::LogLevel::Warning, fmt::format("cannot prune old data: {}", r.error().message));
      }
      last_prune = ts_ms;
    }
  };

  // Open the store now: a problem with it shows in the log at once, not a flush interval later.
  flush(start_ms);

  long long now = start_ms;
  long long mono = start_mono;
  while (!stop.load(std::memory_order_relaxed)) {
    now = clock.now_ms();
    mono = clock.monotonic_ms();
    if (options.duration_ms > 0 && mono - start_mono >= options.duration_ms) break;
    const bool list_processes = mono >= next_processes;
    const auto sample_start = Steady::now();
    Result<gpu::Snapshot> snap = pending_first ? Result<gpu::Snapshot>(std::move(*pending_first))
                                               : backend.snapshot(list_processes ? with_processes : fast);
    const double sample_seconds = seconds_since(sample_start);
    pending_first.reset();
    if (snap.ok()) {
      ++summary.snapshots;
      summary.gpu_samples += static_cast<long long>(snap->devices.size());
      for (const auto& d : snap->devices) nvml_errors += static_cast<long long>(d.errors.size());
      tracker.observe(*snap, now, list_processes, recorder,
                      options.leased_gpus ? options.leased_gpus() : std::set<std::string>{});
      if (list_processes) {
        for (const auto& d : snap->devices) recorder.add(info_of(d), now);
        next_processes = std::max(next_processes + options.process_interval_ms, mono + 1);
      }
      if (options.on_sample) {
        // The hook sees every GPU whole: this sample's values, the last processes and slow values.
        for (auto& d : snap->devices) {
          if (list_processes) {
            latest_processes[d.id.index] = d.processes;
          } else if (auto it = latest_processes.find(d.id.index); it != latest_processes.end()) {
            d.processes = it->second;
          }
          if (auto it = latest_slow.find(d.id.index); it != latest_slow.end()) d.slow = it->second;
        }
        const auto classes = tracker.classes();
        options.on_sample(SampleView{*snap, classes, now, summary, nvml_errors, sample_seconds});
      }
    } else {
      ++nvml_errors;
      if (last_error_log < 0 || mono - last_error_log >= 60 * 1000) {
        log(util::LogLevel::Error, fmt::format("cannot read the GPUs: {}", snap.error().message));
        last_error_log = mono;
      }
    }
    if (options.slow_interval_ms > 0 && mono >= next_slow) {
      if (auto s = backend.snapshot(slow); s.ok()) {
        for (const auto& d : s->devices) {
          if (!d.slow) continue;
          if (options.on_sample) latest_slow[d.id.index] = *d.slow;
          recorder.add(store::SlowSample{now, d.id.index, util::widen(d.slow->pcie_tx_kbps),
                                         util::widen(d.slow->pcie_rx_kbps), d.slow->gpm_sm_active_pct,
                                         d.slow->gpm_sm_occupancy_pct, d.slow->gpm_tensor_active_pct, d.slow->gpm_dram_bw_pct});
        }
      }
      next_slow = std::max(next_slow + options.slow_interval_ms, mono + 1);
    }
    // Flush on time, or sooner when a fast simulation piles rows up: memory stays bounded.
    if (seconds_since(last_flush) * 1000 >= static_cast<double>(options.flush_interval_ms) ||
        recorder.pending_rows() >= kFlushRows) {
      flush(now);
    }

    next_fast += options.interval_ms;
    const long long after = clock.monotonic_ms();
    if (next_fast <= after) {
      // The sample ran past the next one's time (a slow GPU, a fast simulation): take the next one
      // now rather than a burst of catch-up samples.
      ++summary.late_samples;
      next_fast = after;
    }
    if (options.duration_ms > 0) next_fast = std::min(next_fast, start_mono + options.duration_ms);
    clock.sleep_until(next_fast, stop);
  }
  mono = std::max(mono, clock.monotonic_ms());
  if (options.duration_ms > 0) mono = std::min(mono, start_mono + options.duration_ms);
  now = std::max(now, clock.now_ms());
  if (options.duration_ms > 0) now = std::min(now, start_ms + options.duration_ms);
  recorder.add(store::Event{now, std::nullopt, "agent-stop", fmt::format("{} GPU-samples", summary.gpu_samples)});
  flush(now);
  summary.clock_ms = mono - start_mono;
  summary.real_s = seconds_since(real_start);
  if (recorder.pending_rows() > 0) {
    log(util::LogLevel::Warning, fmt::format("stopped with {} rows not written to {}", recorder.pending_rows(), ropts.path));
  }
  return summary;
}

}  // namespace tarmac::agent
