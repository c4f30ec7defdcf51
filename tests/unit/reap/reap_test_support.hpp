// What several of reap's test files share (one definition each, so that a unity build compiles).
#pragma once

namespace tarmac::reap::test_support {

inline constexpr long long kMin = 60 * 1000;  // a minute, in the milliseconds the reaper counts

}  // namespace tarmac::reap::test_support
