#include "tarmac/gpu/activity.hpp"

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

bool is_starved(const Device& d, const ActivityThresholds& t) {
  if (d.lost || d.processes.empty()) return false;
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

}  // namespace

Activity classify(const Device& d, const ActivityThresholds& t, long long now_unix_s, Leased leased) {
  // The youngest process bounds how long the memory can have been held idle.
  long long youngest_age = -1;
  for (const auto& p : d.processes) {
    if (!p.host.start_time_unix) continue;
    const long long age = now_unix_s - *p.host.start_time_unix;
    youngest_age = youngest_age < 0 ? age : std::min(youngest_age, age);
  }
  return classify_given(d, t, youngest_age < 0 || youngest_age >= t.holding_after_s, leased);
}

Activity classify_with_history(const Device& d, const ActivityThresholds& t, long long held_idle_s, Leased leased) {
  return classify_given(d, t, held_idle_s >= t.holding_after_s, leased);
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
