// The agent's reaper (docs/reap.md "As a service"): a thread of its own that, every
// reaper.interval, surveys the GPUs' processes with the evidence of the agent's own store (a dry
// run), warns the owner of each holder idle for reaper.warn_after (alert sinks, its terminal with
// reaper.notify_tty, a "hold" event), and, with reaper.enabled and the --kill gate open, ends the
// holders warned in an earlier pass once they are candidates (reap::kill_candidates), recording
// each action. Sampling and HTTP never wait for it: a kill can take grace + the free wait.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include "tarmac/alerts/rules.hpp"
#include "tarmac/gpu/backend.hpp"
#include "tarmac/reap/policy.hpp"
#include "tarmac/serve/metrics.hpp"
#include "tarmac/util/log.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::cli {

struct AgentReaperOptions {
  reap::ReaperConfig rules;   // [reaper]
  std::string db_path;        // the agent's store: the evidence, and where events go
  std::string lease_dir;      // the scheduler's leases: a tarmac job's processes are its own
  long long max_hold_ms = 0;  // scheduler.max_hold: what bounds a lease without an owner process
  // Opens the reaper's own backend: the sampler's is not shared across threads.
  std::function<Result<std::unique_ptr<gpu::Backend>>()> open_backend;
  std::function<void(alerts::Notice)> announce;  // to the alert sinks (from the reaper's thread)
  util::LogSink log;
};

class AgentReaper {
 public:
  // Starts the thread; its first pass runs one interval after the start (the store has a
  // sample by then).
  explicit AgentReaper(AgentReaperOptions options);
  ~AgentReaper();  // stops after the pass in progress, if any
  AgentReaper(const AgentReaper&) = delete;
  AgentReaper& operator=(const AgentReaper&) = delete;

  // What /metrics shows of the reaper now (any thread).
  [[nodiscard]] serve::ReaperMetrics metrics() const;

 private:
  void loop();
  void run_pass(gpu::Backend& backend);
  // Whether this pass may end holders; `blocked`: why not, found by the pass (the leases).
  [[nodiscard]] reap::Killing killing(const std::optional<std::string>& blocked);
  void warn(const reap::Pass& pass, const reap::Row& row, reap::Killing killing);
  void reap_rows(const reap::Pass& pass, const std::vector<std::size_t>& rows, gpu::Backend& backend);
  void publish(const reap::Plan& plan);
  void count_action(const reap::Row& row);

  AgentReaperOptions options_;
  reap::Policy policy_;
  std::string killing_off_logged_;  // the reason last logged for not killing ("" none)

  mutable std::mutex metrics_mutex_;
  serve::ReaperMetrics metrics_;
  std::map<std::tuple<unsigned, std::string, std::string>, long long> reaped_;  // (gpu, uuid, outcome)

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tarmac::cli
