// /metrics in Prometheus's text format (0.0.4): dcgm-exporter's names, types, units and labels for
// every value tarmac reads, so dashboards built for dcgm-exporter work unchanged, and tarmac's own
// tarmac_* metrics. docs/metrics.md lists them all with their NVML sources.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tarmac/serve/live.hpp"

namespace tarmac::serve {

// An alert that fires now (from the alerts module, through the CLI's wiring).
struct FiringAlert {
  std::string rule;      // "holding"
  std::string severity;  // "warning"
  std::optional<unsigned> gpu;
  std::string summary;
  long long since_ms = 0;
};

// What /metrics says beyond the live view: the host, alerts, and the agent's own cost.
struct MetricsExtras {
  std::string hostname;
  std::vector<FiringAlert> alerts;
  double last_scrape_seconds = 0;  // how long the previous /metrics took to render
  long long resident_bytes = 0;
  long long http_requests = 0;
  long long http_rejected = 0;
  long long http_accept_failures = 0;
  long long now_unix_ms = 0;
};

[[nodiscard]] std::string render_metrics(const LiveView& view, const MetricsExtras& extras);

// The two parts of render_metrics: what depends only on the sample and its alerts (rendered once
// per sample and reused by every scrape until the next one), and the agent's own metrics (fresh
// at every scrape).
[[nodiscard]] std::string render_sample_metrics(const LiveView& view, const std::string& hostname,
                                                const std::vector<FiringAlert>& alerts);
[[nodiscard]] std::string render_agent_metrics(const LiveView& view, const MetricsExtras& extras);

// The metric names render_metrics can emit, for docs/metrics.md's test and the dashboards' test.
[[nodiscard]] std::vector<std::string> metric_names();

}  // namespace tarmac::serve
