#include "tarmac/cli/alerts_command.hpp"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <ctime>
#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>

#include "tarmac/alerts/check.hpp"
#include "tarmac/alerts/prometheus_rules.hpp"
#include "tarmac/alerts/sinks.hpp"
#include "tarmac/cli/app.hpp"
#include "tarmac/cli/store_access.hpp"
#include "tarmac/fleet/fleet_report.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

namespace {

using detail::AlertsFlags;

constexpr int kSendTestTimeoutMs = 10'000;

std::string utc_time(long long ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

int run_check(const GlobalOptions& global, const AlertsFlags& flags) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return kExitUsage;
  config::Config config = loaded->config;
  if (!flags.state_dir.empty()) config.agent.state_dir = flags.state_dir;
  const std::string path = store_path(config, flags.db);
  auto reader = store::Reader::open(path);
  if (!reader.ok()) {
    print_error(reader.error());
    return kExitCouldNotLook;
  }
  auto result = alerts::check(*reader, config.alerts, config.activity);
  if (!result.ok()) {
    print_error(result.error());
    return kExitCouldNotLook;
  }
  if (global.json) {
    fmt::print("{}\n", util::json_text(detail::check_json(*result, path), 2));
  } else {
    fmt::print("{}", detail::check_text(*result, path));
  }
  return result->firing.empty() ? kExitOk : kExitProblems;
}

int run_prometheus_rules(const GlobalOptions& global, const AlertsFlags& flags) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return kExitUsage;
  const auto every = util::parse_duration_ms(flags.record_interval.empty() ? "5m" : flags.record_interval);
  if (!every || *every % 1000 != 0 || *every < fleet::kMinRecordIntervalMs || *every > fleet::kMaxRecordIntervalMs) {
    print_error(make_error(Error::Code::Invalid,
                           fmt::format("--record-interval {}: expected whole seconds from 2s to 1h, at least twice "
                                       "Prometheus' scrape interval",
                                       util::terminal_text(flags.record_interval))));
    return kExitUsage;
  }
  const std::string text = alerts::prometheus_rules(loaded->config.alerts, loaded->config.activity) +
                           fleet::recording_rules_group(*every);
  if (flags.output.empty() || flags.output == "-") {
    fmt::print("{}", text);
    return kExitOk;
  }
  if (!util::write_file_atomically(flags.output, text)) {
    print_error(make_error(Error::Code::Io, fmt::format("cannot write {}", flags.output)));
    return kExitCouldNotLook;
  }
  fmt::print(stderr, "wrote {}\n", flags.output);
  return kExitOk;
}

// Sends a test notice through each configured sink now, and says what each did: a webhook or a
// command is best tried before the alert that needs it.
int run_send_test(const GlobalOptions& global) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return kExitUsage;
  const auto& config = loaded->config.alerts;
  if (config.webhook.empty() && config.command.empty()) {
    print_error(make_error(Error::Code::Invalid, "alerts --send-test: neither alerts.webhook nor alerts.command is "
                                                 "configured (docs/alerts.md)"));
    return kExitUsage;
  }
  const std::string body = alerts::test_body(util::host_name(), util::wall_ms());
  nlohmann::json report = nlohmann::json::object();
  bool all_ok = true;
  const auto note = [&](const char* sink, const std::string& target, const Result<void>& sent) {
    all_ok = all_ok && sent.ok();
    report[sink] = {{"target", target}, {"ok", sent.ok()}, {"error", sent.ok() ? nlohmann::json(nullptr) : nlohmann::json(sent.error().message)}};
    if (!global.json) {
      fmt::print("{} {}: {}\n", sink, util::terminal_text(target),
                 sent.ok() ? std::string("delivered") : "FAILED: " + util::terminal_text(sent.error().message));
    }
  };
  if (!config.webhook.empty()) {
    Result<void> sent = alerts::check_webhook_url(config.webhook);
    if (sent.ok()) sent = alerts::post_json(config.webhook, body, kSendTestTimeoutMs, config.webhook_ca);
    note("webhook", alerts::webhook_origin(config.webhook), sent);
  }
  if (!config.command.empty()) {
    const auto argv = alerts::command_argv(config.command);
    note("command", config.command,
         // Its output goes to stderr: stdout is this command's report (JSON with --json).
         alerts::run_command(argv, body + "\n", {{"TARMAC_ALERT_STATUS", "test"}}, kSendTestTimeoutMs, STDERR_FILENO));
  }
  if (global.json) fmt::print("{}\n", util::json_text(report, 2));
  return all_ok ? kExitOk : kExitProblems;
}

int run_alerts(const GlobalOptions& global, const AlertsFlags& flags) {
  if (auto checked = detail::check_alerts_flags(flags); !checked.ok()) {
    print_error(checked.error());
    return kExitUsage;
  }
  if (flags.send_test) return run_send_test(global);
  return flags.check ? run_check(global, flags) : run_prometheus_rules(global, flags);
}

}  // namespace

namespace detail {

Result<void> check_alerts_flags(const AlertsFlags& flags) {
  const int modes = (flags.check ? 1 : 0) + (flags.prometheus_rules ? 1 : 0) + (flags.send_test ? 1 : 0);
  if (modes != 1) {
    return make_error(Error::Code::Invalid,
                      modes > 1 ? "alerts: give one of --check, --prometheus-rules and --send-test"
                                : "alerts: give --check (evaluate the rules from the store), --prometheus-rules "
                                  "(write them for Prometheus) or --send-test (try the webhook and command); see "
                                  "tarmac alerts --help");
  }
  if (flags.send_test && (!flags.output.empty() || !flags.db.empty() || !flags.state_dir.empty())) {
    return make_error(Error::Code::Invalid, "alerts: --send-test takes no other flag");
  }
  if (flags.check && !flags.output.empty()) {
    return make_error(Error::Code::Invalid, "alerts: -o goes with --prometheus-rules");
  }
  if (!flags.prometheus_rules && !flags.record_interval.empty()) {
    return make_error(Error::Code::Invalid, "alerts: --record-interval goes with --prometheus-rules");
  }
  if (flags.prometheus_rules && (!flags.db.empty() || !flags.state_dir.empty())) {
    return make_error(Error::Code::Invalid, "alerts: --db and --state-dir go with --check");
  }
  return {};
}

nlohmann::json check_json(const alerts::CheckResult& result, const std::string& path) {
  nlohmann::json j;
  j["db"] = path;
  j["as_of_ms"] = result.as_of_ms == 0 ? nlohmann::json(nullptr) : nlohmann::json(result.as_of_ms);
  j["since_ms"] = result.range.since_ms;
  j["samples"] = result.samples;
  j["firing"] = nlohmann::json::array();
  for (const auto& a : result.firing) j["firing"].push_back(alerts::alert_json(a));
  return j;
}

std::string check_text(const alerts::CheckResult& result, const std::string& path) {
  // A summary quotes the recorded process's command line and user: anybody's bytes.
  const std::string where = util::terminal_text(path);
  if (result.as_of_ms == 0) return fmt::format("no samples recorded in {}: nothing to check\n", where);
  if (result.firing.empty()) return fmt::format("no alerts firing (as of {}, {})\n", utc_time(result.as_of_ms), where);
  std::string out = fmt::format("{} alert{} firing (as of {}, {}):\n", result.firing.size(),
                                result.firing.size() == 1 ? "" : "s", utc_time(result.as_of_ms), where);
  for (const auto& a : result.firing) {
    out += fmt::format("  [{}] {}: {}\n", alerts::to_string(a.severity), alerts::to_string(a.rule),
                       util::terminal_text(a.summary));
  }
  return out;
}

}  // namespace detail

void add_alerts_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand("alerts", "Alert rules ([alerts] in the configuration, docs/alerts.md): --check "
                                           "evaluates them once from the store (exit 1 while any fires), "
                                           "--prometheus-rules writes them for Prometheus, --send-test tries the sinks");
  auto flags = std::make_shared<AlertsFlags>();
  cmd->add_flag("--check", flags->check,
                "Replay the store's recent samples through the rules and list what fires at the end "
                "(exit 0: none, 1: some fire, 3: the store cannot be read); for cron");
  cmd->add_flag("--prometheus-rules", flags->prometheus_rules,
                "Write the rules as a Prometheus rules file over the agent's /metrics: the alerting rules, and the "
                "recording rules `tarmac report --prometheus` reads (docs/fleet.md)");
  cmd->add_flag("--send-test", flags->send_test,
                "Send a test notice (status \"test\") through alerts.webhook and alerts.command now and say what each "
                "did (exit 0: delivered, 1: a sink failed)");
  auto* db = cmd->add_option("--db", flags->db, "With --check: the store to read (default: the agent's, docs/recorder.md)");
  cmd->add_option("--state-dir", flags->state_dir, "With --check: the agent's state directory holding tarmac.db")
      ->excludes(db);
  cmd->add_option("-o,--output", flags->output,
                  "With --prometheus-rules: write to FILE (atomically) instead of standard output");
  cmd->add_option("--record-interval", flags->record_interval,
                  "With --prometheus-rules: how often Prometheus evaluates the recording rules (default 5m; whole "
                  "seconds from 2s to 1h, at least twice the scrape interval, four times is safer)");
  cmd->callback([&global, &exit_code, flags] { exit_code = run_alerts(global, *flags); });
}

}  // namespace tarmac::cli
