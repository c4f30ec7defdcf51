// How long a process has been seen idle: built from observations of its per-process SM
// utilization, whether reap watched them itself or the agent's store recorded them. The contract
// (gpu::GpuProcess::sm_util_pct): 0 is known idle, a nullopt reading is unknown and never idle.
// Nothing here claims more idle time than was observed.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tarmac/store/rows.hpp"

namespace tarmac::reap {

// Where a process's utilization reading came from.
enum class UtilSource {
  PerProcess,    // NVML's per-process sample (or the store's record of it)
  DeviceAlone,   // the GPU's own utilization while this process was its only one (PRODUCT.md §7)
  None,          // no reading: unknown
};

// One reading of one process at one moment.
struct Observation {
  long long ts_ms = 0;
  std::optional<unsigned> sm_util_pct;  // nullopt: unknown
  std::optional<std::uint64_t> mem_used_bytes;
  UtilSource source = UtilSource::None;
};

// What the observations say about a process's idleness.
struct IdleHistory {
  long long observed_since_ms = 0;  // the first observation of the unbroken run that ends at the last
  long long observed_until_ms = 0;  // the last observation
  // The first reading of the run of known-0 readings that ends at the last one; nullopt when the
  // last reading is not a known 0.
  std::optional<long long> idle_since_ms;
  std::optional<unsigned> last_util_pct;  // the last reading (nullopt: unknown)
  UtilSource last_source = UtilSource::None;
  std::vector<Observation> recent;  // the last kRecentObservations, oldest first, for the evidence

  [[nodiscard]] long long observed_ms() const { return observed_until_ms - observed_since_ms; }
  // How long it has been idle by what was seen: 0 when it is not idle now.
  [[nodiscard]] long long idle_ms() const { return idle_since_ms ? observed_until_ms - *idle_since_ms : 0; }
  [[nodiscard]] bool empty() const { return recent.empty(); }
};

inline constexpr std::size_t kRecentObservations = 12;

// The history of `observations` (sorted by time, of one process): a gap longer than `max_gap_ms`
// between two observations breaks the watch, so what came before it counts for nothing.
[[nodiscard]] IdleHistory idle_history(const std::vector<Observation>& observations, long long max_gap_ms);

// The history the agent's store recorded of one process: `span` is its stay on the GPU (ended by
// the agent at any gap in sampling, so it was watched without a break from first_ms to last_ms),
// `rows` its process_sample rows in that span, sorted by time (written when a value changed, so
// a value holds until the next row), and `now` reap's own reading (kept, in its place in time,
// also when the agent's span reaches past it). Without a row in
// the span the store says nothing of it: the history is `now` alone.
[[nodiscard]] IdleHistory store_history(const store::ProcessSpan& span, const std::vector<store::ProcessSample>& rows,
                                        const Observation& now);

[[nodiscard]] const char* to_string(UtilSource source);

}  // namespace tarmac::reap
