#include "tarmac/cli/store_access.hpp"

#include <CLI/CLI.hpp>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <limits>

#include "tarmac/store/recorder.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

std::string store_path(const config::Config& config, const std::string& db_flag) {
  if (!db_flag.empty()) return db_flag;
  const std::string path = store::database_path(config::state_dir(config));
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && config.agent.state_dir.empty()) {
    const std::string system = store::database_path("/var/lib/tarmac");
    // One that exists but is not the caller's to read is named, so that the error says so.
    if (std::filesystem::exists(system, ec) || ec == std::errc::permission_denied) return system;
  }
  return path;
}

namespace {

// Times are bounded to the years 0001 to 9999, so that "@1e300" or the year 99999999 is refused
// instead of overflowing a long long of milliseconds (undefined), and so is any range built on them.
constexpr long long kFirstTimeS = -62135596800LL;  // 0001-01-01 00:00:00 UTC
constexpr long long kLastTimeS = 253402300799LL;   // 9999-12-31 23:59:59 UTC

std::optional<long long> bounded_ms(double seconds) {
  if (!(seconds >= static_cast<double>(kFirstTimeS) && seconds <= static_cast<double>(kLastTimeS))) return std::nullopt;
  return static_cast<long long>(seconds * 1000);
}

}  // namespace

std::optional<long long> parse_time_ms(const std::string& text) {
  if (text.starts_with("@")) {
    auto s = util::parse_double(std::string_view(text).substr(1));
    if (!s) return std::nullopt;
    return bounded_ms(*s);
  }
  std::tm tm{};
  for (const char* pattern : {"%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%MZ",
                              "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"}) {
    tm = std::tm{};
    const char* end = strptime(text.c_str(), pattern, &tm);
    if (end != nullptr && *end == '\0') return bounded_ms(static_cast<double>(timegm(&tm)));
  }
  return std::nullopt;
}

Result<store::TimeRange> resolve_range(store::Reader& reader, const RangeFlags& flags, long long default_since_ms) {
  TARMAC_TRY_ASSIGN(const auto recorded, reader.recorded());
  return resolve_range(recorded, flags, default_since_ms);
}

Result<store::TimeRange> resolve_range(const std::optional<store::TimeRange>& recorded, const RangeFlags& flags,
                                       long long default_since_ms) {
  store::TimeRange range;
  if (!flags.until.empty()) {
    auto t = parse_time_ms(flags.until);
    if (!t) {
      return make_error(Error::Code::Invalid,
                        fmt::format("--until {}: expected a time like 2025-01-06, \"2025-01-06 09:00\" (UTC) or "
                                    "@EPOCH_SECONDS",
                                    flags.until));
    }
    range.until_ms = *t;
  } else {
    // An empty store: a range ending now, which reads nothing.
    range.until_ms = recorded ? recorded->until_ms + 1 : static_cast<long long>(std::time(nullptr)) * 1000;
  }
  if (flags.since.empty()) {
    range.since_ms = range.until_ms - default_since_ms;
  } else if (auto back = util::parse_duration_ms(flags.since)) {
    range.since_ms = range.until_ms - *back;
  }
  if (flags.since.empty() || util::parse_duration_ms(flags.since)) {
    // "The last 7 days" of a store that holds 2 days is those 2 days, not 5 empty ones.
    if (recorded && recorded->since_ms > range.since_ms && recorded->since_ms < range.until_ms) {
      range.since_ms = recorded->since_ms;
    }
  } else if (auto t = parse_time_ms(flags.since)) {
    range.since_ms = *t;
  } else {
    return make_error(Error::Code::Invalid,
                      fmt::format("--since {}: expected a duration back from the end (7d, 12h) or a time "
                                  "(2025-01-06, \"2025-01-06 09:00\" UTC, @EPOCH_SECONDS)",
                                  flags.since));
  }
  if (range.since_ms >= range.until_ms) {
    return make_error(Error::Code::Invalid, "--since must be before --until");
  }
  return range;
}

Result<std::vector<unsigned>> parse_gpu_list(const std::string& text) {
  std::vector<unsigned> out;
  for (const auto& part : util::split(text, ',')) {
    if (util::trim(part).empty()) continue;
    // Bounded to what an index can hold: 4294967296 is no GPU, not GPU 0.
    auto n = util::parse_int(util::trim(part), 0, std::numeric_limits<unsigned>::max());
    if (!n) return make_error(Error::Code::Invalid, fmt::format("-i {}: expected GPU indices like 0,2", text));
    out.push_back(static_cast<unsigned>(*n));
  }
  return out;
}

Result<store::Reader> open_store(const config::Config& config, const RangeFlags& flags) {
  return store::Reader::open(store_path(config, flags.db));
}

void add_range_flags(CLI::App& cmd, RangeFlags& flags, const std::string& default_since) {
  cmd.add_option("--db", flags.db, "The store to read (default: the agent's, docs/recorder.md)");
  cmd.add_option("--since", flags.since,
                 fmt::format("Start: a duration back from the end (default {}) or a time (2025-01-06 09:00, UTC)",
                             default_since));
  cmd.add_option("--until", flags.until, "End: a time (default: the end of the recording; now for a Prometheus')");
}

}  // namespace tarmac::cli
