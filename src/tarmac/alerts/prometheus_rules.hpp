// `tarmac alerts --prometheus-rules`: the same rules as a Prometheus alerting-rules file, over the
// metrics the agent serves (docs/metrics.md), for Alertmanager users (docs/alerts.md).
#pragma once

#include <string>

#include "tarmac/alerts/rules.hpp"

namespace tarmac::alerts {

// The Prometheus name of a rule's alert: "TarmacGpuStarved", "TarmacGpuHolding", ...
[[nodiscard]] const char* prometheus_alert_name(Rule rule);

// A rules file (one group, "tarmac") with one alerting rule per enabled rule, with the configured
// thresholds and `for` durations (starvation's from `activity`, as the class); `promtool check rules`
// accepts it.
[[nodiscard]] std::string prometheus_rules(const AlertConfig& config, const gpu::ActivityThresholds& activity);

}  // namespace tarmac::alerts
