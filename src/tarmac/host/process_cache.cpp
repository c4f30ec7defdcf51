#include "tarmac/host/process_cache.hpp"

#include <unordered_map>

#include "tarmac/host/proc_parse.hpp"
#include "tarmac/util/fs.hpp"

namespace tarmac::host {

ProcessCache::ProcessCache(std::string proc_root) : root_(proc_root), reader_(std::move(proc_root)) {}

ProcessInfo ProcessCache::lookup(unsigned pid) { return std::move(lookup_many({pid}).front()); }

std::vector<ProcessInfo> ProcessCache::lookup_many(const std::vector<unsigned>& asked) {
  // Each pid once (a process on eight GPUs is listed eight times), answered at every place.
  std::vector<unsigned> pids;
  std::unordered_map<unsigned, std::size_t> position;
  for (const unsigned pid : asked) {
    if (position.emplace(pid, pids.size()).second) pids.push_back(pid);
  }
  if (pids.size() != asked.size()) {
    auto unique = lookup_many(pids);
    std::vector<ProcessInfo> all;
    all.reserve(asked.size());
    for (const unsigned pid : asked) all.push_back(unique[position[pid]]);
    return all;
  }
  std::vector<ProcessInfo> out(pids.size());
  std::vector<std::optional<StatFields>> stats(pids.size());
  std::vector<std::optional<std::string>> texts(pids.size());
  std::vector<std::size_t> to_read;  // positions whose facts are read afresh
  // What changes while a process lives, from this look's stat.
  const auto now = [](ProcessInfo& info, const StatFields& stat) {
    info.state = stat.state;
    info.parent_pid = stat.ppid;
    info.start_ticks = stat.starttime_ticks;
    info.cpu_ticks = stat.utime_ticks + stat.stime_ticks;
    info.rss_pages = stat.rss_pages;
  };
  for (std::size_t k = 0; k < pids.size(); ++k) {
    const unsigned pid = pids[k];
    texts[k] = util::read_file(root_ + "/" + std::to_string(pid) + "/stat");
    stats[k] = texts[k] ? parse_stat(*texts[k]) : std::nullopt;
    if (!stats[k]) {
      entries_.erase(pid);  // gone or unreadable: the reader says which
      to_read.push_back(k);
      continue;
    }
    auto it = entries_.find(pid);
    if (it != entries_.end() && it->second.start_ticks == stats[k]->starttime_ticks) {
      it->second.seen = true;
      out[k] = it->second.info;
      now(out[k], *stats[k]);
    } else {
      to_read.push_back(k);
    }
  }
  std::vector<unsigned> fresh;
  std::vector<std::optional<std::string>> fresh_stats;  // read just now: not read again
  for (const std::size_t k : to_read) {
    fresh.push_back(pids[k]);
    fresh_stats.push_back(stats[k] ? std::move(texts[k]) : std::nullopt);
  }
  auto read = reader_.read_many(fresh, fresh_stats);
  for (std::size_t n = 0; n < to_read.size(); ++n) {
    const std::size_t k = to_read[n];
    out[k] = std::move(read[n]);
    if (!stats[k]) continue;
    now(out[k], *stats[k]);
    // Facts that could not be read in time are unknown, not the process's: read again next time
    // (a read of it still stuck is refused at once, so that costs nothing while it is).
    if (out[k].unread) {
      entries_.erase(pids[k]);
    } else {
      entries_[pids[k]] = Entry{stats[k]->starttime_ticks, out[k], true};
    }
  }
  return out;
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
