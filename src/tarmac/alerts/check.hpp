// `tarmac alerts --check`: the rules evaluated once from the store, for cron (docs/alerts.md).
#pragma once

#include <vector>

#include "tarmac/alerts/rules.hpp"
#include "tarmac/store/reader.hpp"

namespace tarmac::alerts {

struct CheckResult {
  std::vector<Alert> firing;
  store::TimeRange range;   // what was replayed
  long long as_of_ms = 0;   // the last sample's time (0: the store holds none)
  long long samples = 0;    // GPU samples replayed
};

// Replays the store's last samples (the longest enabled `for` plus a margin) in time order through
// an Evaluator, each GPU with its recorded class and the processes recorded on it then, and
// returns what fires at the end of the recording. Thermal sees temperatures only (clock-event
// reasons are not stored); lost GPUs are recorded as class fault. `activity`: the class thresholds.
[[nodiscard]] Result<CheckResult> check(store::Reader& reader, const AlertConfig& config,
                                        const gpu::ActivityThresholds& activity);

}  // namespace tarmac::alerts
