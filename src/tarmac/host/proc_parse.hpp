// Pure parsers of the /proc files that ProcReader reads; no I/O here, so each is unit-tested.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tarmac::host {

// The fields tarmac needs from /proc/<pid>/stat.
struct StatFields {
  std::string comm;
  char state = '?';
  unsigned ppid = 0;
  unsigned long long starttime_ticks = 0;  // clock ticks after boot
};

// Parses /proc/<pid>/stat; comm may hold spaces and ')', so fields are read after the LAST ')'.
[[nodiscard]] std::optional<StatFields> parse_stat(std::string_view stat_text);

// /proc/<pid>/cmdline (NUL-separated argv) as one line joined with spaces; "" when empty.
[[nodiscard]] std::string join_cmdline(std::string_view raw_nul_separated);

// The value of `key` in a NUL-separated KEY=VALUE block (/proc/<pid>/environ); first match wins.
[[nodiscard]] std::optional<std::string> find_environ_value(std::string_view raw_environ, std::string_view key);

// The effective uid from the "Uid:" line of /proc/<pid>/status.
[[nodiscard]] std::optional<unsigned> parse_status_uid(std::string_view status_text);

// The boot time in seconds since the epoch from the "btime" line of /proc/stat.
[[nodiscard]] std::optional<long long> parse_boot_time(std::string_view proc_stat_text);

}  // namespace tarmac::host
