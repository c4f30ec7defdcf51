// `tarmac agent`: the sampler and recorder loop (PRODUCT.md §7). Fast values every interval,
// processes and slow values on their own cadences, everything through the Tracker into the
// Recorder, flushed every flush interval of real time. Stops cleanly when `stop` is set.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "tarmac/agent/clock.hpp"
#include "tarmac/agent/tracker.hpp"
#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/backend.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::agent {

struct SampleView;

struct AgentOptions {
  long long interval_ms = 1000;          // fast values (clock time)
  long long process_interval_ms = 5000;  // processes and their host attribution (clock time)
  long long slow_interval_ms = 30000;    // PCIe throughput and GPM (clock time)
  long long flush_interval_ms = 5000;    // real time between writes: what a kill -9 can lose
  long long duration_ms = 0;             // stop after this much clock time; 0 runs until stopped
  std::string state_dir;
  store::Retention retention;
  gpu::ActivityThresholds thresholds;
  // Called on the sampling thread after every successful sample; must be quick.
  std::function<void(const SampleView&)> on_sample;
  // The UUIDs of the GPUs the scheduler has given out now (for the reserved-idle class); may be
  // empty. Called on the sampling thread before every sample is classified; must be quick.
  std::function<std::set<std::string>()> leased_gpus;
  // The Slurm jobs and Kubernetes pods on the GPUs of `snapshot` (the HPC job mapping,
  // slurm.job_map_dir; the kubelet's allocations as kube::PodWatcher last read them); unset on a
  // node with neither. Called on the sampling thread at every sample; must be quick (a directory
  // of a few small files, a copy of the last answer).
  std::function<JobView(const gpu::Snapshot& snapshot)> jobs;
};

// What a run did, for its last log line and the benchmarks.
struct AgentSummary {
  long long gpu_samples = 0;
  long long snapshots = 0;
  long long late_samples = 0;  // samples taken after their time because the previous one ran long
  long long clock_ms = 0;      // clock time covered
  double real_s = 0;           // real time taken
};

// What the agent saw at one sample, for the live endpoints and alerts: every GPU's latest values
// with the processes of the latest process read and the latest slow values merged in.
struct SampleView {
  const gpu::Snapshot& merged;
  const std::map<unsigned, gpu::Activity>& classes;
  long long ts_ms;
  const AgentSummary& summary;
  long long nvml_errors;       // failed snapshots and values since the start
  double sample_seconds;       // real time this snapshot took
  const JobView& jobs;         // the Slurm jobs and pods on the GPUs as last read (empty without AgentOptions::jobs)
  const std::map<unsigned, gpu::ActivitySince>& since;  // since when each GPU is in its class (ts_ms's clock)
  const std::set<std::string>& leased;  // AgentOptions::leased_gpus as this sample was classified with
};

// The fast value groups the agent records and classifies with.
[[nodiscard]] gpu::ValueGroups recorded_groups();

// Runs until `stop` is set or the duration has passed; fails only when nothing can be sampled at
// start. A store that cannot be written is logged and retried, never fatal.
[[nodiscard]] Result<AgentSummary> run_agent(gpu::Backend& backend, const Clock& clock, const AgentOptions& options,
                                             const std::atomic<bool>& stop, const util::LogSink& log);

}  // namespace tarmac::agent
