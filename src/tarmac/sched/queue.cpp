#include "tarmac/sched/queue.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
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

bool holds_gpus(const Job& job) {
  return job.state == JobState::Running || job.state == JobState::Stopping || job.state == JobState::Active;
}

unsigned gpus_held_by(const JobsById& jobs, uid_t uid) {
  unsigned n = 0;
  for (const auto& [id, j] : jobs) {
    if (j.uid == uid && holds_gpus(j)) n += static_cast<unsigned>(j.gpu_uuids.size());
  }
  return n;
}

unsigned gpus_awaited_by(const JobsById& jobs, uid_t uid) {
  unsigned n = 0;
  for (const auto& [id, j] : jobs) {
    if (j.uid == uid && j.kind == JobKind::Lease && j.state == JobState::Queued) n += j.request.n;
  }
  return n;
}

LeasedGpus busy_gpus(const std::vector<Lease>& live, const JobsById& jobs) {
  LeasedGpus out;
  for (const auto& l : live) out[l.uuid] = describe(l);
  for (const auto& [id, j] : jobs) {
    if (!holds_gpus(j)) continue;
    for (const auto& u : j.gpu_uuids) out[u] = std::string(to_string(j.kind)) + " " + std::to_string(j.id) + " of " + j.user;
  }
  return out;
}

unsigned gpus_held_for_good(const JobsById& jobs) {
  unsigned n = 0;
  for (const auto& [id, j] : jobs) {
    if ((j.state == JobState::Running && !j.backfill) || j.state == JobState::Active) {
      // Whole GPUs only: a MIG device is a part of a board, never the board (docs/mig.md).
      n += static_cast<unsigned>(std::count_if(j.gpu_uuids.begin(), j.gpu_uuids.end(),
                                               [](const std::string& u) { return !is_mig_uuid(u); }));
    }
  }
  return n;
}

namespace {
bool running_backfill(const Job& j) { return j.kind == JobKind::Job && j.backfill && j.state == JobState::Running; }
}  // namespace

std::set<std::string> preemptible_gpus(const JobsById& jobs) {
  std::set<std::string> out;
  for (const auto& [id, j] : jobs) {
    if (running_backfill(j)) out.insert(j.gpu_uuids.begin(), j.gpu_uuids.end());
  }
  return out;
}

std::vector<long long> backfill_on(const JobsById& jobs, const std::vector<std::string>& uuids) {
  std::vector<long long> out;
  for (const auto& u : uuids) {
    for (const auto& [id, j] : jobs) {
      if (!running_backfill(j) || std::find(out.begin(), out.end(), id) != out.end()) continue;
      if (std::find(j.gpu_uuids.begin(), j.gpu_uuids.end(), u) != j.gpu_uuids.end()) out.push_back(id);
    }
  }
  return out;
}

std::set<std::string> gpus_of(const gpu::Snapshot& snapshot, const ExternalBackfill& holder) {
  std::set<std::string> out;
  for (const auto& d : snapshot.devices) {
    if (!d.id.uuid) continue;
    if (std::any_of(d.processes.begin(), d.processes.end(), [&](const auto& p) { return holder.pids.contains(p.pid); })) {
      out.insert(*d.id.uuid);
    }
  }
  return out;
}

gpu::Snapshot without_processes_of(const gpu::Snapshot& snapshot, const std::vector<ExternalBackfill>& holders) {
  gpu::Snapshot out = snapshot;
  const auto theirs = [&holders](const gpu::GpuProcess& p) {
    return std::any_of(holders.begin(), holders.end(), [&p](const auto& h) { return h.pids.contains(p.pid); });
  };
  for (auto& d : out.devices) {
    std::uint64_t freed = 0;
    const auto before = d.processes.size();
    std::erase_if(d.processes, [&](const gpu::GpuProcess& p) {
      if (!theirs(p)) return false;
      freed += p.used_mem_bytes.value_or(0);
      return true;
    });
    if (d.processes.size() == before) continue;
    if (d.sample.mem_used_bytes && d.sample.mem_free_bytes) {
      freed = std::min(freed, *d.sample.mem_used_bytes);
      d.sample.mem_free_bytes = *d.sample.mem_free_bytes + freed;
      d.sample.mem_used_bytes = *d.sample.mem_used_bytes - freed;
    }
    if (d.processes.empty()) d.sample.util_gpu_pct = 0;  // what kept it busy is gone
  }
  return out;
}

std::optional<BackfillRoom> room_in_backfill(const gpu::Snapshot& snapshot, const LeasedGpus& leased,
                                             const JobsById& jobs, const PickRequest& request,
                                             const std::vector<ExternalBackfill>& external) {
  // Backfill jobs run on whole GPUs only, never on a MIG device: nothing yields to a MIG request.
  if (request.mig) return std::nullopt;
  const auto backfill_gpus = preemptible_gpus(jobs);
  std::map<std::string, std::set<std::string>> external_gpus;  // by server
  for (const auto& h : external) {
    if (auto on = gpus_of(snapshot, h); !on.empty()) external_gpus[h.name] = std::move(on);
  }
  if (backfill_gpus.empty() && external_gpus.empty()) return std::nullopt;
  LeasedGpus without = leased;
  for (const auto& u : backfill_gpus) without.erase(u);
  const auto picked = pick(without_processes_of(without_jobs_on(snapshot, backfill_gpus), external), without, request);
  if (!picked.ok()) return std::nullopt;
  BackfillRoom room{.chosen = picked.chosen, .uuids = given_uuids(snapshot, picked), .backfill = {}, .external = {}};
  room.backfill = backfill_on(jobs, room.uuids);
  for (const auto& [name, on] : external_gpus) {
    if (std::any_of(room.uuids.begin(), room.uuids.end(), [&on](const auto& u) { return on.contains(u); })) {
      room.external.push_back(name);
    }
  }
  if (room.backfill.empty() && room.external.empty()) return std::nullopt;  // it fits as it is: no room to make
  return room;
}

std::string yield_reason(const BackfillRoom& room) {
  const auto list = [](const auto& v) {
    std::string out;
    for (const auto& x : v) out += fmt::format("{}{}", out.empty() ? "" : ",", x);
    return out;
  };
  std::vector<std::string> who;
  if (!room.backfill.empty()) {
    who.push_back(fmt::format("backfill job{} {} to yield", room.backfill.size() == 1 ? "" : "s", list(room.backfill)));
  }
  if (!room.external.empty()) {
    who.push_back(fmt::format("backfill server{} {} to unload", room.external.size() == 1 ? "" : "s", list(room.external)));
  }
  return fmt::format("waiting for {} GPU{} {}", fmt::join(who, " and "), room.chosen.size() == 1 ? "" : "s",
                     list(room.chosen));
}

std::map<uid_t, long long> usage_until(const std::map<uid_t, long long>& ended, const JobsById& jobs,
                                       long long now_unix_ms) {
  std::map<uid_t, long long> used = ended;
  for (const auto& [id, j] : jobs) {
    if (j.kind == JobKind::Job && j.started_ms > 0 && (j.state == JobState::Running || j.state == JobState::Stopping)) {
      used[j.uid] += static_cast<long long>(j.gpus.size()) * std::max(0LL, now_unix_ms - j.started_ms);
    }
  }
  return used;
}

bool no_room_for(const PickRequest& request, const std::vector<PickRequest>& found_none) {
  return std::any_of(found_none.begin(), found_none.end(), [&request](const PickRequest& f) {
    // A MIG device and GPUs are different things: a request of one kind says nothing of the other.
    return request.mig == f.mig && request.n >= f.n && request.min_free_bytes >= f.min_free_bytes &&
           request.max_util_pct <= f.max_util_pct;
  });
}

bool room_coming(const JobsById& jobs, long long id) {
  return std::any_of(jobs.begin(), jobs.end(), [id](const auto& kv) {
    return kv.second.state == JobState::Stopping && kv.second.preempted_for == id;
  });
}

long long longest_grace_for(const JobsById& jobs, long long id) {
  long long longest = 0;
  for (const auto& [jid, j] : jobs) {
    if (j.preempted_for == id) longest = std::max(longest, j.grace_ms);
  }
  return longest;
}

bool idle_for(long long idle_since_ms, long long now_ms, long long needed_ms) {
  return idle_since_ms != 0 && now_ms - idle_since_ms >= needed_ms;
}

}  // namespace tarmac::sched
