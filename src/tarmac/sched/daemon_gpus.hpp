// What the scheduler knows of the GPUs (daemon_state.hpp). Private to src/tarmac/sched.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/backend.hpp"
#include "tarmac/util/log.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::sched {

// What the sampler saw on one GPU.
struct GpuUse {
  unsigned index = 0;
  std::optional<unsigned> util;
  std::vector<unsigned> pids;
  long long idle_since_ms = 0;  // when its class became idle (the scheduler's monotonic clock); 0 while it is not
  bool mig = false;  // a MIG device of GPU `index` (keyed by its MIG-UUID), not a GPU
};

// What the scheduler knows of the GPUs: its own backend (opened when first needed, the topology read
// once: links do not change while NVML is open), what the sampler saw last (observe(), from the
// sampler's thread), the GPUs given out (read by any thread), and which jobs' processes ended lately
// (NVML may list one for a moment after it is gone). Owns the backend, and the mutex that guards
// what the other threads read and write.
class GpuView {
 public:
  using OpenBackend = std::function<Result<std::unique_ptr<gpu::Backend>>()>;

  GpuView(OpenBackend open, util::LogSink log) : open_(std::move(open)), log_(std::move(log)) {}

  // Opens the backend when it is not open; false (logged) when it cannot be.
  bool ensure_backend();
  // A snapshot with processes (and the topology, read at the first one); the backend is closed,
  // to be opened again, when it fails. Call after ensure_backend().
  [[nodiscard]] Result<gpu::Snapshot> look();
  // How many GPUs there are: the sampler's count, else the backend's; 0 when neither can say.
  [[nodiscard]] unsigned known_count();

  // The sampler's latest sample (its thread): who uses which GPU, and since when (`now_ms`, the
  // scheduler's monotonic clock) each one is idle.
  void observe(const gpu::Snapshot& merged, const std::map<unsigned, gpu::Activity>& classes, long long now_ms);
  // The latest sample, by UUID.
  [[nodiscard]] std::map<std::string, GpuUse> seen() const;
  // How many GPUs the sampler saw; 0 before its first sample.
  [[nodiscard]] unsigned seen_count() const;

  // The GPUs given out now, for given_gpus() (any thread).
  void publish_given(std::set<std::string> given);
  [[nodiscard]] std::set<std::string> given() const;

  // A job's process `pid` ended at `now_ms` (monotonic): for a while, a snapshot that still lists it
  // is not believed.
  void process_ended(unsigned pid, long long now_ms) { ended_pids_[pid] = now_ms; }
  // Removes from `snapshot` the processes that ended lately and are gone.
  void drop_ended_processes(gpu::Snapshot& snapshot, long long now_ms);

 private:
  void log(util::LogLevel level, const std::string& message) const {
    if (log_) log_(level, message);
  }

  OpenBackend open_;
  util::LogSink log_;
  std::unique_ptr<gpu::Backend> backend_;
  std::optional<gpu::Topology> topology_;
  std::map<unsigned, long long> ended_pids_;  // leaders of jobs that ended lately -> when (monotonic)

  mutable std::mutex mutex_;  // guards the three below: observe() writes two, the loop the third
  std::map<std::string, GpuUse> use_;
  unsigned count_ = 0;
  std::set<std::string> given_;
};

}  // namespace tarmac::sched
