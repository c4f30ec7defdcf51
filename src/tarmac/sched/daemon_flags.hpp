// Jobs that use GPUs they were not given (daemon_state.hpp). Private to src/tarmac/sched.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>

#include "tarmac/sched/daemon_gpus.hpp"
#include "tarmac/sched/daemon_table.hpp"

namespace tarmac::sched {

// Jobs whose processes use GPUs they were not given: each (job, GPU) flagged once, on the job's
// record (Job::outside), in the log and as a store event. A process's job is the TARMAC_JOB_ID of
// its environment, read once per pid. Owns that cache and what was flagged.
class OutsideUse {
 public:
  OutsideUse(JobTable& table, util::LogSink log) : table_(table), log_(std::move(log)) {}

  // Flags what `seen` (the sampler's latest sample) shows of running jobs outside their GPUs.
  void check(const std::map<std::string, GpuUse>& seen);

 private:
  // The running job that `pid` belongs to, by its environment; nullptr for none.
  Job* running_job_of(unsigned pid);
  void flag(Job& job, const GpuUse& gpu, unsigned pid);

  JobTable& table_;
  util::LogSink log_;
  std::map<unsigned, std::string> job_of_pid_;  // environ cache, of the pids seen in the latest sample
  std::set<std::pair<long long, unsigned>> flagged_;
};

}  // namespace tarmac::sched
