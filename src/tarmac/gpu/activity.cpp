#include "tarmac/gpu/activity.hpp"

#include <cmath>
#include <functional>

#include <algorithm>
#include <fmt/format.h>

#include "tarmac/gpu/clock_events.hpp"

namespace tarmac::gpu {

std::optional<std::string> fault_reason(const Device& d) {
  if (d.lost) return fmt::format("lost: {}", *d.lost);
  if (d.sample.clock_event_reasons) {
    if (auto harmful = harmful_clock_events(*d.sample.clock_event_reasons); harmful != 0) {
      std::string words;
      for (const auto& n : clock_event_names()) {
        if ((harmful & n.bit) != 0) words += (words.empty() ? "" : ", ") + std::string(n.words);
      }
      return fmt::format("clocks slowed: {}", words);
    }
  }
  if (d.sample.ecc_uncorrected_volatile.value_or(0) > 0) {
    return fmt::format("{} uncorrectable ECC errors since the driver loaded", *d.sample.ecc_uncorrected_volatile);
  }
  if (d.sample.remapped_rows_failure == true) return std::string("row remapping failed");
  if (d.sample.retired_pages_pending == true || d.sample.remapped_rows_pending == true) {
    return std::string("memory pages pending retirement: reset the GPU");
  }
  return std::nullopt;
}

namespace {
Device slice_view(const Device& d, std::size_t k);
}  // namespace

bool is_starved(const Device& d, const ActivityThresholds& t) {
  if (d.lost || d.processes.empty()) return false;
  // In MIG mode the board has no utilization: a slice is starved, measured by its GPM, or none is.
  if (d.modes.mig_mode_current == true && !d.mig.empty()) {
    for (std::size_t k = 0; k < d.mig.size(); ++k) {
      const Device v = slice_view(d, k);
      if (v.sample.util_gpu_pct && is_starved(v, t)) return true;
    }
    return false;
  }
  if (d.sample.util_gpu_pct.value_or(0) >= t.busy_util_pct) return false;
  // Little memory held at low utilization is a light process (a monitoring probe, a small
  // notebook), not a starved job: the GPU is still available.
  const auto total = d.id.mem_total_bytes.value_or(0);
  const auto used = d.sample.mem_used_bytes.value_or(0);
  return total > 0 && used * 100 >= total * t.starved_mem_pct;
}

namespace {

// The rules of classify with the holding decision already made by the caller.
Activity classify_given(const Device& d, const ActivityThresholds& t, bool held_long_enough, Leased leased) {
  if (fault_reason(d)) return Activity::Fault;
  const unsigned util = d.sample.util_gpu_pct.value_or(0);
  if (util >= t.busy_util_pct) return Activity::Busy;
  if (d.processes.empty()) return leased == Leased::Yes ? Activity::ReservedIdle : Activity::Idle;
  if (util == 0 && held_long_enough) return Activity::Holding;
  return is_starved(d, t) ? Activity::Starved : Activity::Idle;
}

bool held_long_enough(const Device& d, const ActivityThresholds& t, long long now_unix_s) {
  // The youngest process bounds how long the memory can have been held idle.
  long long youngest_age = -1;
  for (const auto& p : d.processes) {
    if (!p.host.start_time_unix) continue;
    const long long age = now_unix_s - *p.host.start_time_unix;
    youngest_age = youngest_age < 0 ? age : std::min(youngest_age, age);
  }
  return youngest_age < 0 || youngest_age >= t.holding_after_s;
}

// A MIG device seen as a GPU of its own: its memory, its processes and its GPM as utilization.
Device slice_view(const Device& d, std::size_t k) {
  const MigDevice& m = d.mig[k];
  Device v;
  v.id.index = d.id.index;
  v.id.mem_total_bytes = m.mem_total_bytes;
  v.sample.mem_used_bytes = m.mem_used_bytes;
  if (m.gpm_sm_active_pct) v.sample.util_gpu_pct = static_cast<unsigned>(std::lround(*m.gpm_sm_active_pct));
  for (const GpuProcess& p : d.processes) {
    if (p.mig == k) v.processes.push_back(p);
  }
  return v;
}

MigActivity classify_slice(const Device& d, std::size_t k, const ActivityThresholds& t,
                           const std::function<bool(const Device&)>& held, Leased leased = Leased::No) {
  if (fault_reason(d)) return {Activity::Fault, true};
  const Device v = slice_view(d, k);
  if (v.processes.empty()) return {leased == Leased::Yes ? Activity::ReservedIdle : Activity::Idle, true};
  if (!v.sample.util_gpu_pct) return {Activity::Busy, false};  // in use; MIG gives no utilization without GPM
  return {classify_given(v, t, held(v), Leased::No), true};
}

// How active a class is, for a board in MIG mode: its most active slice's class.
int rank(Activity a) {
  switch (a) {
    case Activity::Fault: return 5;
    case Activity::Busy: return 4;
    case Activity::Starved: return 3;
    case Activity::Holding: return 2;
    case Activity::ReservedIdle: return 1;
    case Activity::Idle: return 0;
  }
  return 0;
}

std::optional<Activity> classify_board(const Device& d, const ActivityThresholds& t, Leased leased,
                                       const std::function<bool(const Device&)>& held) {
  if (d.modes.mig_mode_current != true || d.mig.empty() || d.lost) return std::nullopt;
  // A process NVML placed on no MIG device here runs somewhere on the board: in use.
  const bool unplaced = std::any_of(d.processes.begin(), d.processes.end(), [](const GpuProcess& p) { return !p.mig; });
  Activity most = unplaced ? Activity::Busy : Activity::Idle;
  for (std::size_t k = 0; k < d.mig.size(); ++k) {
    const Activity a = classify_slice(d, k, t, held).activity;
    if (rank(a) > rank(most)) most = a;
  }
  if (most == Activity::Idle && leased == Leased::Yes) return Activity::ReservedIdle;
  return most;
}

}  // namespace

void match_mig_processes(const std::vector<MigDevice>& mig, std::vector<GpuProcess>& processes) {
  for (GpuProcess& p : processes) {
    p.mig.reset();
    if (!p.mig_instance) continue;
    for (std::size_t k = 0; k < mig.size(); ++k) {
      if (mig[k].gpu_instance_id == p.mig_instance->first && mig[k].compute_instance_id == p.mig_instance->second) {
        p.mig = static_cast<unsigned>(k);
      }
    }
  }
}

MigActivity classify_mig(const Device& d, std::size_t k, const ActivityThresholds& t, long long now_unix_s,
                         Leased leased) {
  return classify_slice(d, k, t, [&](const Device& v) { return held_long_enough(v, t, now_unix_s); }, leased);
}

Activity classify(const Device& d, const ActivityThresholds& t, long long now_unix_s, Leased leased) {
  const auto held = [&](const Device& v) { return held_long_enough(v, t, now_unix_s); };
  if (auto board = classify_board(d, t, leased, held)) return *board;
  return classify_given(d, t, held(d), leased);
}

Activity classify_with_history(const Device& d, const ActivityThresholds& t, long long held_idle_s, Leased leased) {
  const auto held = [&](const Device&) { return held_idle_s >= t.holding_after_s; };
  if (auto board = classify_board(d, t, leased, held)) return *board;
  return classify_given(d, t, held(d), leased);
}

const char* to_string(Activity a) {
  switch (a) {
    case Activity::Busy: return "busy";
    case Activity::Starved: return "starved";
    case Activity::Holding: return "holding";
    case Activity::Idle: return "idle";
    case Activity::ReservedIdle: return "reserved-idle";
    case Activity::Fault: return "fault";
  }
  return "unknown";
}

}  // namespace tarmac::gpu
