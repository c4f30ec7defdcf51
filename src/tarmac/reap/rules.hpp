// The reaper's rules (PRODUCT.md §7 "Reaper", docs/reap.md): what may never be ended, and the limits
// every pass keeps. The defaults are the documented ones; `[reaper]` in the configuration changes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/host/process_info.hpp"

namespace tarmac::reap {

struct ReaperConfig {
  long long idle_for_ms = 10 * 60 * 1000;     // --idle-for: at 0 % for at least this long
  std::uint64_t min_memory_bytes = 0;          // --min-memory: holding at least this much
  long long grace_ms = 30 * 1000;              // --grace: SIGTERM to SIGKILL
  long long min_age_ms = 10 * 60 * 1000;       // a process younger than this is never a candidate
  unsigned max_kills = 8;                      // at most this many holders ended a pass; 0: none
  long long window_cap_ms = 5 * 60 * 1000;     // the longest watch without an agent's store
  long long free_wait_ms = 15 * 1000;          // how long to wait for the driver to free the memory
  std::string kill_switch = "/etc/tarmac/reap.disabled";  // while this exists, nothing is killed
  std::vector<std::string> allow_users;        // never reaped: these users' processes
  std::vector<std::string> allow_commands;     // ... processes whose name or argv[0] matches a glob
  std::vector<std::string> allow_containers;   // ... processes in these containers (id prefix, or pod uid)
  // The agent's policy (docs/reap.md "As a service"): it surveys every `interval_ms`, warns each
  // holder at `warn_after_ms` idle (always, as a dry run) and ends it at idle_for_ms when `enabled`.
  bool enabled = false;                        // reaper.enabled: the agent ends candidates
  long long warn_after_ms = 5 * 60 * 1000;     // reaper.warn_after: the owner is warned (< idle_for)
  bool notify_tty = false;                     // reaper.notify_tty: ... on their terminal too
  long long interval_ms = 60 * 1000;           // reaper.interval: the time between the agent's passes
};

// Why a process is protected by a rule, or nullopt when no rule protects it: the built-in
// allow-list (the driver's daemons, MPS, DCGM, display servers, nvidia-smi, tarmac itself), then
// the configured users, commands and containers, then facts that could not be read in time
// (ProcessInfo::unread: its command line or environment is unknown, so no rule is ruled out).
[[nodiscard]] std::optional<std::string> protected_by(const host::ProcessInfo& process, const ReaperConfig& config);

// The built-in allow-list, as globs over the process name and argv[0]'s base name (docs/reap.md).
[[nodiscard]] const std::vector<std::string_view>& builtin_allowed_commands();

// "a,b, c" as {"a","b","c"} (empty entries dropped); the configuration's list values.
[[nodiscard]] std::vector<std::string> parse_list(std::string_view text);
[[nodiscard]] std::string list_text(const std::vector<std::string>& items);

}  // namespace tarmac::reap
