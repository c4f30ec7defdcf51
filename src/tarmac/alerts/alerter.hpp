// The agent's alerting front (docs/alerts.md): evaluates the rules after every sample, logs each
// notice, and hands it to a sender thread for the webhook and the command, so that a slow or
// failing sink never delays sampling.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tarmac/alerts/rules.hpp"
#include "tarmac/alerts/sinks.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::alerts {

class Alerter {
 public:
  // `log` gets one line per notice (from the thread that calls observe) and one per sink failure
  // streak (from the sender thread), so it must be callable from two threads.
  // `activity`: the class thresholds ([activity]), which also say what starved is.
  Alerter(AlertConfig config, gpu::ActivityThresholds activity, util::LogSink log);
  ~Alerter();  // sends what is queued within 5 s in all (the rest is dropped and logged), then stops
  Alerter(const Alerter&) = delete;
  Alerter& operator=(const Alerter&) = delete;

  // Evaluates the rules on the latest merged snapshot (fast values and the latest processes of
  // every device) and its activity classes by GPU index; cheap, never blocks on a sink.
  void observe(const gpu::Snapshot& merged, const std::map<unsigned, gpu::Activity>& classes, long long ts_ms);

  // Sends a notice that did not come from the rules (the scheduler's idle leases) through the log
  // and the sinks, like the rules' own.
  void announce(Notice notice);

  // The alerts firing now (a copy).
  [[nodiscard]] std::vector<Alert> firing() const;

 private:
  void send_loop();
  void deliver(const Notice& notice);

  util::LogSink log_;
  std::optional<std::string> webhook_;  // its URL
  std::string webhook_ca_;              // alerts.webhook_ca
  std::vector<std::string> command_;

  std::mutex evaluate_mutex_;  // observe is called by one thread, but keep it safe anyway
  Evaluator evaluator_;
  mutable std::mutex firing_mutex_;
  std::vector<Alert> firing_;

  // The timeout for one send: `wanted`, or what is left of the stop budget once stopping.
  [[nodiscard]] int budget_ms(int wanted) const;

  mutable std::mutex queue_mutex_;
  std::chrono::steady_clock::time_point stop_deadline_{};
  std::condition_variable queue_cv_;
  std::deque<Notice> queue_;
  bool stopping_ = false;
  bool webhook_failing_ = false;  // sender thread only
  bool command_failing_ = false;  // sender thread only
  std::thread sender_;
};

}  // namespace tarmac::alerts
