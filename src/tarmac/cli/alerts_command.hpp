// `tarmac alerts`: --check evaluates the alert rules once from the store (for cron: exit 1 while
// any fires); --prometheus-rules writes them as a Prometheus alerting-rules file (docs/alerts.md).
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <nlohmann/json.hpp>
#include <string>

#include "tarmac/alerts/check.hpp"
#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_alerts_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

// The pieces of `alerts`, declared for their unit tests.
namespace detail {

struct AlertsFlags {
  bool check = false;
  bool prometheus_rules = false;
  bool send_test = false;
  std::string db;
  std::string state_dir;
  std::string output;
  std::string record_interval;  // --record-interval: the recording rules' (default 5m)
};

// Exactly one of --check, --prometheus-rules and --send-test, with only the flags that go with it; an Invalid
// error saying which flag does not belong otherwise.
[[nodiscard]] Result<void> check_alerts_flags(const AlertsFlags& flags);

// What `alerts --check` prints for the store at `path`: as text (each firing alert's summary
// shown escaped: it quotes recorded command lines and users), or as JSON.
[[nodiscard]] std::string check_text(const alerts::CheckResult& result, const std::string& path);
[[nodiscard]] nlohmann::json check_json(const alerts::CheckResult& result, const std::string& path);

}  // namespace detail

}  // namespace tarmac::cli
