#include "tarmac/agent/tracker.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "tarmac/gpu/clock_events.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::agent {

namespace {

constexpr long long kProcessSampleEveryMs = 60 * 1000;

std::optional<long long> mib(const std::optional<std::uint64_t>& bytes) {
  if (!bytes) return std::nullopt;
  return static_cast<long long>(*bytes / util::kMiB);
}

std::string clock_event_words(std::uint64_t mask) {
  std::string words;
  for (const auto& n : gpu::clock_event_names()) {
    if ((mask & n.bit) != 0) words += (words.empty() ? "" : ", ") + std::string(n.words);
  }
  return words;
}

std::string container_text(const host::ProcessInfo& info) {
  if (!info.container) return {};
  if (info.container->id.empty()) return info.container->runtime;
  return fmt::format("{}:{}", info.container->runtime, info.container->id.substr(0, 12));
}

std::string process_detail(const store::ProcessSpan& p) {
  return fmt::format("pid {} user {}: {} ({} MiB)", p.pid, p.user.empty() ? "?" : p.user,
                     p.command.empty() ? "?" : p.command, p.mem_used_mib_max);
}

// The busiest of the encoder, decoder, JPEG and OFA readings that are known (nullopt when none is):
// a value above 100 is kept as it is, so that the store's reader sees the garbage and calls the
// whole reading unknown, as reap does with its own readings.
std::optional<long long> other_engines(const gpu::GpuProcess& p) {
  std::optional<long long> out;
  for (const auto& v : {p.enc_util_pct, p.dec_util_pct, p.jpg_util_pct, p.ofa_util_pct}) {
    if (v) out = std::max(out.value_or(0), static_cast<long long>(*v));
  }
  return out;
}

// Whether the driver's process listing of `d` was read in full: a GPU lost, or a listing call that
// failed, may have left processes out, and "not listed then" would prove nothing.
bool listing_read_in_full(const gpu::Device& d) {
  if (d.lost) return false;
  return std::none_of(d.errors.begin(), d.errors.end(),
                      [](const gpu::ReadError& e) { return e.what.ends_with("_processes"); });
}

// Whether a process started at `start_unix` (whole seconds: it began before start_unix + 1) had its
// pid at `listed_ms`, the time a full listing without it was taken (the sample's own time, taken
// before the listing was read).
bool started_before(const std::optional<long long>& start_unix, const std::optional<long long>& listed_ms) {
  return start_unix && listed_ms && (*start_unix + 1) * 1000 <= *listed_ms;
}

}  // namespace

std::string process_command(const gpu::GpuProcess& p) {
  if (p.host.command_line && !p.host.command_line->empty()) return *p.host.command_line;
  return p.host.name.value_or("");
}

Tracker::Tracker(gpu::ActivityThresholds thresholds, long long gap_ms) : thresholds_(thresholds), gap_ms_(gap_ms) {}

std::map<unsigned, gpu::Activity> Tracker::classes() const {
  std::map<unsigned, gpu::Activity> out;
  for (const auto& [index, state] : gpus_) {
    if (state.span) out[index] = state.span->activity;
  }
  return out;
}

std::map<unsigned, gpu::ActivitySince> Tracker::since() const {
  std::map<unsigned, gpu::ActivitySince> out;
  for (const auto& [index, state] : gpus_) {
    if (state.span) out[index] = gpu::ActivitySince{state.span->start_ms, state.held_since_ms};
  }
  return out;
}

void Tracker::observe_processes(const gpu::Device& d, GpuState& state, long long ts_ms, store::Recorder& rec) {
  const unsigned index = d.id.index;
  // Process samples further apart than a gap: what was listed in between was not seen.
  if (state.listed_ms && ts_ms - *state.listed_ms > gap_ms_) state.listed_ms.reset();
  std::map<unsigned, store::ProcessSpan> still;
  for (const auto& p : d.processes) {
    store::ProcessSample ps{ts_ms, index, p.pid, mib(p.used_mem_bytes), util::widen(p.sm_util_pct),
                            util::widen(p.mem_util_pct), other_engines(p)};
    auto it = state.open.find(p.pid);
    store::ProcessSpan span;
    if (it != state.open.end() && it->second.start_unix == p.host.start_time_unix) {
      span = it->second;
    } else {
      span.gpu = index;
      span.pid = p.pid;
      span.first_ms = ts_ms;
      span.start_unix = p.host.start_time_unix;
      span.user = p.host.user.value_or("");
      span.command = process_command(p);
      span.container = container_text(p.host);
      span.slurm_job = p.host.slurm_job_id.value_or("");
      // Its listing began while it had the pid only if a full listing after it started did not
      // show the pid: else the listing may be a stale context's, left by the pid's last owner.
      span.listed_after_start = started_before(span.start_unix, state.listed_ms);
    }
    span.last_ms = ts_ms;
    span.mem_used_mib_max = std::max(span.mem_used_mib_max, ps.mem_used_mib.value_or(0));
    if (span.first_ms == ts_ms) rec.add(store::Event{ts_ms, index, "process-start", process_detail(span)});
    rec.update(span);
    // A steady process costs one row a minute, not one per read: a sample is written when its
    // memory or utilization changes, and at least every kProcessSampleEveryMs. Unknown and 0 are
    // different values (optional comparison): a process whose utilization becomes readable and
    // idle is a change, so the store never shows it idle before it was known to be.
    auto& last = state.written[p.pid];
    if (span.first_ms == ts_ms || last.mem_used_mib != ps.mem_used_mib || last.sm_util_pct != ps.sm_util_pct ||
        last.mem_util_pct != ps.mem_util_pct || last.other_util_pct != ps.other_util_pct ||
        ts_ms - last.ts_ms >= kProcessSampleEveryMs) {
      rec.add(ps);
      last = ps;
    }
    still[p.pid] = span;
  }
  for (const auto& [pid, span] : state.open) {
    auto it = still.find(pid);
    if (it == still.end() || it->second.first_ms != span.first_ms) {
      rec.add(store::Event{ts_ms, index, "process-end", process_detail(span)});
    }
  }
  state.open = std::move(still);
  std::erase_if(state.written, [&](const auto& entry) { return !state.open.contains(entry.first); });
  state.processes = d.processes;
  state.listed_ms = listing_read_in_full(d) ? std::optional<long long>(ts_ms) : std::nullopt;
}

void Tracker::observe_jobs(long long ts_ms, bool gap, store::Recorder& rec) {
  // Nobody watched in between: the spans ended when they were last seen.
  if (gap) open_jobs_.clear();
  std::map<std::pair<std::string, unsigned>, store::JobSpan> still;
  const auto hold = [&](const std::string& job, unsigned gpu) {
    const std::pair<std::string, unsigned> key{job, gpu};
    if (still.contains(key)) return;  // a pod's second container on the GPU
    store::JobSpan span;
    if (auto it = open_jobs_.find(key); it != open_jobs_.end()) {
      span = it->second;
    } else {
      span.job = job;
      span.gpu = gpu;
      span.first_ms = ts_ms;
    }
    if (auto info = jobs_.infos.find(job); info != jobs_.infos.end()) {
      if (!info->second.user.empty()) span.user = info->second.user;
      if (!info->second.partition.empty()) span.partition = info->second.partition;
    }
    span.last_ms = ts_ms;
    rec.update(span);
    still[key] = std::move(span);
  };
  for (const auto& [gpu, jobs] : jobs_.map) {
    for (const auto& job : jobs) hold(job, gpu);
  }
  // A pod's hold on a GPU is recorded as a job's is, named pod/NAMESPACE/NAME.
  for (const auto& [gpu, pods] : jobs_.pods) {
    for (const auto& pod : pods) hold(host::pod_job(pod), gpu);
  }
  open_jobs_ = std::move(still);
}

// Each MIG device's class span (docs/mig.md), extended while its class and profile hold; an
// instance gone from the layout keeps the span it had when last seen. An empty MIG device leased to
// a job (by its MIG UUID) is reserved-idle, as a whole GPU is.
void Tracker::observe_mig(const gpu::Device& view, GpuState& state, long long ts_ms, store::Recorder& rec,
                          const std::set<std::string>& leased) {
  std::map<unsigned, store::MigSpan> still;
  for (std::size_t k = 0; k < view.mig.size(); ++k) {
    const gpu::MigDevice& m = view.mig[k];
    if (!m.gpu_instance_id) continue;
    const gpu::MigActivity a = gpu::classify_mig(view, k, thresholds_, ts_ms / 1000,
                                                 m.uuid && leased.contains(*m.uuid) ? gpu::Leased::Yes : gpu::Leased::No);
    const std::string profile = m.profile.value_or("");
    auto it = state.mig_spans.find(*m.gpu_instance_id);
    store::MigSpan span;
    if (it != state.mig_spans.end() && it->second.activity == a.activity && it->second.measured == a.measured &&
        it->second.profile == profile) {
      span = it->second;
    } else {
      if (it != state.mig_spans.end()) {
        it->second.end_ms = ts_ms;  // the class changed at this sample
        rec.update(it->second);
      }
      span = store::MigSpan{view.id.index, *m.gpu_instance_id, profile, m.slices.value_or(0), a.activity,
                            a.measured, ts_ms, ts_ms};
    }
    span.end_ms = ts_ms;
    rec.update(span);
    still[*m.gpu_instance_id] = std::move(span);
  }
  state.mig_spans = std::move(still);
}

void Tracker::observe(const gpu::Snapshot& snap, long long ts_ms, bool with_processes, store::Recorder& rec,
                      const std::set<std::string>& leased, const JobView* jobs) {
  if (jobs != nullptr) jobs_ = *jobs;
  if (jobs != nullptr || !open_jobs_.empty()) {
    observe_jobs(ts_ms, jobs_last_ms_ > 0 && ts_ms - jobs_last_ms_ > gap_ms_, rec);
    jobs_last_ms_ = ts_ms;
  }
  for (const auto& d : snap.devices) {
    const unsigned index = d.id.index;
    GpuState& state = gpus_[index];
    const bool gap = state.last_ms > 0 && ts_ms - state.last_ms > gap_ms_;
    if (gap) {
      // Nobody watched in between: what was open ended when it was last seen.
      state.span.reset();
      state.mig_spans.clear();
      state.held_since_ms.reset();
      state.open.clear();
      state.written.clear();
      state.listed_ms.reset();
    }
    state.last_ms = ts_ms;
    if (with_processes) observe_processes(d, state, ts_ms, rec);

    // Classify with the processes last listed (a fast sample does not list them).
    const unsigned util = d.sample.util_gpu_pct.value_or(0);
    if (util == 0 && !state.processes.empty()) {
      if (!state.held_since_ms) state.held_since_ms = ts_ms;
    } else {
      state.held_since_ms.reset();
    }
    const long long held_s = state.held_since_ms ? (ts_ms - *state.held_since_ms) / 1000 : 0;
    gpu::Device view = d;
    if (!with_processes) {
      view.processes = state.processes;
      gpu::match_mig_processes(view.mig, view.processes);  // this sample's MIG devices, by instance ids
    }
    const bool job_holds = jobs_.map.contains(index) || jobs_.pods.contains(index);
    const gpu::Leased given =
        job_holds || (d.id.uuid && leased.contains(*d.id.uuid)) ? gpu::Leased::Yes : gpu::Leased::No;
    const gpu::Activity activity = gpu::classify_with_history(view, thresholds_, held_s, given);
    observe_mig(view, state, ts_ms, rec, leased);

    store::GpuSample s;
    s.ts_ms = ts_ms;
    s.gpu = index;
    s.util_pct = util::widen(d.sample.util_gpu_pct);
    s.mem_util_pct = util::widen(d.sample.util_mem_pct);
    s.mem_used_mib = mib(d.sample.mem_used_bytes);
    if (d.sample.power_mw) s.power_w = (*d.sample.power_mw + 500) / 1000;
    s.temp_c = util::widen(d.sample.temp_c);
    s.sm_mhz = util::widen(d.sample.clock_sm_mhz);
    s.mem_mhz = util::widen(d.sample.clock_mem_mhz);
    s.enc_pct = util::widen(d.sample.util_encoder_pct);
    s.dec_pct = util::widen(d.sample.util_decoder_pct);
    s.activity = activity;
    rec.add(s);

    // Throttling that slows the clocks for heat or power, as it starts and stops.
    const std::uint64_t harmful = gpu::harmful_clock_events(d.sample.clock_event_reasons.value_or(0));
    if (harmful != state.harmful_events) {
      if (harmful != 0) {
        rec.add(store::Event{ts_ms, index, "throttle-start", clock_event_words(harmful)});
      } else {
        rec.add(store::Event{ts_ms, index, "throttle-end", clock_event_words(state.harmful_events)});
      }
      state.harmful_events = harmful;
    }

    // XID events (critical errors the driver reported), each once.
    for (const unsigned xid : d.new_xids) rec.add(store::Event{ts_ms, index, "xid", fmt::format("XID {}", xid)});

    // The class span: extended while the class holds, closed at the sample that changes it.
    if (state.span && state.span->activity != activity) {
      state.span->end_ms = ts_ms;
      rec.update(*state.span);
      if (activity == gpu::Activity::Fault) {
        rec.add(store::Event{ts_ms, index, d.lost ? "lost" : "fault", gpu::fault_reason(d).value_or("")});
      } else if (state.span->activity == gpu::Activity::Fault) {
        rec.add(store::Event{ts_ms, index, "fault-cleared", ""});
      }
      state.span.reset();
    } else if (!state.span && activity == gpu::Activity::Fault) {
      rec.add(store::Event{ts_ms, index, d.lost ? "lost" : "fault", gpu::fault_reason(d).value_or("")});
    }
    if (!state.span) state.span = store::ActivitySpan{index, activity, ts_ms, ts_ms};
    state.span->end_ms = ts_ms;
    rec.update(*state.span);
  }
}

}  // namespace tarmac::agent
