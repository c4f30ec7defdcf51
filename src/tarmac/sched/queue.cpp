#include "tarmac/sched/queue.hpp"

#include <algorithm>
#include <tuple>

namespace tarmac::sched {

std::vector<const Job*> fair_order(std::vector<const Job*> waiting, const std::map<uid_t, long long>& usage) {
  const auto used = [&usage](uid_t uid) {
    const auto it = usage.find(uid);
    return it == usage.end() ? 0LL : it->second;
  };
  std::stable_sort(waiting.begin(), waiting.end(), [&used](const Job* a, const Job* b) {
    return std::make_tuple(used(a->uid), a->submitted_ms, a->id) < std::make_tuple(used(b->uid), b->submitted_ms, b->id);
  });
  return waiting;
}

bool within_cap(unsigned cap, unsigned in_use, unsigned n) { return cap == 0 || in_use + n <= cap; }

gpu::Snapshot without_jobs_on(const gpu::Snapshot& snapshot, const std::set<std::string>& uuids) {
  gpu::Snapshot out = snapshot;
  for (auto& d : out.devices) {
    if (!d.id.uuid || !uuids.contains(*d.id.uuid)) continue;
    d.processes.clear();
    if (d.sample.mem_used_bytes && d.sample.mem_free_bytes) {
      d.sample.mem_free_bytes = *d.sample.mem_free_bytes + *d.sample.mem_used_bytes;
      d.sample.mem_used_bytes = 0;
    }
    d.sample.util_gpu_pct = 0;
  }
  return out;
}

}  // namespace tarmac::sched
