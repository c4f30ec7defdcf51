#include "tarmac/cli/alerts_command.hpp"

#include <ctime>
#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>

#include "tarmac/alerts/check.hpp"
#include "tarmac/alerts/prometheus_rules.hpp"
#include "tarmac/alerts/sinks.hpp"
#include "tarmac/cli/app.hpp"
#include "tarmac/cli/store_access.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/fs.hpp"

namespace tarmac::cli {

namespace {

using detail::AlertsFlags;

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
  const std::string text = alerts::prometheus_rules(loaded->config.alerts, loaded->config.activity);
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

int run_alerts(const GlobalOptions& global, const AlertsFlags& flags) {
  if (auto checked = detail::check_alerts_flags(flags); !checked.ok()) {
    print_error(checked.error());
    return kExitUsage;
  }
  return flags.check ? run_check(global, flags) : run_prometheus_rules(global, flags);
}

}  // namespace

namespace detail {

Result<void> check_alerts_flags(const AlertsFlags& flags) {
  if (flags.check == flags.prometheus_rules) {
    return make_error(Error::Code::Invalid,
                      flags.check ? "alerts: give either --check or --prometheus-rules, not both"
                                  : "alerts: give --check (evaluate the rules from the store) or "
                                    "--prometheus-rules (write them for Prometheus); see tarmac alerts --help");
  }
  if (flags.check && !flags.output.empty()) {
    return make_error(Error::Code::Invalid, "alerts: -o goes with --prometheus-rules");
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
                                           "--prometheus-rules writes them for Prometheus");
  auto flags = std::make_shared<AlertsFlags>();
  cmd->add_flag("--check", flags->check,
                "Replay the store's recent samples through the rules and list what fires at the end "
                "(exit 0: none, 1: some fire, 3: the store cannot be read); for cron");
  cmd->add_flag("--prometheus-rules", flags->prometheus_rules,
                "Write the rules as a Prometheus alerting-rules file over the agent's /metrics");
  auto* db = cmd->add_option("--db", flags->db, "With --check: the store to read (default: the agent's, docs/recorder.md)");
  cmd->add_option("--state-dir", flags->state_dir, "With --check: the agent's state directory holding tarmac.db")
      ->excludes(db);
  cmd->add_option("-o,--output", flags->output,
                  "With --prometheus-rules: write to FILE (atomically) instead of standard output");
  cmd->callback([&global, &exit_code, flags] { exit_code = run_alerts(global, *flags); });
}

}  // namespace tarmac::cli
