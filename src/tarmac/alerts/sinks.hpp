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

struct WebhookUrl {
  std::string host;
  unsigned port = 80;
  std::string path = "/";  // with its query, as sent in the request line
};

// "http://host[:port]/path" (IPv6 hosts in brackets); https:// fails saying to use a local relay
// (tarmac speaks plain HTTP only), anything else fails naming the text.
[[nodiscard]] Result<WebhookUrl> parse_webhook_url(std::string_view text);

// An alert as JSON: rule, severity, key, gpu, uuid, gpus, pid, user, command, job, since_ms, summary.
[[nodiscard]] nlohmann::json alert_json(const Alert& alert);

// The webhook body: {"text": notice.text() escaped for Slack, "status": "firing"|"resolved", "alert": alert_json}.
[[nodiscard]] std::string notice_body(const Notice& notice);

// POSTs `body` as application/json over plain HTTP/1.1; fails on a connection error, a timeout
// (`timeout_ms` for all of it: connecting, sending and the answer) or a status other than 2xx.
[[nodiscard]] Result<void> post_json(const WebhookUrl& url, const std::string& body, int timeout_ms = 5000);

// The command line of alerts.command split on whitespace (no quoting: no shell is involved).
[[nodiscard]] std::vector<std::string> command_argv(std::string_view command);

// The TARMAC_ALERT_* variables a command sink gets for `notice` (docs/alerts.md).
[[nodiscard]] std::vector<std::pair<std::string, std::string>> notice_env(const Notice& notice);

// Runs argv (found on PATH, exec'd directly) with `input` on its stdin and `env` added to the
// environment; kills it after `timeout_ms`. Fails when it cannot start, exits non-zero or times out.
[[nodiscard]] Result<void> run_command(const std::vector<std::string>& argv, const std::string& input,
                                       const std::vector<std::pair<std::string, std::string>>& env,
                                       int timeout_ms = 10000);

}  // namespace tarmac::alerts
