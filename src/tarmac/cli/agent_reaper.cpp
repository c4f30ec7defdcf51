#include "tarmac/cli/agent_reaper.hpp"

#include <fmt/format.h>

#include <chrono>

#include "tarmac/cli/reap_command.hpp"
#include "tarmac/host/proc_reader.hpp"
#include "tarmac/reap/test_device.hpp"
#include "tarmac/reap/tty_notice.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::cli {
namespace {

alerts::Notice reaper_notice(const reap::Row& row, alerts::Notice::Kind kind, long long ts_ms, std::string summary) {
  const auto& e = row.evidence;
  alerts::Notice notice;
  notice.kind = kind;
  notice.ts_ms = ts_ms;
  notice.alert.rule = alerts::Rule::Reaper;
  notice.alert.severity = alerts::severity_of(alerts::Rule::Reaper);
  notice.alert.key = fmt::format("pid:{}:gpu:{}", e.process.pid, e.gpu);
  notice.alert.gpu = e.gpu;
  notice.alert.uuid = e.gpu_uuid.value_or("");
  notice.alert.gpus = {e.gpu};
  notice.alert.pid = e.process.pid;
  notice.alert.user = e.process.host.user.value_or("");
  notice.alert.command = e.process.host.command_line.value_or(e.process.host.name.value_or(""));
  notice.alert.since_ms = ts_ms - e.history.idle_ms();
  notice.alert.summary = std::move(summary);
  return notice;
}

// The "hold" events of the holders warned about: the report's "zombies found" (docs/reap.md).
Result<void> record_holds(const std::string& path, const reap::Pass& pass, const std::vector<std::size_t>& rows) {
  if (rows.empty()) return {};
  store::RecorderOptions options;
  options.path = path;
  store::Recorder recorder(options);
  for (const auto i : rows) {
    const auto& row = pass.rows[i];
    recorder.add(store::Event{pass.time_unix_ms, row.evidence.gpu, "hold", util::json_text(reap::hold_detail(row))});
  }
  const auto status = recorder.flush();
  if (!status.ok) return make_error(Error::Code::Io, status.message);
  return {};
}

}  // namespace

AgentReaper::AgentReaper(AgentReaperOptions options) : options_(std::move(options)), policy_(options_.rules) {
  thread_ = std::thread([this] { loop(); });
}

AgentReaper::~AgentReaper() {
  {
    std::lock_guard lock(stop_mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

serve::ReaperMetrics AgentReaper::metrics() const {
  std::lock_guard lock(metrics_mutex_);
  return metrics_;
}

void AgentReaper::loop() {
  auto backend = options_.open_backend();
  if (!backend.ok()) {
    options_.log(util::LogLevel::Warning, "reaper off: cannot open the GPUs: " + backend.error().message);
    return;
  }
  const auto interval = std::chrono::milliseconds(options_.rules.interval_ms);
  std::unique_lock lock(stop_mutex_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    run_pass(**backend);
    lock.lock();
  }
}

reap::Killing AgentReaper::killing(const std::optional<std::string>& blocked) {
  std::string why;
  if (!options_.rules.enabled) {
    why = "reaper.enabled is false";
  } else if (host::ProcReader().in_host_pid_namespace() != true) {
    why = "the agent runs outside the host's PID namespace, where the driver's pids are not the processes it sees";
  } else if (blocked) {
    why = *blocked;
  }
  // Logged once per reason: the agent warns, and says why it will not end anything.
  if (!why.empty() && why != killing_off_logged_ && options_.rules.enabled) {
    options_.log(util::LogLevel::Warning, "reaper: warning only: " + why);
  }
  killing_off_logged_ = why;
  return why.empty() ? reap::Killing::On : reap::Killing::Off;
}

void AgentReaper::run_pass(gpu::Backend& backend) {
  const host::ProcReader proc("/proc", reap::test_device_path());
  const util::SystemClock clock;
  reap::GatherOptions gather;
  gather.store_path = options_.db_path;
  gather.idle_for_ms = options_.rules.idle_for_ms;
  gather.window_ms = 0;  // one snapshot when the store does not say: the thread never watches
  auto device_file = reap::test_device_file();
  if (!device_file.ok()) {
    options_.log(util::LogLevel::Warning, "reaper: pass skipped: " + device_file.error().message);
    return;
  }
  gather.device_file_override = *device_file;
  auto leases = detail::job_leases(options_.lease_dir, options_.max_hold_ms);
  if (leases.ok()) {
    gather.leases = std::move(*leases);
  } else {
    // Without the leases a tarmac job's process cannot be told apart: survey, end nothing.
    options_.log(util::LogLevel::Warning, "reaper: cannot read the scheduler's leases: " + leases.error().message);
  }
  // The agent's decisions are for killing: as root, evidence only a snapshot saw (its store
  // unreadable) ends nothing and warns no one (reap/decide.cpp).
  reap::Caller caller = reap::caller_of(proc);
  caller.intent = reap::Intent::Kill;
  auto pass = reap::survey(backend, proc, gather, options_.rules, caller, clock);
  if (!pass.ok()) {
    options_.log(util::LogLevel::Warning, "reaper: pass skipped: " + pass.error().message);
    return;
  }
  // As `reap --kill`: without the leases a tarmac job's processes cannot be told apart.
  auto blocked = detail::missing_lock_dir_refusal(options_.lease_dir, true);
  if (!leases.ok()) blocked = "the scheduler's leases cannot be read";
  const auto kills = killing(blocked);
  const reap::Plan plan = policy_.step(*pass, kills);
  for (const auto i : plan.warn) warn(*pass, pass->rows[i], kills);
  if (auto recorded = record_holds(options_.db_path, *pass, plan.warn); !recorded.ok()) {
    options_.log(util::LogLevel::Warning, "reaper: could not record the hold events: " + recorded.error().message);
  }
  if (!plan.reap.empty()) reap_rows(*pass, plan.reap, backend);
  publish(plan);
}

void AgentReaper::warn(const reap::Pass& pass, const reap::Row& row, reap::Killing killing) {
  const std::string text = reap::warning_text(row, options_.rules, killing);
  options_.announce(reaper_notice(row, alerts::Notice::Kind::Firing, pass.time_unix_ms, text));
  const auto& e = row.evidence;
  if (!options_.rules.notify_tty || !e.identity || !e.process.host.uid) return;
  const auto sent = reap::notify_terminal(host::ProcReader("/proc", reap::test_device_path()), *e.identity, *e.process.host.uid, text);
  if (sent.outcome == reap::TtyOutcome::Skipped || sent.outcome == reap::TtyOutcome::Failed) {
    options_.log(util::LogLevel::Warning, fmt::format("reaper: pid {}'s terminal not written ({}): {}", e.process.pid,
                                                      reap::to_string(sent.outcome), sent.why));
  }
}

void AgentReaper::reap_rows(const reap::Pass& pass, const std::vector<std::size_t>& rows, gpu::Backend& backend) {
  // kill_candidates ends every candidate of a pass: hand it only those the policy chose.
  reap::Pass chosen = pass;
  chosen.rows.clear();
  for (const auto i : rows) chosen.rows.push_back(pass.rows[i]);
  chosen.kill = true;
  const host::ProcReader proc("/proc", reap::test_device_path());
  const util::SystemClock clock;
  const reap::Caller caller = reap::caller_of(proc);
  reap::kill_candidates(chosen, caller, proc, backend, clock, [this](const reap::Row& row) {
    const std::string summary = reap::action_summary(row);
    options_.log(util::LogLevel::Info, "reaper: " + summary);
    options_.announce(reaper_notice(row, alerts::Notice::Kind::Resolved, util::wall_ms(), summary));
    count_action(row);
  });
  for (const auto& row : chosen.rows) {
    policy_.after_kill(row);  // one the kill left is asked for again next pass
    if (!row.left_because.empty()) {
      options_.log(util::LogLevel::Warning,
                   fmt::format("reaper: pid {} on GPU {} not ended: {}", row.evidence.process.pid, row.evidence.gpu,
                               row.left_because));
    }
  }
  if (auto recorded = reap::record_events(options_.db_path, chosen, caller.uid); !recorded.ok()) {
    options_.log(util::LogLevel::Warning, "reaper: could not record the events: " + recorded.error().message);
  }
}

void AgentReaper::count_action(const reap::Row& row) {
  std::lock_guard lock(metrics_mutex_);
  ++reaped_[{row.evidence.gpu, row.evidence.gpu_uuid.value_or(""), reap::to_string(row.action->outcome)}];
  metrics_.reaped.clear();
  for (const auto& [key, count] : reaped_) {
    metrics_.reaped.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), count});
  }
}

void AgentReaper::publish(const reap::Plan& plan) {
  std::lock_guard lock(metrics_mutex_);
  ++metrics_.passes;
  metrics_.holding = plan.holding;
}

}  // namespace tarmac::cli
