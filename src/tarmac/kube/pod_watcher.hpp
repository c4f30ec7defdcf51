// The agent's view of the kubelet's GPU allocations: a thread asks the PodResourcesLister every
// interval and keeps the last answer, so a slow or absent kubelet never delays a sample. The
// sampling thread takes the latest answer and resolves it against its own snapshot's GPUs.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tarmac/host/pod_map.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::kube {

struct PodWatcherOptions {
  std::string socket;             // the kubelet's pod-resources socket
  long long interval_ms = 5000;   // between two List calls
  long long timeout_ms = 2000;    // for one List call
  util::LogSink log;
  // How long the last answer stands while the kubelet does not answer: a restart's worth, not
  // forever (pods deleted meanwhile would stay reserved and keep their job spans growing).
  long long stale_after_ms = 60000;
};

class PodWatcher {
 public:
  // Starts asking at once.
  explicit PodWatcher(PodWatcherOptions options);
  ~PodWatcher();
  PodWatcher(const PodWatcher&) = delete;
  PodWatcher& operator=(const PodWatcher&) = delete;

  // The containers' devices as last listed: empty until the kubelet first answers, and while there
  // is no socket; a failed call keeps the previous answer (containers outlive a kubelet restart)
  // for stale_after_ms after the last answer, then it is dropped.
  [[nodiscard]] std::shared_ptr<const std::vector<host::PodDevices>> latest() const;

  // How many List calls have answered, and failed, since the start (for the agent's metrics and
  // for tests that wait for an answer).
  [[nodiscard]] long long answers() const;
  [[nodiscard]] long long failures() const;

 private:
  void run();
  void ask();

  PodWatcherOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::shared_ptr<const std::vector<host::PodDevices>> latest_;
  long long answers_ = 0;
  long long answered_ms_ = 0;  // monotonic time of the last answer
  long long failures_ = 0;
  // Logged once until it changes or an answer comes: "" after an answer, "absent" while there has
  // been no socket (not logged).
  std::string last_problem_ = "not asked yet";
  std::thread thread_;
};

}  // namespace tarmac::kube
