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
  long long tty_nr = 0;                    // the controlling terminal's device number; 0 for none
  unsigned long long utime_ticks = 0;      // CPU time in user mode (field 14), clock ticks
  unsigned long long stime_ticks = 0;      // in kernel mode (field 15)
  unsigned long long rss_pages = 0;        // resident set size (field 24), pages
};

// Parses /proc/<pid>/stat; comm may hold spaces and ')', so fields are read after the LAST ')'.
[[nodiscard]] std::optional<StatFields> parse_stat(std::string_view stat_text);

// /proc/<pid>/cmdline (NUL-separated argv) as one line joined with spaces; "" when empty.
[[nodiscard]] std::string join_cmdline(std::string_view raw_nul_separated);

// The value of `key` in a NUL-separated KEY=VALUE block (/proc/<pid>/environ); first match wins.
[[nodiscard]] std::optional<std::string> find_environ_value(std::string_view raw_environ, std::string_view key);

// The effective uid from the "Uid:" line of /proc/<pid>/status.
[[nodiscard]] std::optional<unsigned> parse_status_uid(std::string_view status_text);

// "NSpid:" of /proc/self/status: how many PID namespaces see this process (1: the host's alone);
// nullopt when the line is missing (a kernel before 4.1) or unreadable.
[[nodiscard]] std::optional<unsigned> parse_nspid_depth(std::string_view status_text);

// A tty_nr of /proc/<pid>/stat as the terminal's name ("pts/3", "tty2"); nullopt for none (0).
[[nodiscard]] std::optional<std::string> tty_name(long long tty_nr);

// A /proc entry's name as a pid ("4242"); nullopt for "self", "stat" and anything not a number.
[[nodiscard]] std::optional<unsigned> pid_of_proc_entry(std::string_view name);

// A decimal number of at most `max_digits` digits and nothing else ("0042" too); nullopt otherwise.
[[nodiscard]] std::optional<unsigned> parse_digits(std::string_view text, std::size_t max_digits);

// The boot time in seconds since the epoch from the "btime" line of /proc/stat.
[[nodiscard]] std::optional<long long> parse_boot_time(std::string_view proc_stat_text);

}  // namespace tarmac::host
