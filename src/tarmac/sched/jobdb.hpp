// The agent's jobs and leases in its SQLite store (table sched_job, docs/recorder.md), and the
// scheduler's events in the store's event table. One connection, used by the scheduler's thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tarmac/sched/job.hpp"
#include "tarmac/store/sqlite.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::sched {

class JobDb {
 public:
  // Opens the store at `path` (creating it and its schema when needed).
  [[nodiscard]] static Result<JobDb> open(const std::string& path);

  // Adds `job` and gives it its id (never reused).
  [[nodiscard]] Result<void> insert(Job& job);
  // Writes every column of `job`.
  [[nodiscard]] Result<void> save(const Job& job);

  // Every job and lease that has not ended.
  [[nodiscard]] Result<std::vector<Job>> unfinished();
  // Jobs and leases by id: all of them, or those not ended or ended at or after `ended_since_ms`.
  [[nodiscard]] Result<std::vector<Job>> list(bool all, long long ended_since_ms);
  // GPU-milliseconds of ended jobs per uid within [since_ms, now_ms].
  [[nodiscard]] Result<std::map<uid_t, long long>> usage(long long since_ms, long long now_ms);

  // An event in the store's event table (kinds: lease_idle, lease_reclaimed, job_outside, ...).
  [[nodiscard]] Result<void> event(long long ts_ms, std::optional<unsigned> gpu, const std::string& kind,
                                   const std::string& detail);

 private:
  explicit JobDb(store::Database db) : db_(std::move(db)) {}
  [[nodiscard]] Result<std::vector<Job>> select(const std::string& where, long long param);
  store::Database db_;
};

}  // namespace tarmac::sched
