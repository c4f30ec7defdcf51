// What the simulator reads from /proc about a process.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace tarmac::sim {

struct ProcStat {
  char state = '?';                 // R, S, D, Z, ...
  unsigned long long starttime = 0;  // clock ticks after boot: with the pid, names one process
};

// Fields of /proc/PID/stat; nullopt when the process does not exist.
[[nodiscard]] std::optional<ProcStat> read_proc_stat(pid_t pid);

// Whether `pid` is still the process that started at `starttime` (a zombie counts as gone).
[[nodiscard]] bool process_alive(pid_t pid, unsigned long long starttime);

// /proc/PID/cmdline split at NULs; empty for a kernel thread or a gone process.
[[nodiscard]] std::vector<std::string> read_cmdline(pid_t pid);
// /proc/PID/comm without the newline; nullopt when the process does not exist.
[[nodiscard]] std::optional<std::string> read_comm(pid_t pid);

}  // namespace tarmac::sim
