// What the agent makes of its samples: rows for the store, each GPU's activity class measured over
// time (holding = processes at 0 % for activity.holding_after, by the samples' own clock), the
// spans of classes and processes, and the events (processes appearing and leaving, throttling,
// faults). Pure apart from the Recorder it feeds, so it is tested on hand-built snapshots.
#pragma once

#include <map>
#include <set>
#include <optional>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/model.hpp"
#include "tarmac/host/job_map.hpp"
#include "tarmac/host/pod_map.hpp"
#include "tarmac/store/recorder.hpp"

namespace tarmac::agent {

// Who the GPUs are given to at one moment, by the schedulers tarmac does not run: the Slurm jobs
// (the HPC job mapping, slurm.job_map_dir, and what the prolog recorded of each job) and the
// Kubernetes pods the kubelet allocated them to.
struct JobView {
  host::JobMap map;
  host::JobInfos infos;
  host::PodMap pods;
  bool pods_listed = false;  // the kubelet has answered: a GPU not in `pods` is no pod's
};

class Tracker {
 public:
  // `gap_ms`: a pause between two samples longer than this (the agent was stopped) ends every span
  // instead of stretching it over time nobody saw.
  Tracker(gpu::ActivityThresholds thresholds, long long gap_ms);

  // A sample of every GPU taken at `ts_ms`. When `snapshot` lists processes (`with_processes`),
  // they replace what the tracker knew; otherwise the last known processes stand.
  // `leased`: the UUIDs of GPUs tarmac's scheduler has given out (a GPU of them with no process is
  // reserved-idle rather than idle). `jobs`, when read for this sample, replaces the Slurm jobs and
  // pods the tracker knew (else the last known stand): each Slurm job's hold on each GPU is a span
  // in the store, and a GPU a job or a pod holds is given out as a leased one is.
  void observe(const gpu::Snapshot& snapshot, long long ts_ms, bool with_processes, store::Recorder& recorder,
               const std::set<std::string>& leased = {}, const JobView* jobs = nullptr);

  // The Slurm jobs and pods as last read.
  [[nodiscard]] const JobView& jobs() const { return jobs_; }

  // The current class of each GPU seen, by index.
  [[nodiscard]] std::map<unsigned, gpu::Activity> classes() const;
  // Since when each GPU has been in its class, and its processes at 0 %, by index.
  [[nodiscard]] std::map<unsigned, gpu::ActivitySince> since() const;

 private:
  struct GpuState {
    std::vector<gpu::GpuProcess> processes;
    std::optional<long long> held_since_ms;  // processes at 0 % since
    std::optional<store::ActivitySpan> span;
    std::map<unsigned, store::MigSpan> mig_spans;  // each MIG device's open class span, by GPU instance id
    std::uint64_t harmful_events = 0;
    long long last_ms = 0;
    std::map<unsigned, store::ProcessSpan> open;  // by pid
    std::map<unsigned, store::ProcessSample> written;  // the last process sample recorded, by pid
    // The time of the last process sample whose listing was read in full, with no gap since: a
    // process started a second before it, and not listed by it, had its pid then (listed_after_start).
    std::optional<long long> listed_ms;
  };

  void observe_processes(const gpu::Device& device, GpuState& state, long long ts_ms, store::Recorder& recorder);
  void observe_jobs(long long ts_ms, bool gap, store::Recorder& recorder);
  void observe_mig(const gpu::Device& view, GpuState& state, long long ts_ms, store::Recorder& recorder,
                   const std::set<std::string>& leased);

  gpu::ActivityThresholds thresholds_;
  long long gap_ms_;
  std::map<unsigned, GpuState> gpus_;
  JobView jobs_;  // the last read
  long long jobs_last_ms_ = 0;
  std::map<std::pair<std::string, unsigned>, store::JobSpan> open_jobs_;  // by (job, GPU)
};

// "python train.py" for a process's span and events: the command line, else the name.
[[nodiscard]] std::string process_command(const gpu::GpuProcess& process);

}  // namespace tarmac::agent
