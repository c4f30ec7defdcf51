// Reads a /proc tree to attribute the PIDs NVML reports to users, containers and Slurm jobs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tarmac/host/process_info.hpp"

namespace tarmac::host {

// Reads process facts under a /proc root; the root is injectable so tests use a fake tree.
class ProcReader {
 public:
  // Reads the boot time and clock tick rate once: neither changes while tarmac runs.
  explicit ProcReader(std::string proc_root = "/proc");

  // Everything readable about `pid`; never fails: missing pieces stay nullopt, and a PID absent
  // from the root is NotInNamespace.
  [[nodiscard]] ProcessInfo read(unsigned pid) const;

  // Direct children of `pid` in ascending order, found by scanning the ppid of every /proc/*/stat.
  [[nodiscard]] std::vector<unsigned> children(unsigned pid) const;

  // All descendants of `pid`, breadth-first (children before grandchildren), each once.
  [[nodiscard]] std::vector<unsigned> descendants(unsigned pid) const;

 private:
  [[nodiscard]] std::string pid_path(unsigned pid, const char* file) const;

  std::string root_;
  std::optional<long long> boot_time_unix_;
  long clock_ticks_per_s_ = 0;
};

}  // namespace tarmac::host
