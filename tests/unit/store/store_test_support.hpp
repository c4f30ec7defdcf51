// What several of the store's test files share (one definition each, so that a unity build compiles).
#pragma once

#include "tarmac/store/reader.hpp"

namespace tarmac::store::test_support {

inline constexpr long long kT0 = 1736154000000;                // Monday 2025-01-06 09:00:00 UTC
inline constexpr TimeRange kAll{0, 4'000'000'000'000};         // every time a test records

}  // namespace tarmac::store::test_support
