// The moment the agent's clock tests start from: a Monday morning, so that schedules by weekday
// and hour have a known first answer.
#pragma once

namespace tarmac::agent {

inline constexpr long long kEpochMs = 1736154000000;  // Monday 2025-01-06 09:00:00 UTC

}  // namespace tarmac::agent
