#include "tarmac/reap/history.hpp"

#include <algorithm>
#include <limits>

#include "tarmac/util/units.hpp"

namespace tarmac::reap {
namespace {

// The index where the unbroken run that ends at the last observation begins.
std::size_t run_start(const std::vector<Observation>& observations, long long max_gap_ms) {
  std::size_t start = observations.size() - 1;
  while (start > 0 && observations[start].ts_ms - observations[start - 1].ts_ms <= max_gap_ms) --start;
  return start;
}

// The first index of the trailing run (from `from`) of known-0 readings; nullopt when the last
// reading is not one.
std::optional<std::size_t> idle_start(const std::vector<Observation>& observations, std::size_t from) {
  std::optional<std::size_t> start;
  for (std::size_t i = observations.size(); i-- > from;) {
    const auto& util = observations[i].sm_util_pct;
    if (!util || *util != 0) break;
    start = i;
  }
  return start;
}

bool in_percent(long long v) { return v >= 0 && v <= 100; }

// A row's reading, as gather's observe() takes one: the busiest of SM, memory and the other engines
// (encoder, decoder, JPEG, OFA); unknown when SM is, or when any known figure is garbage (outside
// 0..100). A store before schema 2 has no memory figure, before 3 none of the other engines: what
// it has counts.
std::optional<unsigned> busiest_engine(const store::ProcessSample& row) {
  if (!row.sm_util_pct || !in_percent(*row.sm_util_pct)) return std::nullopt;
  long long out = *row.sm_util_pct;
  for (const auto& v : {row.mem_util_pct, row.other_util_pct}) {
    if (!v) continue;
    if (!in_percent(*v)) return std::nullopt;
    out = std::max(out, *v);
  }
  return static_cast<unsigned>(out);
}

}  // namespace

IdleHistory idle_history(const std::vector<Observation>& observations, long long max_gap_ms) {
  IdleHistory h;
  if (observations.empty()) return h;
  const std::size_t from = run_start(observations, max_gap_ms);
  h.observed_since_ms = observations[from].ts_ms;
  h.observed_until_ms = observations.back().ts_ms;
  if (const auto idle = idle_start(observations, from)) h.idle_since_ms = observations[*idle].ts_ms;
  h.last_util_pct = observations.back().sm_util_pct;
  h.last_source = observations.back().source;
  const std::size_t keep = std::min(kRecentObservations, observations.size() - from);
  h.recent.assign(observations.end() - static_cast<std::ptrdiff_t>(keep), observations.end());
  return h;
}

IdleHistory store_history(const store::ProcessSpan& span, const std::vector<store::ProcessSample>& rows,
                          const Observation& now) {
  std::vector<Observation> observations;
  observations.reserve(rows.size());
  for (const auto& row : rows) {
    if (row.ts_ms < span.first_ms || row.ts_ms > span.last_ms) continue;
    Observation o;
    o.ts_ms = row.ts_ms;
    if (const auto busiest = busiest_engine(row)) {
      o.sm_util_pct = *busiest;
      o.source = UtilSource::PerProcess;
    }
    if (row.mem_used_mib && *row.mem_used_mib >= 0) {
      o.mem_used_bytes = static_cast<std::uint64_t>(*row.mem_used_mib) * util::kMiB;
    }
    observations.push_back(o);
  }
  const bool recorded = !observations.empty();
  // reap's own reading counts even when the agent sampled after it (its span is newer): it is in
  // its place in time, and a busy one breaks the idle run wherever it falls.
  observations.push_back(now);
  std::stable_sort(observations.begin(), observations.end(), [](const auto& a, const auto& b) { return a.ts_ms < b.ts_ms; });
  // The span is the watch: no gap inside it breaks the run (the agent ends a span at a gap), and
  // the caller took `now` within the agent's cadence of the span's end.
  IdleHistory h = idle_history(observations, std::numeric_limits<long long>::max());
  if (recorded) h.observed_since_ms = std::min(h.observed_since_ms, span.first_ms);
  return h;
}

const char* to_string(UtilSource source) {
  switch (source) {
    case UtilSource::PerProcess: return "per-process";
    case UtilSource::DeviceAlone: return "device (only process)";
    case UtilSource::None: return "none";
  }
  return "none";
}

}  // namespace tarmac::reap
