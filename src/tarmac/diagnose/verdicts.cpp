#include "tarmac/diagnose/verdicts.hpp"

#include <fmt/format.h>

#include <ctime>

#include "tarmac/gpu/clock_events.hpp"
#include "tarmac/host/process_info.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::diagnose {

using gpu::Activity;

std::string format_index_list(const std::vector<unsigned>& indices) {
  std::string out;
  for (std::size_t i = 0; i < indices.size();) {
    std::size_t j = i;
    while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j > i ? fmt::format("{}-{}", indices[i], indices[j]) : fmt::format("{}", indices[i]);
    i = j + 1;
  }
  return out;
}

namespace {

std::vector<unsigned> with_class(const gpu::Snapshot& s, const std::vector<Activity>& classes, Activity want) {
  std::vector<unsigned> out;
  for (std::size_t i = 0; i < s.devices.size() && i < classes.size(); ++i) {
    if (classes[i] == want) out.push_back(s.devices[i].id.index);
  }
  return out;
}

const char* plural(std::size_t n, const char* one, const char* many) { return n == 1 ? one : many; }

// "an idle Jupyter kernel of bob holds 20.0 GiB on GPU 3 since 14:02" (or "(started 14:02)" where
// nothing measured since when it is idle): a holding GPU whose
// holder is a well-known kind of process, named as a fleet owner would; nullopt otherwise.
std::optional<std::string> known_holder_text(const gpu::Device& d, const std::optional<long long>& held_since_unix_ms) {
  // The well-known process that holds the most memory there.
  const gpu::GpuProcess* best = nullptr;
  std::optional<std::string> kind;
  for (const auto& p : d.processes) {
    auto k = host::well_known_holder(p.host.command_line);
    if (k && (best == nullptr || p.used_mem_bytes.value_or(0) > best->used_mem_bytes.value_or(0))) {
      best = &p;
      kind = std::move(k);
    }
  }
  if (best != nullptr) {
    const gpu::GpuProcess& p = *best;
    // Since it went idle where that was measured; else when it started (it was idle no longer).
    std::string started;
    const auto clock = [](long long unix_s) {
      const std::time_t t = static_cast<std::time_t>(unix_s);
      std::tm tm{};
      return localtime_r(&t, &tm) != nullptr ? fmt::format("{:02}:{:02}", tm.tm_hour, tm.tm_min) : std::string();
    };
    if (held_since_unix_ms) {
      if (auto hhmm = clock(*held_since_unix_ms / 1000); !hhmm.empty()) started = " since " + hhmm;
    } else if (p.host.start_time_unix) {
      if (auto hhmm = clock(*p.host.start_time_unix); !hhmm.empty()) started = " (started " + hhmm + ")";
    }
    const std::string held = p.used_mem_bytes ? util::format_bytes(*p.used_mem_bytes) : std::string("memory");
    // The user name is another user's words: shown escaped.
    return fmt::format("an idle {} of {} holds {} on GPU {}{}: `tarmac reap` (or stop it)", *kind,
                       util::terminal_text(p.host.user.value_or("?")), held, d.id.index, started);
  }
  return std::nullopt;
}

}  // namespace

std::string reserved_idle_text(const std::string& what, const GpuLease& lease) {
  if (!lease.cancel_id.empty()) {
    return fmt::format("{} is reserved by {} and unused: `tarmac cancel {}` gives it back", what,
                       util::terminal_text(lease.label), lease.cancel_id);
  }
  if (!lease.label.empty()) {
    return fmt::format("{} is reserved by {} and unused: `tarmac jobs` lists the leases", what,
                       util::terminal_text(lease.label));
  }
  return fmt::format("{} is reserved and unused: `tarmac jobs` lists the leases", what);
}

std::vector<Verdict> verdicts(const gpu::Snapshot& s, const std::vector<Activity>& classes,
                              const std::vector<std::optional<long long>>& held_idle_since_unix_ms,
                              const std::vector<GpuLease>& leases) {
  std::vector<Verdict> out;
  for (const auto& d : s.devices) {
    if (auto reason = gpu::fault_reason(d)) {
      const bool slowed = !d.lost && gpu::harmful_clock_events(d.sample.clock_event_reasons.value_or(0)) != 0;
      out.push_back({Severity::Critical, slowed ? "thermal" : "gpu-fault",
                     fmt::format("GPU {}: {}", d.id.index, *reason)});
    }
  }
  const auto busy = with_class(s, classes, Activity::Busy);
  const auto idle = with_class(s, classes, Activity::Idle);
  if (!busy.empty() && !idle.empty()) {
    out.push_back({Severity::Warning, busy.size() == 1 ? "single-gpu-active" : "idle-gpus",
                   fmt::format("{} {} idle while {} {} {}: see `tarmac doctor`", plural(idle.size(), "GPU", "GPUs"),
                               format_index_list(idle), plural(busy.size(), "GPU", "GPUs"), format_index_list(busy),
                               plural(busy.size(), "works", "work"))});
  } else if (busy.empty() && !idle.empty() && idle.size() == s.devices.size()) {
    out.push_back({Severity::Info, "all-idle",
                   fmt::format("all {} GPUs idle: grounded (`tarmac pick` finds them for a job)", idle.size())});
  }
  // Reserved and unused: who holds each, and how to give it back (the lease's words escaped: a
  // lease file's job and user are its writer's).
  for (std::size_t i = 0; i < s.devices.size() && i < classes.size(); ++i) {
    if (classes[i] != Activity::ReservedIdle) continue;
    out.push_back({Severity::Warning, "reserved-idle",
                   reserved_idle_text(fmt::format("GPU {}", s.devices[i].id.index),
                                      i < leases.size() ? leases[i] : GpuLease{})});
  }
  if (auto starved = with_class(s, classes, Activity::Starved); !starved.empty()) {
    out.push_back({Severity::Warning, "starved",
                   fmt::format("{} {} {} memory at low utilization: waiting for data or other ranks "
                               "(see `tarmac doctor`)",
                               plural(starved.size(), "GPU", "GPUs"), format_index_list(starved),
                               plural(starved.size(), "holds", "hold"))});
  }
  // Holding GPUs whose holder is a Jupyter kernel, an LLM server, TensorBoard: one sentence each.
  std::vector<unsigned> plain_holding;
  for (std::size_t i = 0; i < s.devices.size() && i < classes.size(); ++i) {
    if (classes[i] != Activity::Holding) continue;
    if (auto text = known_holder_text(s.devices[i], i < held_idle_since_unix_ms.size() ? held_idle_since_unix_ms[i]
                                                                                     : std::nullopt)) {
      out.push_back({Severity::Warning, "holding", std::move(*text)});
    } else {
      plain_holding.push_back(s.devices[i].id.index);
    }
  }
  if (const auto& holding = plain_holding; !holding.empty()) {
    out.push_back({Severity::Warning, "holding",
                   fmt::format("{} {} {} memory at 0 % utilization: a forgotten process? (`tarmac reap`)",
                               plural(holding.size(), "GPU", "GPUs"), format_index_list(holding),
                               plural(holding.size(), "holds", "hold"))});
  }
  for (const auto& d : s.devices) {
    const auto total = d.id.mem_total_bytes.value_or(0);
    const auto used = d.sample.mem_used_bytes.value_or(0);
    if (total > 0 && used * 100 >= total * 98) {
      out.push_back({Severity::Warning, "near-oom",
                     fmt::format("GPU {}: memory {:.1f} % full: the next allocation may fail", d.id.index,
                                 100.0 * static_cast<double>(used) / static_cast<double>(total))});
    }
  }
  return out;
}

const char* to_string(Severity s) {
  switch (s) {
    case Severity::Info: return "info";
    case Severity::Warning: return "warning";
    case Severity::Critical: return "critical";
  }
  return "info";
}

std::vector<GpuLease> overlay_mig_leases(const gpu::Device& device, const std::map<std::string, GpuLease>& leases,
                                         const gpu::ActivityThresholds& thresholds, long long now_s,
                                         std::vector<gpu::MigActivity>& classes) {
  std::vector<GpuLease> out;
  for (std::size_t k = 0; k < device.mig.size(); ++k) {
    const auto on_slice = device.mig[k].uuid ? leases.find(*device.mig[k].uuid) : leases.end();
    out.push_back(on_slice != leases.end() ? on_slice->second : GpuLease{});
    if (on_slice == leases.end() || k >= classes.size()) continue;
    const auto leased = gpu::classify_mig(device, k, thresholds, now_s, gpu::Leased::Yes);
    if (leased.activity == gpu::Activity::ReservedIdle) classes[k] = leased;
  }
  return out;
}

std::vector<Verdict> lease_and_backfill_verdicts(const gpu::Snapshot& snap,
                                                 const std::vector<std::vector<gpu::MigActivity>>& mig_classes,
                                                 const std::vector<std::vector<GpuLease>>& mig_leases,
                                                 const std::vector<std::vector<Backfill>>& backfill) {
  std::vector<Verdict> out;
  // A MIG device given to a job that runs nothing on it, named as a whole GPU would be.
  for (std::size_t i = 0; i < snap.devices.size() && i < mig_classes.size(); ++i) {
    const gpu::Device& d = snap.devices[i];
    for (std::size_t k = 0; k < d.mig.size() && k < mig_classes[i].size(); ++k) {
      if (mig_classes[i][k].activity != gpu::Activity::ReservedIdle) continue;
      const GpuLease lease = i < mig_leases.size() && k < mig_leases[i].size() ? mig_leases[i][k] : GpuLease{};
      out.push_back({Severity::Warning, "reserved-idle",
                     reserved_idle_text(fmt::format("MIG {}:{}", d.id.index, d.mig[k].index), lease)});
    }
  }
  for (std::size_t i = 0; i < snap.devices.size() && i < backfill.size(); ++i) {
    for (const Backfill& b : backfill[i]) {
      out.push_back({Severity::Info, "backfill",
                     fmt::format("GPU {} runs backfill: {} on {} ({} of {} requests answered); it yields to any job",
                                 snap.devices[i].id.index, util::terminal_text(b.model), util::terminal_text(b.server),
                                 b.answered, b.requests)});
    }
  }
  return out;
}

}  // namespace tarmac::diagnose
