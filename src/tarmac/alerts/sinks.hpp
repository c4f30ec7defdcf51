// Where alerts go besides the log (docs/alerts.md): a webhook (HTTP POST of JSON with a
// Slack-compatible "text") and a command (exec'd directly, never through a shell).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tarmac/alerts/rules.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::alerts {

// Whether `text` is a webhook tarmac posts to: http:// or https:// (net::check_url); the error
// names what is wrong.
[[nodiscard]] Result<void> check_webhook_url(std::string_view text);

// "https://hooks.slack.com/…": the scheme and host of a webhook URL, for logs. A webhook's path
// is often its secret (Slack, Teams, Discord), so it never reaches the log.
[[nodiscard]] std::string webhook_origin(std::string_view url);

// An alert as JSON: rule, severity, key, gpu, uuid, gpus, pid, user, command, job, since_ms, summary.
[[nodiscard]] nlohmann::json alert_json(const Alert& alert);

// The webhook body: {"text": notice.text() escaped for Slack, "status": "firing"|"resolved", "alert": alert_json}.
[[nodiscard]] std::string notice_body(const Notice& notice);

// The body of `tarmac alerts --send-test`: {"text": "TEST ...", "status": "test", "ts_ms", "alert": null},
// so a receiver can tell a test from an alert.
[[nodiscard]] std::string test_body(std::string_view host, long long ts_ms);

// POSTs `body` as application/json (net/http_client.hpp: http or https, the certificate verified
// against `ca_file` when given, else the system's store); fails on a connection or TLS error, a
// timeout (`timeout_ms` for all of it) or a status other than 2xx.
[[nodiscard]] Result<void> post_json(const std::string& url, const std::string& body, int timeout_ms = 5000,
                                     const std::string& ca_file = {});

// The command line of alerts.command split on whitespace (no quoting: no shell is involved).
[[nodiscard]] std::vector<std::string> command_argv(std::string_view command);

// The TARMAC_ALERT_* variables a command sink gets for `notice` (docs/alerts.md).
[[nodiscard]] std::vector<std::pair<std::string, std::string>> notice_env(const Notice& notice);

// Runs argv (found on PATH, exec'd directly) with `input` on its stdin and `env` added to the
// environment, its stdout on `stdout_fd`; kills it after `timeout_ms`. Fails when it cannot start,
// exits non-zero or times out.
[[nodiscard]] Result<void> run_command(const std::vector<std::string>& argv, const std::string& input,
                                       const std::vector<std::pair<std::string, std::string>>& env,
                                       int timeout_ms = 10000, int stdout_fd = 1);

}  // namespace tarmac::alerts
