// The agent scheduler's configuration, the [scheduler] section (docs/configuration.md).
#pragma once

#include <cstdint>
#include <string>

namespace tarmac::sched {

struct SchedulerConfig {
  std::string socket;                                   // "" for the default path (wire.hpp)
  long long backfill_idle_ms = 10 * 60 * 1000;          // idle this long before a GPU takes backfill work
  long long fair_window_ms = 7LL * 24 * 3600 * 1000;    // the GPU-hours that fairness compares
  unsigned user_gpu_cap = 0;                            // GPUs one user may hold at once; 0: no cap
  long long lease_idle_limit_ms = 30 * 60 * 1000;       // unused this long: a lease is warned about
  long long lease_idle_grace_ms = 5 * 60 * 1000;        // then this much more: it is reclaimed
  // The socket's limits (docs/security.md): what one user may hold of the agent.
  long long connection_idle_timeout_ms = 30 * 1000;     // no request (or no output read) this long: closed
  unsigned user_connection_cap = 64;                    // connections of one user (not root) at once; 0: none
  unsigned user_queued_cap = 1000;                      // queued jobs of one user (not root); 0: none
  long long max_grace_ms = 5 * 60 * 1000;               // the longest --grace a job may ask for
  long long max_hold_ms = 24 * 3600 * 1000LL;           // the longest `pick --hold`; 0: no bound
  // What one user may hold through backfill batches (docs/backfill.md "Limits"; backfill/quota.hpp).
  unsigned backfill_batches_per_user = 16;              // unfinished batches of one user (not root); 0: none
  std::uint64_t backfill_store_per_user = 1ULL << 30;   // request bodies one user's unfinished batches keep
  std::uint64_t backfill_store_total = 8ULL << 30;      // everyone's together, root's too; 0: none
  std::uint64_t backfill_input_per_minute = 256ULL << 20;  // input one user (not root) hands over a minute
};

}  // namespace tarmac::sched
