// Reading the store back (tarmac history, export, report): time ranges in milliseconds since the
// epoch, half-open [since, until). Opens read-only, so readers never block or disturb the agent.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tarmac/store/rows.hpp"
#include "tarmac/store/sqlite.hpp"

namespace tarmac::store {

struct TimeRange {
  long long since_ms = 0;
  long long until_ms = 0;
};

enum class Level { Samples, Minutes, Hours };

// One question of Reader::processes_of: the spans of `pid` on GPU `gpu` (the store's index) that
// overlap `range`.
struct SpanQuery {
  unsigned gpu = 0;
  unsigned pid = 0;
  TimeRange range;
};

class Reader {
 public:
  // Opens the store at `path` read-only and checks it is one this tarmac reads.
  [[nodiscard]] static Result<Reader> open(const std::string& path);

  [[nodiscard]] Result<std::vector<GpuInfo>> gpus();
  // The first and last recorded times, or nullopt for an empty store.
  [[nodiscard]] Result<std::optional<TimeRange>> recorded();
  [[nodiscard]] Result<std::vector<GpuSample>> samples(const TimeRange& range, const std::vector<unsigned>& gpus);
  [[nodiscard]] Result<std::vector<Rollup>> rollups(Level level, const TimeRange& range,
                                                    const std::vector<unsigned>& gpus);
  [[nodiscard]] Result<std::vector<ProcessSample>> process_samples(const TimeRange& range,
                                                                   const std::vector<unsigned>& gpus);
  // Spans that overlap the range (not clipped).
  [[nodiscard]] Result<std::vector<ActivitySpan>> activity(const TimeRange& range);
  // The MIG devices' class spans overlapping the range (docs/mig.md); none in an older store.
  [[nodiscard]] Result<std::vector<MigSpan>> mig_activity(const TimeRange& range);
  [[nodiscard]] Result<std::vector<ProcessSpan>> processes(const TimeRange& range);
  // The spans of `pid` on GPU `gpu` (the store's index) that overlap the range.
  [[nodiscard]] Result<std::vector<ProcessSpan>> processes_of(unsigned gpu, unsigned pid, const TimeRange& range);
  // The answer to each query, in order, from one prepared statement (reap asks for every listed
  // process in a pass: preparing the statement cost more than the lookups).
  [[nodiscard]] Result<std::vector<std::vector<ProcessSpan>>> processes_of(const std::vector<SpanQuery>& queries);
  [[nodiscard]] Result<std::vector<Event>> events(const TimeRange& range);
  // Slurm jobs' spans on GPUs that overlap the range (not clipped), by first time; none from a
  // store of schema 4 or older that no agent has upgraded.
  [[nodiscard]] Result<std::vector<JobSpan>> jobs(const TimeRange& range);

 private:
  explicit Reader(Database db) : db_(std::move(db)) {}
  Database db_;
};

}  // namespace tarmac::store
