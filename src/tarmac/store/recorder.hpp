// The recorder: batches what the agent observes and writes it to the SQLite store in one
// transaction per flush, with the 1-minute and 1-hour rollups of the same samples, so a flush is
// all or nothing and the rollups always agree with the raw samples. A failed flush (full disk,
// read-only directory, the file gone) keeps the batch in memory, bounded, and is retried at the
// next flush; a kill -9 loses at most what was not yet flushed.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tarmac/store/rows.hpp"
#include "tarmac/store/sqlite.hpp"

namespace tarmac::store {

// How long each level is kept; 0 keeps it forever.
struct Retention {
  long long samples_ms = 7LL * 86400 * 1000;
  long long minutes_ms = 90LL * 86400 * 1000;
  long long hours_ms = 730LL * 86400 * 1000;
  long long events_ms = 365LL * 86400 * 1000;
};

struct RecorderOptions {
  std::string path;  // the database file
  Retention retention;
  // Rows kept in memory while the store cannot be written; the oldest samples go first.
  std::size_t max_pending_rows = 200000;
};

// The outcome of one flush, for the agent's log.
struct FlushStatus {
  bool ok = true;
  Failure failure = Failure::None;
  std::string message;         // why it failed
  std::size_t written = 0;     // rows written by this flush
  std::size_t pending = 0;     // rows still waiting
  std::size_t dropped = 0;     // samples dropped since the last successful flush (memory bound)
};

class Recorder {
 public:
  explicit Recorder(RecorderOptions options);

  void add(const GpuInfo& info, long long seen_ms);
  void add(const GpuSample& sample);
  void add(const SlowSample& sample);
  void add(const ProcessSample& sample);
  void add(const Event& event);
  // The latest state of a span: replaces an earlier add of the same span (same key) in this batch.
  void update(const ActivitySpan& span);
  void update(const MigSpan& span);
  void update(const ProcessSpan& span);
  void update(const JobSpan& span);

  // Writes everything pending in one transaction (opening the database first if needed).
  [[nodiscard]] FlushStatus flush();
  // Deletes what is older than the retention allows, relative to `now_ms`.
  [[nodiscard]] Result<void> prune(long long now_ms);

  [[nodiscard]] std::size_t pending_rows() const;
  [[nodiscard]] bool is_open() const { return db_.has_value(); }

 private:
  Result<void> open();
  Result<void> write_batch();
  void enforce_bound();

  RecorderOptions options_;
  std::optional<Database> db_;
  struct GpuSeen {
    GpuInfo info;
    long long first_ms = 0;
    long long last_ms = 0;
  };
  std::map<unsigned, GpuSeen> gpus_;
  std::vector<GpuSample> samples_;
  std::vector<SlowSample> slow_samples_;
  std::vector<ProcessSample> process_samples_;
  std::vector<Event> events_;
  std::map<std::pair<unsigned, long long>, ActivitySpan> activity_;
  std::map<std::tuple<unsigned, unsigned, long long>, MigSpan> mig_activity_;
  std::map<std::tuple<unsigned, unsigned, long long>, ProcessSpan> processes_;
  std::map<std::tuple<std::string, unsigned, long long>, JobSpan> jobs_;
  std::size_t dropped_ = 0;
};

// The database file inside a state directory.
[[nodiscard]] std::string database_path(const std::string& state_dir);

}  // namespace tarmac::store
