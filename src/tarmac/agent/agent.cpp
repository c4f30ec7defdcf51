#include "tarmac/agent/agent.hpp"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <map>

#include "tarmac/agent/tracker.hpp"
#include "tarmac/gpu/device_fields.hpp"
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

// What the three cadences read: fast values, the same with processes, and the slow values alone.
struct Reads {
  gpu::SnapshotOptions fast;
  gpu::SnapshotOptions with_processes;
  gpu::SnapshotOptions slow;
};

Reads reads() {
  Reads r;
  r.fast.values = recorded_groups();
  r.fast.processes = false;
  r.fast.xid_events = true;
  // The process read, every process interval, reads every value as well: the live view (status and
  // watch through the agent) then shows what a direct read would, the fast reads' values over them.
  r.with_processes = r.fast;
  r.with_processes.values = gpu::ValueGroups::all();
  r.with_processes.processes = true;
  r.slow.values = {};
  r.slow.processes = false;
  r.slow.slow = true;
  return r;
}

// One run of the agent: the recorder and tracker it feeds, when each cadence is next due, and what
// the on_sample hook needs from earlier samples.
class Loop {
 public:
  Loop(gpu::Backend& backend, const Clock& clock, const AgentOptions& options, const util::LogSink& log)
      : backend_(backend),
        clock_(clock),
        options_(options),
        log_(log),
        recorder_(recorder_options(options)),
        tracker_(options.thresholds, gap_ms(options, clock)),
        flush_log_(log, store::database_path(options.state_dir)) {}

  // The first snapshot proves NVML works; without it there is nothing to record.
  Result<void> start() {
    TARMAC_TRY_ASSIGN(auto first, backend_.snapshot(reads_.with_processes));
    // The schedule runs on the clock's monotonic time; wall time only stamps the rows, so a step
    // of the wall clock (NTP) neither stops sampling nor bursts it.
    start_ms_ = clock_.now_ms();
    start_mono_ = clock_.monotonic_ms();
    recorder_.add(store::Event{start_ms_, std::nullopt, "agent-start",
                               fmt::format("{} GPUs, every {} ms", first.devices.size(), options_.interval_ms)});
    log_(util::LogLevel::Info,
         fmt::format("recording {} GPUs every {} ms (processes every {} ms) to {}", first.devices.size(),
                     options_.interval_ms, options_.process_interval_ms, path()));
    real_start_ = Steady::now();
    last_flush_ = Steady::now();
    next_fast_ = next_processes_ = next_slow_ = start_mono_;
    // The topology once (links do not change while the machine runs): the live view carries it,
    // for `tarmac doctor` through the agent. Not past kTopologyMaxGpus (a simulated fleet): it is
    // a read per pair of GPUs.
    if (options_.on_sample && first.devices.size() <= kTopologyMaxGpus) {
      gpu::SnapshotOptions links;
      links.values = {};
      links.processes = false;
      links.topology = true;
      if (auto read = backend_.snapshot(links); read.ok()) topology_ = std::move(read->topology);
    }
    pending_first_ = std::move(first);
    // Open the store now: a problem with it shows in the log at once, not a flush interval later.
    flush(start_ms_);
    now_ = start_ms_;
    mono_ = start_mono_;
    return {};
  }

  void run(const std::atomic<bool>& stop) {
    while (!stop.load(std::memory_order_relaxed)) {
      now_ = clock_.now_ms();
      mono_ = clock_.monotonic_ms();
      if (past_duration(mono_)) break;
      sample_fast();
      if (options_.slow_interval_ms > 0 && mono_ >= next_slow_) sample_slow();
      flush_when_due();
      wait_for_next(stop);
    }
  }

  // Stamps the stop (at most at the end of --duration), writes what is left and sums the run up.
  AgentSummary finish() {
    mono_ = std::max(mono_, clock_.monotonic_ms());
    if (options_.duration_ms > 0) mono_ = std::min(mono_, start_mono_ + options_.duration_ms);
    now_ = std::max(now_, clock_.now_ms());
    if (options_.duration_ms > 0) now_ = std::min(now_, start_ms_ + options_.duration_ms);
    recorder_.add(
        store::Event{now_, std::nullopt, "agent-stop", fmt::format("{} GPU-samples", summary_.gpu_samples)});
    flush(now_);
    summary_.clock_ms = mono_ - start_mono_;
    summary_.real_s = seconds_since(real_start_);
    if (recorder_.pending_rows() > 0) {
      log_(util::LogLevel::Warning,
           fmt::format("stopped with {} rows not written to {}", recorder_.pending_rows(), path()));
    }
    return summary_;
  }

 private:
  static store::RecorderOptions recorder_options(const AgentOptions& options) {
    store::RecorderOptions ropts;
    ropts.path = store::database_path(options.state_dir);
    ropts.retention = options.retention;
    return ropts;
  }

  // A pause longer than a few intervals, and than 10 s of real time (a slow snapshot under a fast
  // simulation is late, not a gap), is time nobody watched: spans end rather than stretch.
  static long long gap_ms(const AgentOptions& options, const Clock& clock) {
    return std::max({3 * options.interval_ms, options.process_interval_ms + options.interval_ms,
                     static_cast<long long>(10'000 * clock.speed())});
  }

  [[nodiscard]] std::string path() const { return store::database_path(options_.state_dir); }
  [[nodiscard]] bool past_duration(long long mono) const {
    return options_.duration_ms > 0 && mono - start_mono_ >= options_.duration_ms;
  }

  // One fast sample, with processes when their cadence is due (the first is the start's).
  void sample_fast() {
    const bool list_processes = mono_ >= next_processes_;
    const auto sample_start = Steady::now();
    Result<gpu::Snapshot> snap = pending_first_ ? Result<gpu::Snapshot>(std::move(*pending_first_))
                                                : backend_.snapshot(list_processes ? reads_.with_processes : reads_.fast);
    const double sample_seconds = seconds_since(sample_start);
    pending_first_.reset();
    if (!snap.ok()) {
      note_failed_sample(snap.error());
      return;
    }
    merge_mig_gpm(*snap);
    record(*snap, list_processes);
    if (options_.on_sample) publish(*snap, list_processes, sample_seconds);
  }

  // Each MIG device's GPM from the last slow read, matched by its GPU instance: a fast sample
  // carries none, and without it the recorder could only class a slice by its processes.
  void merge_mig_gpm(gpu::Snapshot& snap) const {
    for (auto& d : snap.devices) {
      const auto it = latest_mig_gpm_.find(d.id.index);
      if (it == latest_mig_gpm_.end()) continue;
      for (gpu::MigDevice& m : d.mig) {
        for (const gpu::MigDevice& slow : it->second) {
          if (!m.gpu_instance_id || slow.gpu_instance_id != m.gpu_instance_id) continue;
          m.gpm_sm_active_pct = slow.gpm_sm_active_pct;
          m.gpm_sm_occupancy_pct = slow.gpm_sm_occupancy_pct;
          m.gpm_tensor_active_pct = slow.gpm_tensor_active_pct;
          m.gpm_dram_bw_pct = slow.gpm_dram_bw_pct;
        }
      }
    }
  }

  void record(const gpu::Snapshot& snap, bool list_processes) {
    ++summary_.snapshots;
    summary_.gpu_samples += static_cast<long long>(snap.devices.size());
    for (const auto& d : snap.devices) nvml_errors_ += static_cast<long long>(d.errors.size());
    std::optional<JobView> jobs;
    if (options_.jobs) jobs = options_.jobs(snap);
    leased_ = options_.leased_gpus ? options_.leased_gpus() : std::set<std::string>{};
    tracker_.observe(snap, now_, list_processes, recorder_, leased_, jobs ? &*jobs : nullptr);
    if (list_processes) {
      for (const auto& d : snap.devices) recorder_.add(info_of(d), now_);
      next_processes_ = std::max(next_processes_ + options_.process_interval_ms, mono_ + 1);
    }
  }

  // The hook sees every GPU whole: this sample's values, the last processes and slow values.
  void publish(gpu::Snapshot& snap, bool list_processes, double sample_seconds) {
    for (auto& d : snap.devices) {
      if (list_processes) {
        latest_processes_[d.id.index] = d.processes;
        latest_full_[d.id.index] = d;
      } else if (auto it = latest_processes_.find(d.id.index); it != latest_processes_.end()) {
        d.processes = it->second;
        gpu::match_mig_processes(d.mig, d.processes);  // this sample's MIG devices, by instance ids
      }
      // What the fast read does not read (limits, modes, clocks), from the last full one.
      // Only from the same board, and never over a GPU that fell off the bus (its values are gone).
      if (auto it = latest_full_.find(d.id.index);
          !list_processes && !d.lost && it != latest_full_.end() && it->second.id.uuid == d.id.uuid) {
        gpu::fill_unread(d, it->second);
      }
      if (auto it = latest_slow_.find(d.id.index); it != latest_slow_.end()) d.slow = it->second;
    }
    // The start's topology, while it still describes these GPUs (one can fall off the bus).
    if (topology_ && topology_->links.size() == snap.devices.size()) snap.topology = topology_;
    const auto classes = tracker_.classes();
    const auto since = tracker_.since();
    options_.on_sample(
        SampleView{snap, classes, now_, summary_, nvml_errors_, sample_seconds, tracker_.jobs(), since, leased_});
  }

  // Counted every time, logged at most once a minute of clock time.
  void note_failed_sample(const Error& error) {
    ++nvml_errors_;
    if (last_error_log_ < 0 || mono_ - last_error_log_ >= 60 * 1000) {
      log_(util::LogLevel::Error, fmt::format("cannot read the GPUs: {}", error.message));
      last_error_log_ = mono_;
    }
  }

  void sample_slow() {
    if (auto s = backend_.snapshot(reads_.slow); s.ok()) {
      for (const auto& d : s->devices) {
        if (!d.slow) continue;
        if (options_.on_sample) latest_slow_[d.id.index] = *d.slow;
        latest_mig_gpm_[d.id.index] = d.mig;  // the recorder classes MIG devices with it too
        recorder_.add(store::SlowSample{now_, d.id.index, util::widen(d.slow->pcie_tx_kbps),
                                        util::widen(d.slow->pcie_rx_kbps), d.slow->gpm_sm_active_pct,
                                        d.slow->gpm_sm_occupancy_pct, d.slow->gpm_tensor_active_pct,
                                        d.slow->gpm_dram_bw_pct});
      }
    }
    next_slow_ = std::max(next_slow_ + options_.slow_interval_ms, mono_ + 1);
  }

  // Flush on time, or sooner when a fast simulation piles rows up: memory stays bounded.
  void flush_when_due() {
    if (seconds_since(last_flush_) * 1000 >= static_cast<double>(options_.flush_interval_ms) ||
        recorder_.pending_rows() >= kFlushRows) {
      flush(now_);
    }
  }

  // Writes the pending rows, and prunes old ones at most once an hour while writes succeed.
  void flush(long long ts_ms) {
    auto status = recorder_.flush();
    flush_log_.report(status, ts_ms, recorder_);
    last_flush_ = Steady::now();
    if (status.ok && (last_prune_ == 0 || ts_ms - last_prune_ >= kPruneEveryMs)) {
      if (auto r = recorder_.prune(ts_ms); !r.ok()) {
        log_(util::LogLevel::Warning, fmt::format("cannot prune old data: {}", r.error().message));
      }
      last_prune_ = ts_ms;
    }
  }

  void wait_for_next(const std::atomic<bool>& stop) {
    next_fast_ += options_.interval_ms;
    const long long after = clock_.monotonic_ms();
    if (next_fast_ <= after) {
      // The sample ran past the next one's time (a slow GPU, a fast simulation): take the next one
      // now rather than a burst of catch-up samples.
      ++summary_.late_samples;
      next_fast_ = after;
    }
    if (options_.duration_ms > 0) next_fast_ = std::min(next_fast_, start_mono_ + options_.duration_ms);
    clock_.sleep_until(next_fast_, stop);
  }

  gpu::Backend& backend_;
  const Clock& clock_;
  const AgentOptions& options_;
  const util::LogSink& log_;
  const Reads reads_ = reads();
  store::Recorder recorder_;
  Tracker tracker_;
  FlushLog flush_log_;
  AgentSummary summary_;
  std::set<std::string> leased_;  // the GPUs and MIG devices given out, as this sample was classified with

  long long start_ms_ = 0;    // wall time of the start, for the rows' stamps
  long long start_mono_ = 0;  // monotonic time of the start, for the schedule
  long long now_ = 0;         // this sample's wall time
  long long mono_ = 0;        // this sample's monotonic time
  Steady::time_point real_start_;
  Steady::time_point last_flush_;
  long long next_fast_ = 0;
  long long next_processes_ = 0;
  long long next_slow_ = 0;
  long long last_prune_ = 0;
  long long last_error_log_ = -1;
  std::optional<gpu::Snapshot> pending_first_;  // the start's snapshot, recorded as the first sample
  std::optional<gpu::Topology> topology_;       // read at the start, for the live view
  static constexpr std::size_t kTopologyMaxGpus = 64;
  long long nvml_errors_ = 0;
  std::map<unsigned, std::vector<gpu::GpuProcess>> latest_processes_;  // for on_sample
  std::map<unsigned, gpu::DeviceSlowSample> latest_slow_;
  std::map<unsigned, gpu::Device> latest_full_;  // each GPU's last read of every value (the process read)
  std::map<unsigned, std::vector<gpu::MigDevice>> latest_mig_gpm_;  // the MIG devices of the last slow read
};

}  // namespace

gpu::ValueGroups recorded_groups() {
  using G = gpu::ValueGroup;
  return {G::Name,       G::Uuid,        G::Pci,         G::Board,       G::Memory,    G::Utilization,
          G::CodecUtilization, G::Temperature, G::Power, G::ClockSm, G::ClockMem, G::ClockEvents,
          G::EccErrors,  G::RetiredPages, G::RemappedRows, G::ProcessHost, G::ProcessUtilization, G::MigMode};
}

Result<AgentSummary> run_agent(gpu::Backend& backend, const Clock& clock, const AgentOptions& options,
                               const std::atomic<bool>& stop, const util::LogSink& log) {
  Loop loop(backend, clock, options, log);
  TARMAC_TRY(loop.start());
  loop.run(stop);
  return loop.finish();
}

}  // namespace tarmac::agent
