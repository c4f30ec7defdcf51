// Host attribution across repeated samples: a process's user, command line, container and job do
// not change while it lives, so they are read once per (pid, start time) and reused.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "tarmac/host/proc_reader.hpp"

namespace tarmac::host {

class ProcessCache {
 public:
  explicit ProcessCache(std::string proc_root = "/proc");

  // What the host knows about `pid` now. One read of /proc/<pid>/stat decides whether the cached
  // facts still belong to the same process (same start time); a reused PID is read afresh, and
  // so are facts that could not be read in time (ProcessInfo::unread).
  [[nodiscard]] ProcessInfo lookup(unsigned pid);
  // The same for several pids, the processes not cached read together (ProcReader::read_many).
  [[nodiscard]] std::vector<ProcessInfo> lookup_many(const std::vector<unsigned>& pids);

  // Forgets the PIDs not looked up since the previous call, so the cache holds live processes only.
  void end_round();

  [[nodiscard]] std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    unsigned long long start_ticks = 0;
    ProcessInfo info;
    bool seen = false;
  };
  std::string root_;
  ProcReader reader_;
  std::unordered_map<unsigned, Entry> entries_;
};

}  // namespace tarmac::host
