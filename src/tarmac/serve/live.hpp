// What the agent saw last, shared with the HTTP thread: the sampling loop publishes a view after
// every sample; readers take the current view (an immutable shared_ptr) without ever blocking the
// loop for longer than a pointer swap. The view also keeps the counters that need history: seconds
// in each activity class since the agent started, and how long each GPU has been idle.
#pragma once

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/model.hpp"
#include "tarmac/host/job_map.hpp"
#include "tarmac/host/pod_map.hpp"

namespace tarmac::serve {

// The agent's own health, for tarmac_agent_* metrics.
struct AgentStats {
  long long gpu_samples = 0;
  long long nvml_errors = 0;          // snapshots that failed, and values that failed to read
  double last_sample_seconds = 0;     // real time the last snapshot took
  long long start_unix_ms = 0;        // real time
};

struct GpuCounters {
  std::array<double, gpu::kActivities.size()> class_seconds{};  // by kActivities order
  std::optional<long long> idle_since_ms;                        // idle or reserved-idle without a break
};

struct LiveView {
  long long ts_ms = 0;              // the agent's clock (the simulator's under --clock sim)
  long long published_unix_ms = 0;  // real time of publication, for sample lag
  gpu::Snapshot snapshot;           // the latest values, with the processes of the latest process read
  std::map<unsigned, gpu::Activity> classes;
  std::map<unsigned, std::vector<gpu::MigActivity>> mig_classes;  // of each MIG device, by GPU (docs/mig.md)
  std::map<unsigned, gpu::ActivitySince> since;  // since when each GPU is in its class (ts_ms's clock)
  std::map<unsigned, GpuCounters> counters;
  AgentStats stats;
  host::JobMap jobs;                // the Slurm jobs on the GPUs, as the agent read the mapping for this sample
  host::PodMap pods;                // the pods the kubelet allocated the GPUs to, as last listed
  bool pods_listed = false;         // the kubelet has answered (pods are known, if none)
};

class LiveState {
 public:
  // Called by the sampling loop after every sample.
  void publish(const gpu::Snapshot& snapshot, const std::map<unsigned, gpu::Activity>& classes, long long ts_ms,
               const AgentStats& stats, const host::JobMap& jobs = {}, const host::PodMap& pods = {},
               bool pods_listed = false, const std::map<unsigned, std::vector<gpu::MigActivity>>& mig_classes = {},
               const std::map<unsigned, gpu::ActivitySince>& since = {});
  // The latest view, or null before the first sample.
  [[nodiscard]] std::shared_ptr<const LiveView> view() const;
  // The views of the last `window_ms` of the agent's clock before the latest, oldest first, and the
  // one before the first when that does not begin the window exactly (samples come late): what
  // `tarmac doctor` diagnoses instead of sampling (docs/doctor.md "Through the agent"). The
  // last kRecentMs are kept, at most kRecentViews of them.
  [[nodiscard]] std::vector<std::shared_ptr<const LiveView>> recent(long long window_ms) const;
  static constexpr long long kRecentMs = 30'000;
  static constexpr std::size_t kRecentViews = 64;

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const LiveView> view_;
  std::deque<std::shared_ptr<const LiveView>> recent_;
};

[[nodiscard]] std::size_t activity_slot(gpu::Activity activity);

}  // namespace tarmac::serve
