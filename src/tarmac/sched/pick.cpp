#include "tarmac/sched/pick.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <tuple>

#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::sched {

const char* to_string(Exclusion reason) {
  switch (reason) {
    case Exclusion::Lost: return "lost";
    case Exclusion::NoUuid: return "no-uuid";
    case Exclusion::Mig: return "mig";
    case Exclusion::Leased: return "leased";
    case Exclusion::Process: return "process";
    case Exclusion::NotEnoughMemory: return "memory";
    case Exclusion::TooBusy: return "busy";
    case Exclusion::Profile: return "profile";
  }
  return "unknown";
}

namespace {

// The most free GPUs the combination search looks at: C(16, 8) = 12870 sets at worst.
constexpr std::size_t kMaxCandidates = 16;

// A whole GPU's exclusion (no MIG device).
Excluded whole(unsigned index, Exclusion reason, std::string detail) {
  return Excluded{index, reason, std::move(detail), std::nullopt};
}

std::optional<Excluded> exclusion(const gpu::Device& d, const LeasedGpus& leased,
                                  const PickRequest& request) {
  const unsigned index = d.id.index;
  if (d.lost) return whole(index, Exclusion::Lost, fmt::format("lost: {}", *d.lost));
  if (!d.id.uuid) {
    return whole(index, Exclusion::NoUuid, "its UUID could not be read, so it cannot be leased");
  }
  if (d.modes.mig_mode_current == true) {
    return whole(index, Exclusion::Mig,
                    fmt::format("in MIG mode ({} MIG device{}): CUDA cannot use it whole", d.mig.size(),
                                d.mig.size() == 1 ? "" : "s"));
  }

  if (auto it = leased.find(*d.id.uuid); it != leased.end()) {
    return whole(index, Exclusion::Leased, it->second.empty() ? std::string("leased") : it->second);
  }
  if (!d.processes.empty()) {
    std::string pids;
    for (const auto& p : d.processes) pids += fmt::format("{}{}", pids.empty() ? "" : ", ", p.pid);
    return whole(index, Exclusion::Process,
                    fmt::format("{} process{} (pid {})", d.processes.size(), d.processes.size() == 1 ? "" : "es", pids));
  }
  if (request.min_free_bytes > 0) {
    if (!d.sample.mem_free_bytes) {
      return whole(index, Exclusion::NotEnoughMemory, "free memory unknown");
    }
    if (*d.sample.mem_free_bytes < request.min_free_bytes) {
      return whole(index, Exclusion::NotEnoughMemory,
                      fmt::format("{} free < {}", util::format_bytes(*d.sample.mem_free_bytes),
                                  util::format_bytes(request.min_free_bytes)));
    }
  }
  const unsigned util = d.sample.util_gpu_pct.value_or(0);
  if (util > request.max_util_pct) {
    return whole(index, Exclusion::TooBusy, fmt::format("{} % busy > {} %", util, request.max_util_pct));
  }
  return std::nullopt;
}

// A candidate set's merit; greater is better.
struct Score {
  bool all_nvlink = false;
  unsigned nvlinks = 0;    // links summed over pairs, when all_nvlink
  bool one_numa = false;
  long rank_sum = 0;       // negated sum of ranking positions
  auto key() const { return std::tie(all_nvlink, nvlinks, one_numa, rank_sum); }
};

class SetSearch {
 public:
  SetSearch(const gpu::Snapshot& snap, const std::vector<unsigned>& ranked) : snap_(snap), ranked_(ranked) {}

  // Positions into `ranked` of the best set of n.
  std::vector<std::size_t> best(unsigned n) {
    std::vector<std::size_t> current;
    walk(0, n, current);
    return best_;
  }

 private:
  void walk(std::size_t from, unsigned n, std::vector<std::size_t>& current) {
    if (current.size() == n) {
      const Score s = score(current);
      if (best_.empty() || s.key() > best_score_.key()) {  // ties: the first found, the better ranked
        best_ = current;
        best_score_ = s;
      }
      return;
    }
    for (std::size_t i = from; i + (n - current.size()) <= ranked_.size(); ++i) {
      current.push_back(i);
      walk(i + 1, n, current);
      current.pop_back();
    }
  }

  Score score(const std::vector<std::size_t>& set) const {
    Score s;
    const auto& topo = snap_.topology;
    const std::size_t count = snap_.devices.size();
    const bool have_topology = topo && topo->links.size() == count && topo->nvlink_count.size() == count;
    s.all_nvlink = have_topology;
    for (std::size_t a = 0; a < set.size() && s.all_nvlink; ++a) {
      for (std::size_t b = a + 1; b < set.size(); ++b) {
        const unsigned i = ranked_[set[a]];
        const unsigned j = ranked_[set[b]];
        if (topo->links[i].size() != count || topo->links[i][j] != gpu::Link::NvLink) {
          s.all_nvlink = false;
          break;
        }
        s.nvlinks += topo->nvlink_count[i].size() == count ? topo->nvlink_count[i][j] : 0;
      }
    }
    if (!s.all_nvlink) s.nvlinks = 0;
    const auto& first_numa = snap_.devices[ranked_[set.front()]].id.numa_node;
    s.one_numa = first_numa.has_value() && std::all_of(set.begin(), set.end(), [&](std::size_t p) {
                   return snap_.devices[ranked_[p]].id.numa_node == first_numa;
                 });
    for (std::size_t p : set) s.rank_sum -= static_cast<long>(p);
    return s;
  }

  const gpu::Snapshot& snap_;
  const std::vector<unsigned>& ranked_;
  std::vector<std::size_t> best_;
  Score best_score_;
};

}  // namespace

namespace {

std::optional<Excluded> mig_exclusion(const gpu::Device& d, std::size_t k, const LeasedGpus& leased,
                                      const PickRequest& request) {
  const gpu::MigDevice& m = d.mig[k];
  const auto excluded = [&](Exclusion reason, std::string detail) {
    return Excluded{d.id.index, reason,
                    fmt::format("{}:{} (MIG {}): {}", d.id.index, m.index, m.profile.value_or("?"), detail), m.index};
  };
  if (!m.uuid) return excluded(Exclusion::NoUuid, "its UUID could not be read, so it cannot be leased");
  if (!request.mig->empty() && m.profile != *request.mig) return excluded(Exclusion::Profile, "another profile");
  if (auto it = leased.find(*m.uuid); it != leased.end()) {
    return excluded(Exclusion::Leased, it->second.empty() ? std::string("leased") : it->second);
  }
  std::string pids;
  std::size_t count = 0;
  for (const auto& p : d.processes) {
    // A process NVML did not place on a MIG device could be on any: it keeps all of them.
    if (p.mig && *p.mig != k) continue;
    pids += fmt::format("{}{}", pids.empty() ? "" : ", ", p.pid);
    ++count;
  }
  if (count > 0) return excluded(Exclusion::Process, fmt::format("{} process{} (pid {})", count, count == 1 ? "" : "es", pids));
  if (request.min_free_bytes > 0 && (!m.mem_free_bytes || *m.mem_free_bytes < request.min_free_bytes)) {
    return excluded(Exclusion::NotEnoughMemory,
                    m.mem_free_bytes ? fmt::format("{} free < {}", util::format_bytes(*m.mem_free_bytes),
                                                   util::format_bytes(request.min_free_bytes))
                                     : std::string("free memory unknown"));
  }
  return std::nullopt;
}

PickResult pick_mig(const gpu::Snapshot& snapshot, const LeasedGpus& leased, const PickRequest& request) {
  PickResult result;
  struct Candidate {
    std::size_t position;
    std::size_t mig;
  };
  std::vector<Candidate> free;
  for (std::size_t i = 0; i < snapshot.devices.size(); ++i) {
    const gpu::Device& d = snapshot.devices[i];
    if (d.lost) {
      result.excluded.push_back({d.id.index, Exclusion::Lost, fmt::format("lost: {}", *d.lost), std::nullopt});
      continue;
    }
    if (d.modes.mig_mode_current != true || d.mig.empty()) {
      result.excluded.push_back({d.id.index, Exclusion::Mig, "not in MIG mode: it has no MIG devices", std::nullopt});
      continue;
    }
    for (std::size_t k = 0; k < d.mig.size(); ++k) {
      if (auto ex = mig_exclusion(d, k, leased, request)) {
        result.excluded.push_back(std::move(*ex));
      } else {
        free.push_back({i, k});
      }
    }
  }
  const auto key = [&](const Candidate& c) {
    const gpu::MigDevice& m = snapshot.devices[c.position].mig[c.mig];
    return std::tuple(m.slices.value_or(8), m.mem_total_bytes.value_or(~0ULL), snapshot.devices[c.position].id.index,
                      m.index);
  };
  std::stable_sort(free.begin(), free.end(), [&](const Candidate& a, const Candidate& b) { return key(a) < key(b); });
  for (const Candidate& c : free) {
    const unsigned index = snapshot.devices[c.position].id.index;
    if (std::find(result.free.begin(), result.free.end(), index) == result.free.end()) result.free.push_back(index);
  }
  if (request.n != 1 || free.empty()) return result;
  const gpu::Device& d = snapshot.devices[free.front().position];
  result.chosen = {d.id.index};
  result.chosen_mig = d.mig[free.front().mig].index;
  result.mig_uuid = d.mig[free.front().mig].uuid;
  return result;
}

}  // namespace

PickResult pick(const gpu::Snapshot& snapshot, const LeasedGpus& leased, const PickRequest& request) {
  if (request.mig) return pick_mig(snapshot, leased, request);
  PickResult result;
  std::vector<std::size_t> free_positions;  // into snapshot.devices
  for (std::size_t i = 0; i < snapshot.devices.size(); ++i) {
    if (auto ex = exclusion(snapshot.devices[i], leased, request)) {
      result.excluded.push_back(std::move(*ex));
    } else {
      free_positions.push_back(i);
    }
  }
  std::stable_sort(free_positions.begin(), free_positions.end(), [&](std::size_t a, std::size_t b) {
    const auto& da = snapshot.devices[a];
    const auto& db = snapshot.devices[b];
    const auto fa = da.sample.mem_free_bytes.value_or(0);
    const auto fb = db.sample.mem_free_bytes.value_or(0);
    if (fa != fb) return fa > fb;
    const auto ua = da.sample.util_gpu_pct.value_or(0);
    const auto ub = db.sample.util_gpu_pct.value_or(0);
    if (ua != ub) return ua < ub;
    return da.id.index < db.id.index;
  });
  // Positions double as indices below (topology and devices are both by NVML index).
  std::vector<unsigned> ranked;
  for (std::size_t p : free_positions) ranked.push_back(static_cast<unsigned>(p));
  for (std::size_t p : free_positions) result.free.push_back(snapshot.devices[p].id.index);
  if (request.n == 0 || ranked.size() < request.n) return result;

  if (request.n == 1 || request.n >= kMaxCandidates) {
    // One GPU, or so many that only the ranking is practical: the best-ranked ones.
    for (unsigned k = 0; k < request.n; ++k) result.chosen.push_back(snapshot.devices[ranked[k]].id.index);
  } else {
    if (ranked.size() > kMaxCandidates) ranked.resize(kMaxCandidates);
    SetSearch search(snapshot, ranked);
    for (std::size_t p : search.best(request.n)) result.chosen.push_back(snapshot.devices[ranked[p]].id.index);
  }
  std::sort(result.chosen.begin(), result.chosen.end());
  return result;
}

}  // namespace tarmac::sched

namespace tarmac::sched {

namespace {

// "1g.18gb", "3g.71gb", "1g.18gb+me", "1g.23gb-me", "1g.24gb+gfx", "1g.24gb+me.all": NVIDIA's
// profile names.
bool is_profile_name(std::string_view p) {
  const auto digits = [&p](std::size_t at, std::size_t most) {
    std::size_t n = 0;
    while (at + n < p.size() && n < most && p[at + n] >= '0' && p[at + n] <= '9') ++n;
    return n;
  };
  if (p.size() < 6 || p[0] < '1' || p[0] > '8' || p.substr(1, 2) != "g.") return false;
  const std::size_t mem = digits(3, 4);
  if (mem == 0 || p.substr(3 + mem, 2) != "gb") return false;
  std::string_view rest = p.substr(5 + mem);
  if (rest.empty()) return true;
  if (rest.front() != '+' && rest.front() != '-') return false;
  rest.remove_prefix(1);
  return !rest.empty() && rest.size() <= 12 && rest.front() != '.' && rest.back() != '.' &&
         std::all_of(rest.begin(), rest.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '.'; });
}

}  // namespace

std::optional<std::string> mig_request_error(const PickRequest& request) {
  if (!request.mig) return std::nullopt;
  if (request.n != 1) return "--mig asks for one MIG device: a CUDA process sees one (run one job per MIG device)";
  if (request.max_util_pct != 100) return "--max-util does not apply to MIG devices: MIG mode gives no utilization";
  if (!request.mig->empty() && !is_profile_name(*request.mig)) {
    return fmt::format("--mig: '{}' is not a MIG profile (like 1g.18gb, 3g.40gb) or any",
                       util::terminal_text(*request.mig));
  }
  return std::nullopt;
}

std::vector<std::string> given_uuids(const gpu::Snapshot& snapshot, const PickResult& result) {
  if (result.mig_uuid) return {*result.mig_uuid};
  std::vector<std::string> out;
  for (unsigned index : result.chosen) {
    for (const auto& d : snapshot.devices) {
      if (d.id.index == index) out.push_back(d.id.uuid.value_or(""));
    }
  }
  return out;
}

std::string wanted_text(const PickRequest& request) {
  if (!request.mig) return fmt::format("{} free GPU{}", request.n, request.n == 1 ? "" : "s");
  if (request.mig->empty()) return "a free MIG device";
  return fmt::format("a free MIG device of profile {}", util::terminal_text(*request.mig));
}

bool is_mig_uuid(std::string_view uuid) { return uuid.starts_with("MIG-"); }

}  // namespace tarmac::sched
