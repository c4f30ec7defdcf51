// The agent's JSON API (docs/metrics.md): /api/v1/gpus and /api/v1/processes from the live view,
// /api/v1/history from the store.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tarmac/serve/live.hpp"
#include "tarmac/serve/metrics.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::serve {

// `commands`: alerts' summaries with whole command lines, or with programs' names only.
[[nodiscard]] std::string gpus_json(const LiveView& view, const std::string& hostname,
                                    const std::vector<FiringAlert>& alerts, const std::vector<GpuBatch>& batches = {},
                                    Commands commands = Commands::Full);
[[nodiscard]] std::string processes_json(const LiveView& view, Commands commands = Commands::Full);

// /api/v1/history?gpu=0,1&since=1h&until=&step=30s over the store at `db_path`; `now_ms` is the
// agent's clock, from which relative times count back. `since`/`until` take a duration ago ("1h")
// or milliseconds since the epoch; `step` a duration (default: the range over 120 points, at least
// 1 s). Fails with Error::Code::Invalid for bad parameters (an HTTP 400), otherwise when the store
// cannot be read.
[[nodiscard]] Result<std::string> history_json(const std::string& db_path, const std::map<std::string, std::string>& query,
                                               long long now_ms);

}  // namespace tarmac::serve
