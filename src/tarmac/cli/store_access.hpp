// What history, export and report share: finding the store and turning --since/--until into a
// time range over what was recorded.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <optional>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/store/reader.hpp"

namespace tarmac::cli {

struct RangeFlags {
  std::string db;     // --db FILE
  std::string since;  // --since: a duration back from the end ("7d"), or a time
  std::string until;  // --until: a time; default the end of the recording
};

// The store's path: --db, else the agent's state directory (agent.state_dir, $STATE_DIRECTORY,
// /var/lib/tarmac for root, $XDG_STATE_HOME/tarmac), falling back to /var/lib/tarmac where a user
// reads the system agent's store.
[[nodiscard]] std::string store_path(const config::Config& config, const std::string& db_flag);

// "2025-01-06", "2025-01-06 09:00", "2025-01-06T09:00:00Z" (UTC), or "@1736154000" (epoch seconds)
// as milliseconds since the epoch.
[[nodiscard]] std::optional<long long> parse_time_ms(const std::string& text);

// The range [since, until): until is --until or the end of the recording (so `--since 7d` means the
// last week recorded, also for a store recorded on a simulated clock); since is --since (a
// duration back from until, or a time), else until - default_since_ms; a range given as a duration
// starts no earlier than the recording.
[[nodiscard]] Result<store::TimeRange> resolve_range(store::Reader& reader, const RangeFlags& flags,
                                                     long long default_since_ms);
// The same for what `recorded` spans; without a recording (a Prometheus' range), until defaults to
// now and since is not clamped.
[[nodiscard]] Result<store::TimeRange> resolve_range(const std::optional<store::TimeRange>& recorded,
                                                     const RangeFlags& flags, long long default_since_ms);

// "0,2" as GPU indices (empty: every GPU); fails naming the text.
[[nodiscard]] Result<std::vector<unsigned>> parse_gpu_list(const std::string& text);

// Opens the store named by the flags and the configuration.
[[nodiscard]] Result<store::Reader> open_store(const config::Config& config, const RangeFlags& flags);

// Adds --db, --since and --until to `cmd`.
void add_range_flags(CLI::App& cmd, RangeFlags& flags, const std::string& default_since);

}  // namespace tarmac::cli
