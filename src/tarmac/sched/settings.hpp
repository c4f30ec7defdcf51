// The agent scheduler's configuration, the [scheduler] section (docs/configuration.md).
#pragma once

#include <string>

namespace tarmac::sched {

struct SchedulerConfig {
  std::string socket;                                   // "" for the default path (wire.hpp)
  long long backfill_idle_ms = 10 * 60 * 1000;          // idle this long before a GPU takes backfill work
  long long fair_window_ms = 7LL * 24 * 3600 * 1000;    // the GPU-hours that fairness compares
  unsigned user_gpu_cap = 0;                            // GPUs one user may hold at once; 0: no cap
  long long lease_idle_limit_ms = 30 * 60 * 1000;       // unused this long: a lease is warned about
  long long lease_idle_grace_ms = 5 * 60 * 1000;        // then this much more: it is reclaimed
};

}  // namespace tarmac::sched
