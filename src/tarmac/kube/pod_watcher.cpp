#include "tarmac/kube/pod_watcher.hpp"

#include <chrono>
#include <fmt/format.h>

#include "tarmac/kube/kubelet_client.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::kube {

namespace {
constexpr const char* kAbsent = "absent";
}  // namespace

PodWatcher::PodWatcher(PodWatcherOptions options)
    : options_(std::move(options)), latest_(std::make_shared<const std::vector<host::PodDevices>>()) {
  thread_ = std::thread([this] { run(); });
}

PodWatcher::~PodWatcher() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<const std::vector<host::PodDevices>> PodWatcher::latest() const {
  std::lock_guard lock(mutex_);
  return latest_;
}

long long PodWatcher::answers() const {
  std::lock_guard lock(mutex_);
  return answers_;
}

long long PodWatcher::failures() const {
  std::lock_guard lock(mutex_);
  return failures_;
}

void PodWatcher::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    lock.unlock();
    ask();
    lock.lock();
    wake_.wait_for(lock, std::chrono::milliseconds(options_.interval_ms), [this] { return stop_; });
  }
}

void PodWatcher::ask() {
  auto listed = list_pod_resources(options_.socket, options_.timeout_ms);
  std::string problem;
  {
    std::lock_guard lock(mutex_);
    if (listed.ok()) {
      ++answers_;
      answered_ms_ = util::monotonic_ms();
      latest_ = std::make_shared<const std::vector<host::PodDevices>>(std::move(*listed));
    } else if (answers_ > 0 && !latest_->empty() && util::monotonic_ms() - answered_ms_ > options_.stale_after_ms) {
      ++failures_;
      latest_ = std::make_shared<const std::vector<host::PodDevices>>();
      problem = fmt::format("no answer from the kubelet for {}: the pods it last listed are dropped ({})",
                            util::format_duration_ms(options_.stale_after_ms), listed.error().message);
    } else {
      ++failures_;
      problem = listed.error().message;
      if (listed.error().code == Error::Code::NotFound) {
        // No socket before any answer is a node outside Kubernetes (or a kubelet not started yet):
        // nothing to say. After answers, the kubelet went away.
        if (answers_ == 0) {
          problem = kAbsent;
        } else if (latest_->empty()) {
          problem = fmt::format("the kubelet's socket {} is gone", options_.socket);
        } else {
          problem = fmt::format("the kubelet's socket {} is gone; the pods it last listed stand for {}",
                                options_.socket, util::format_duration_ms(options_.stale_after_ms));
        }
      }
    }
    if (problem == last_problem_) return;
    last_problem_ = problem;
  }
  if (!options_.log || problem == kAbsent) return;
  if (problem.empty()) {
    options_.log(util::LogLevel::Info, fmt::format("kubernetes: reading pod GPU allocations from {}", options_.socket));
  } else {
    options_.log(util::LogLevel::Warning, fmt::format("kubernetes: {}", problem));
  }
}

}  // namespace tarmac::kube
