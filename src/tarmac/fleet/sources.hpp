// Where `tarmac fleet` reads the fleet (docs/fleet.md): a Prometheus' HTTP API (instant queries,
// asked side by side), or each agent's JSON API (side by side, one thread per agent).
#pragma once

#include <string>
#include <vector>

#include "tarmac/fleet/fleet.hpp"
#include "tarmac/fleet/fleet_report.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::fleet {

// The fleet as the Prometheus at `url` (http:// or https://, its root) has it now. Fails when
// Prometheus does not answer, or answers something else than its query API does.
[[nodiscard]] Result<Fleet> read_prometheus(const std::string& url, long long timeout_ms);

// The grounded-fleet report from `since_ms` to `until_ms` (whole seconds) as the Prometheus at
// `url` has recorded it with tarmac's recording rules (fleet_report.hpp).
[[nodiscard]] Result<FleetReport> read_prometheus_report(const std::string& url, long long since_ms, long long until_ms,
                                                         std::optional<double> price_per_gpu_hour, long long timeout_ms);

// The fleet from the agents at `addresses` ("host:port", or a URL); an agent that does not answer
// is a problem of the result, not a failure. Fails only when none answers.
[[nodiscard]] Result<Fleet> read_agents(const std::vector<std::string>& addresses, long long timeout_ms);

// "%"-encoding of a query parameter's value (RFC 3986's unreserved characters kept).
[[nodiscard]] std::string query_encode(std::string_view value);

}  // namespace tarmac::fleet
