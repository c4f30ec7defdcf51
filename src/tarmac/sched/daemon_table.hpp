// The scheduler's job table (daemon_state.hpp). Private to src/tarmac/sched.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tarmac/sched/jobdb.hpp"
#include "tarmac/sched/queue.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::sched {

// What the followers of a job hear (a client attached to it, the scheduler's other parts).
enum class JobEvent { Started, Requeued, Ended };
[[nodiscard]] const char* to_string(JobEvent event);

// The job table: every job and lease of the agent that has not ended, and their record. Each change
// is saved in the store (JobDb); a job's environment is kept beside its files (jobs_dir, mode 0600
// in a 0700 directory), never in the store, which other users may read; each ended or preempted
// job's GPU time goes into the fairness usage. Owns the store's connection, the jobs, their files
// and the usage; knows nothing of processes, sockets or GPUs: whoever follows jobs hears of each
// start, requeue and end through the sink given to on_event.
class JobTable {
 public:
  using EventSink = std::function<void(const Job& job, JobEvent event)>;

  JobTable(JobDb db, std::string jobs_dir, std::string logs_dir, util::LogSink log);
  void on_event(EventSink sink) { sink_ = std::move(sink); }

  [[nodiscard]] JobsById& jobs() { return jobs_; }
  [[nodiscard]] const JobsById& jobs() const { return jobs_; }
  // The live job `id`; nullptr when it is not in the table.
  [[nodiscard]] Job* find(long long id);
  // Adds a job the store has (inserted, or read back after a restart); returns the table's copy.
  Job& add(Job job);

  // Records a new job in the store, which gives it its id.
  [[nodiscard]] Result<void> insert(Job& job) { return db_.insert(job); }
  // Saves every column of `job`; a failure is logged (the job goes on).
  void persist(const Job& job);
  // An event in the store's event table (lease_idle, job_outside, ...); a failure is logged.
  void record_event(std::optional<unsigned> gpu, const std::string& kind, const std::string& detail);
  // Every job and lease of the store that has not ended (JobDb::unfinished), to read back after a restart.
  [[nodiscard]] Result<std::vector<Job>> unfinished() { return db_.unfinished(); }
  // The store's jobs and leases, for a listing (JobDb::list).
  [[nodiscard]] Result<std::vector<Job>> list(bool all, long long ended_since_ms) { return db_.list(all, ended_since_ms); }
  // Job `id` as the store has it once it has left the table (ended); nullopt when there is none.
  [[nodiscard]] std::optional<Job> ended(long long id);

  [[nodiscard]] bool save_env(const Job& job);
  void load_env(Job& job);

  [[nodiscard]] const std::string& jobs_dir() const { return jobs_dir_; }
  // A file of job `id` in jobs_dir: "json" (its spec), "lock", "run", "exit", "env".
  [[nodiscard]] std::string file(long long id, const char* ext) const;
  // The output file of a detached job (logs_dir, readable by its owner).
  [[nodiscard]] std::string log_file(long long id) const;
  // The files of one run of the job (a preempted job is started again with new ones).
  void remove_job_files(long long id);

  // Tells the followers of `job` about `event`.
  void announce(const Job& job, JobEvent event);
  // Records that `job` ended in `state` (an empty `reason` keeps the one it has), counts its GPU
  // time, and announces its end; it stays in the table until erased.
  void finish(Job& job, JobState state, const std::string& reason);
  // finish(), then takes the job out of the table; returns it as it ended.
  Job end(Job& job, JobState state, const std::string& reason);
  void erase(long long id) { jobs_.erase(id); }
  // Clears what a run of `job` left (files, GPUs, its wrapper) and queues it again with `reason`.
  void back_to_queue(Job& job, const std::string& reason);
  // A preempted job's wrapper ended: its GPU time so far counts, and it waits in the queue again.
  void requeue_preempted(Job& job, long long now_unix_ms);

  // Reads the fairness usage of the jobs that ended in the last `window_ms`.
  void load_usage(long long window_ms, long long now_unix_ms);
  // GPU-milliseconds per uid of the jobs that ended within the fairness window.
  [[nodiscard]] const std::map<uid_t, long long>& usage() const { return usage_; }
  [[nodiscard]] unsigned gpus_held_by(uid_t uid) const { return sched::gpus_held_by(jobs_, uid); }
  // How many jobs of `uid` wait in the queue.
  [[nodiscard]] unsigned queued_of(uid_t uid) const;
  // The UUIDs of the GPUs running jobs and active leases hold.
  [[nodiscard]] std::set<std::string> given_gpus() const;

 private:
  void log(util::LogLevel level, const std::string& message) const {
    if (log_) log_(level, message);
  }
  void count_usage(const Job& job, long long until_unix_ms);

  JobDb db_;
  std::string jobs_dir_;
  std::string logs_dir_;
  util::LogSink log_;
  EventSink sink_;
  JobsById jobs_;
  std::map<uid_t, long long> usage_;
};

}  // namespace tarmac::sched
