#include "tarmac/alerts/alerter.hpp"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>

namespace tarmac::alerts {

namespace {
constexpr std::size_t kMaxQueued = 1000;  // a sink down for long must not grow memory without bound
// On stop, what is queued gets this long in all (systemd waits 90 s for a stop; a dead webhook
// must not use them up, nor hold the store's lock).
constexpr auto kStopBudget = std::chrono::seconds(5);
constexpr int kSendTimeoutMs = 5000;
constexpr int kCommandTimeoutMs = 10000;
}  // namespace

Alerter::Alerter(AlertConfig config, gpu::ActivityThresholds activity, util::LogSink log)
    : log_(std::move(log)), evaluator_(config, activity) {
  if (!config.webhook.empty()) {
    auto checked = check_webhook_url(config.webhook);
    if (checked.ok()) {
      webhook_ = config.webhook;
      webhook_ca_ = config.webhook_ca;
    } else if (log_) {
      log_(util::LogLevel::Error, fmt::format("alerts.webhook: {} (no webhook)", checked.error().message));
    }
  }
  command_ = command_argv(config.command);
  if (webhook_ || !command_.empty()) sender_ = std::thread([this] { send_loop(); });
}

Alerter::~Alerter() {
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
    stop_deadline_ = std::chrono::steady_clock::now() + kStopBudget;
  }
  queue_cv_.notify_all();
  if (sender_.joinable()) sender_.join();
}

void Alerter::observe(const gpu::Snapshot& merged, const std::map<unsigned, gpu::Activity>& classes, long long ts_ms) {
  std::vector<Notice> notices;
  {
    std::lock_guard lock(evaluate_mutex_);
    notices = evaluator_.observe(merged, classes, ts_ms);
    // Refreshed after every sample, not only on a change: the summaries carry durations.
    std::lock_guard firing_lock(firing_mutex_);
    firing_ = evaluator_.firing();
  }
  for (const auto& n : notices) {
    if (log_) {
      log_(n.kind == Notice::Kind::Firing && n.alert.severity != Severity::Info ? util::LogLevel::Warning
                                                                                 : util::LogLevel::Info,
           "alert " + n.text());
    }
  }
  if (!sender_.joinable()) return;
  {
    std::lock_guard lock(queue_mutex_);
    for (auto& n : notices) {
      if (queue_.size() >= kMaxQueued) queue_.pop_front();
      queue_.push_back(std::move(n));
    }
  }
  queue_cv_.notify_one();
}

void Alerter::announce(Notice notice) {
  if (log_) log_(util::LogLevel::Warning, "alert " + notice.text());
  if (!sender_.joinable()) return;
  {
    std::lock_guard lock(queue_mutex_);
    if (queue_.size() >= kMaxQueued) queue_.pop_front();
    queue_.push_back(std::move(notice));
  }
  queue_cv_.notify_one();
}

std::vector<Alert> Alerter::firing() const {
  std::lock_guard lock(firing_mutex_);
  return firing_;
}

void Alerter::send_loop() {
  for (;;) {
    Notice next;
    {
      std::unique_lock lock(queue_mutex_);
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything sent
      if (stopping_ && std::chrono::steady_clock::now() >= stop_deadline_) {
        if (log_) {
          log_(util::LogLevel::Warning,
               fmt::format("stopping: {} alert notices not sent (the sinks took too long)", queue_.size()));
        }
        return;
      }
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    deliver(next);
  }
}

int Alerter::budget_ms(int wanted) const {
  std::lock_guard lock(queue_mutex_);
  if (!stopping_) return wanted;
  // Rounded up: a send cut at its budget ends at or after the deadline, so send_loop reports the
  // rest of the queue as not sent instead of trying each for the 1 ms left by rounding down.
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(stop_deadline_ - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<long long>(left.count(), 1, wanted));
}

void Alerter::deliver(const Notice& notice) {
  if (webhook_) {
    auto sent = post_json(*webhook_, notice_body(notice), budget_ms(kSendTimeoutMs), webhook_ca_);
    if (!sent.ok() && !webhook_failing_ && log_) {
      log_(util::LogLevel::Warning,
           fmt::format("alert webhook {}: {} (logged once until it works again)", webhook_origin(*webhook_),
                       sent.error().message));
    } else if (sent.ok() && webhook_failing_ && log_) {
      log_(util::LogLevel::Info, "alert webhook works again");
    }
    webhook_failing_ = !sent.ok();
  }
  if (!command_.empty()) {
    auto ran = run_command(command_, notice_body(notice) + "\n", notice_env(notice), budget_ms(kCommandTimeoutMs));
    if (!ran.ok() && !command_failing_ && log_) {
      log_(util::LogLevel::Warning,
           fmt::format("alert command: {} (logged once until it works again)", ran.error().message));
    }
    command_failing_ = !ran.ok();
  }
}

}  // namespace tarmac::alerts
