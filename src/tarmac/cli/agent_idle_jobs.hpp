// The agent's side of slurm.idle_job_action (docs/slurm.md, "Jobs that hold GPUs idle"): the pure
// policy (slurm::IdleJobs) is fed every sample on the sampling thread; what it decides is carried
// out on a thread of its own, so that a slow or hung Slurm command never delays a sample: a warning
// goes to the alert sinks; a cancellation asks `scontrol show job -o` whether the job is
// interactive (those are only warned unless slurm.idle_job_cancel_interactive), then runs
// `scancel`, each with a 10 s bound, and says what happened through the sinks.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "tarmac/agent/tracker.hpp"
#include "tarmac/alerts/rules.hpp"
#include "tarmac/slurm/idle_jobs.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::cli {

struct AgentIdleJobsOptions {
  slurm::IdleJobSettings settings;
  std::string scontrol;  // resolved paths ("" when not found: cancelling is then impossible, and said)
  std::string scancel;
  std::function<void(alerts::Notice)> announce;
  util::LogSink log;
};

class AgentIdleJobs {
 public:
  explicit AgentIdleJobs(AgentIdleJobsOptions options);
  ~AgentIdleJobs();  // finishes the command in progress, drops the rest
  AgentIdleJobs(const AgentIdleJobs&) = delete;
  AgentIdleJobs& operator=(const AgentIdleJobs&) = delete;

  // On the sampling thread, every sample: quick.
  void observe(const agent::JobView& jobs, const std::map<unsigned, gpu::Activity>& classes, long long ts_ms);

 private:
  void loop();
  void carry_out(const slurm::IdleJobDecision& d);

  AgentIdleJobsOptions options_;
  slurm::IdleJobs policy_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<slurm::IdleJobDecision, long long>> queue_;  // with the sample's time
  bool stopping_ = false;
  std::thread thread_;
};

// Runs `argv` (argv[0] the program's path) with no input, its output captured (at most 64 KiB),
// for at most `timeout_ms` (then SIGKILL): its wait status, or an error naming what failed.
[[nodiscard]] Result<int> run_bounded(const std::vector<std::string>& argv, long long timeout_ms, std::string& output);

}  // namespace tarmac::cli
