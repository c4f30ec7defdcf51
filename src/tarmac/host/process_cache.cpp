#include "tarmac/host/process_cache.hpp"

#include "tarmac/host/proc_parse.hpp"
#include "tarmac/util/fs.hpp"

namespace tarmac::host {

ProcessCache::ProcessCache(std::string proc_root) : root_(proc_root), reader_(std::move(proc_root)) {}

ProcessInfo ProcessCache::lookup(unsigned pid) {
  const auto text = util::read_file(root_ + "/" + std::to_string(pid) + "/stat");
  const auto stat = text ? parse_stat(*text) : std::nullopt;
  if (!stat) {
    entries_.erase(pid);
    return reader_.read(pid);  // gone or unreadable: the reader says which
  }
  // What changes while a process lives, from this read.
  const auto now = [&](ProcessInfo info) {
    info.state = stat->state;
    info.parent_pid = stat->ppid;
    info.start_ticks = stat->starttime_ticks;
    info.cpu_ticks = stat->utime_ticks + stat->stime_ticks;
    info.rss_pages = stat->rss_pages;
    return info;
  };
  auto it = entries_.find(pid);
  if (it != entries_.end() && it->second.start_ticks == stat->starttime_ticks) {
    it->second.seen = true;
    return now(it->second.info);
  }
  Entry entry{stat->starttime_ticks, now(reader_.read(pid)), true};
  // Facts that could not be read in time are unknown, not the process's: read again next time
  // (a read of it still stuck is refused at once, so that costs nothing while it is).
  if (entry.info.unread) {
    entries_.erase(pid);
    return entry.info;
  }
  entries_[pid] = entry;
  return entry.info;
}

void ProcessCache::end_round() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (!it->second.seen) {
      it = entries_.erase(it);
    } else {
      it->second.seen = false;
      ++it;
    }
  }
}

}  // namespace tarmac::host
