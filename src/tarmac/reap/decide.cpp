#include "tarmac/reap/decide.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>

#include "tarmac/util/units.hpp"

namespace tarmac::reap {
namespace {

using Rule = std::optional<Decision> (*)(const ProcessEvidence&, const ReaperConfig&, const Caller&);

Decision because(Reason reason, std::string detail = {}) { return Decision{reason, std::move(detail)}; }

std::string duration(long long ms) { return util::format_duration_ms(std::max(0LL, ms)); }

std::optional<Decision> not_visible(const ProcessEvidence& e, const ReaperConfig&, const Caller&) {
  if (e.identity && e.process.host.visibility == host::PidVisibility::Visible) return std::nullopt;
  return because(Reason::NotVisible, fmt::format("pid {} is not in this PID namespace", e.process.pid));
}

std::optional<Decision> is_reaper(const ProcessEvidence& e, const ReaperConfig&, const Caller& caller) {
  const unsigned pid = e.process.pid;
  if (pid <= 1 || pid == static_cast<unsigned>(caller.pid)) return because(Reason::Reaper, "reap itself");
  const auto& up = caller.ancestors;
  if (std::find(up.begin(), up.end(), pid) != up.end()) return because(Reason::Reaper, "reap runs under it");
  return std::nullopt;
}

std::optional<Decision> is_protected(const ProcessEvidence& e, const ReaperConfig& config, const Caller&) {
  if (auto rule = protected_by(e.process.host, config)) return because(Reason::Protected, *rule);
  return std::nullopt;
}

std::optional<Decision> other_user(const ProcessEvidence& e, const ReaperConfig&, const Caller& caller) {
  if (caller.is_root()) return std::nullopt;
  // An owner that cannot be read is not the caller's: only what is known to be theirs is theirs.
  if (e.process.host.uid && *e.process.host.uid == caller.uid) return std::nullopt;
  return because(Reason::OtherUser, e.process.host.user ? "owned by " + *e.process.host.user : "owner unknown");
}

std::optional<Decision> in_tarmac_job(const ProcessEvidence& e, const ReaperConfig&, const Caller&) {
  if (!e.tarmac_job) return std::nullopt;
  return because(Reason::InTarmacJob, "job " + *e.tarmac_job);
}

std::optional<Decision> in_slurm_job(const ProcessEvidence& e, const ReaperConfig&, const Caller& caller) {
  if (!caller.slurm_manages_node || !e.process.host.slurm_job_id) return std::nullopt;
  return because(Reason::InSlurmJob, "Slurm job " + *e.process.host.slurm_job_id);
}

std::optional<Decision> not_holding(const ProcessEvidence& e, const ReaperConfig&, const Caller&) {
  if (!e.device_file) {
    return because(Reason::NotHolding, "the GPU's device file cannot be told (MIG mode, or no minor number)");
  }
  const auto& d = *e.device_file;
  switch (e.holding) {
    case host::Holding::Holds: return std::nullopt;
    case host::Holding::NotHeld:
      return because(Reason::NotHolding, fmt::format("pid {} does not have the GPU's device file ({}:{}) open: NVML lists "
                                                     "a process that is not this one",
                                                     e.process.pid, d.major, d.minor));
    case host::Holding::Unknown: break;
  }
  return because(Reason::NotHolding, fmt::format("could not prove that pid {} has the GPU's device file ({}:{}) open "
                                                 "(its descriptors unreadable, or too many to read)",
                                                 e.process.pid, d.major, d.minor));
}

std::optional<Decision> listed_for_another_process(const ProcessEvidence& e, const ReaperConfig&, const Caller&) {
  if (!e.listed_before) return std::nullopt;
  return because(Reason::NotHolding, *e.listed_before);
}

// Without the agent's store nothing says how long the driver has listed the pid: a listing older
// than the watch may be a stale context's under a reused pid, which another user can steer onto a
// victim's process (docs/reap.md "Safety checks", N1). So root ends nothing on a watch's evidence;
// a user's own --kill may, since it can only end that user's processes (other_user comes first).
std::optional<Decision> listing_older_than_the_watch(const ProcessEvidence& e, const ReaperConfig&,
                                                     const Caller& caller) {
  if (caller.intent != Intent::Kill || e.source != EvidenceSource::Watch || !caller.is_root()) return std::nullopt;
  return because(Reason::NotHolding, fmt::format("without the agent's store, the driver's listing of pid {} cannot be "
                                                 "tied to this process (it may be older than reap's watch): root's "
                                                 "--kill acts on the store's evidence only",
                                                 e.process.pid));
}

std::optional<Decision> below_min_memory(const ProcessEvidence& e, const ReaperConfig& config, const Caller&) {
  const auto used = e.process.used_mem_bytes;
  // A process that holds nothing reap can measure frees nothing when it is ended.
  if (used && *used > 0 && *used >= config.min_memory_bytes) return std::nullopt;
  return because(Reason::BelowMinMemory,
                 used ? fmt::format("{} of at least {}", util::format_bytes(*used),
                                    util::format_bytes(std::max<std::uint64_t>(config.min_memory_bytes, 1)))
                      : std::string("memory in use unknown"));
}

std::optional<Decision> too_young(const ProcessEvidence& e, const ReaperConfig& config, const Caller&) {
  if (e.age_ms && *e.age_ms >= config.min_age_ms) return std::nullopt;
  return because(Reason::TooYoung, e.age_ms ? fmt::format("started {} ago, reaper.min_age is {}", duration(*e.age_ms),
                                                          duration(config.min_age_ms))
                                            : std::string("start time unknown"));
}

std::optional<Decision> unknown_utilization(const ProcessEvidence& e, const ReaperConfig&, const Caller&) {
  if (!e.history.empty() && e.history.last_util_pct) return std::nullopt;
  return because(Reason::UnknownUtilization, e.history.empty() ? "never observed" : "the last reading is unknown");
}

std::optional<Decision> busy(const ProcessEvidence& e, const ReaperConfig&, const Caller&) {
  if (*e.history.last_util_pct == 0) return std::nullopt;
  return because(Reason::Busy, fmt::format("SM {} %", *e.history.last_util_pct));
}

std::optional<Decision> observed_too_short(const ProcessEvidence& e, const ReaperConfig& config, const Caller&) {
  const IdleHistory& h = e.history;
  if (h.observed_ms() >= config.idle_for_ms) return std::nullopt;
  // Idle all the time it was watched: only the watch was too short to say more.
  if (!h.idle_since_ms || *h.idle_since_ms != h.observed_since_ms) return std::nullopt;
  return because(Reason::ObservedTooShort,
                 fmt::format("watched {} of --idle-for {}", duration(h.observed_ms()), duration(config.idle_for_ms)));
}

std::optional<Decision> recently_busy(const ProcessEvidence& e, const ReaperConfig& config, const Caller&) {
  if (e.history.idle_ms() >= config.idle_for_ms) return std::nullopt;
  return because(Reason::RecentlyBusy,
                 fmt::format("idle {} of --idle-for {}", duration(e.history.idle_ms()), duration(config.idle_for_ms)));
}

// In order: the first that answers decides.
constexpr std::array<Rule, 15> kRules = {not_visible,
                                         is_reaper,
                                         is_protected,
                                         other_user,
                                         in_tarmac_job,
                                         in_slurm_job,
                                         not_holding,
                                         listed_for_another_process,
                                         listing_older_than_the_watch,
                                         below_min_memory,
                                         too_young,
                                         unknown_utilization,
                                         busy,
                                         observed_too_short,
                                         recently_busy};

}  // namespace

Decision decide_one(const ProcessEvidence& evidence, const ReaperConfig& config, const Caller& caller) {
  for (const Rule rule : kRules) {
    if (auto decision = rule(evidence, config, caller)) return std::move(*decision);
  }
  return because(Reason::Candidate, fmt::format("idle {} (SM 0 %, {})", duration(evidence.history.idle_ms()),
                                                to_string(evidence.history.last_source)));
}

std::vector<Decision> decide(const std::vector<ProcessEvidence>& evidence, const ReaperConfig& config,
                             const Caller& caller) {
  std::vector<Decision> out;
  out.reserve(evidence.size());
  for (const auto& e : evidence) out.push_back(decide_one(e, config, caller));
  // One decision per process: ending it ends it on every GPU, so a listing that is not a
  // candidate keeps it on all of them.
  const std::vector<Decision> own = out;
  for (std::size_t i = 0; i < evidence.size(); ++i) {
    if (own[i].reason != Reason::Candidate) continue;
    for (std::size_t j = 0; j < evidence.size(); ++j) {
      if (j == i || evidence[j].process.pid != evidence[i].process.pid || own[j].reason == Reason::Candidate) continue;
      out[i] = because(own[j].reason, fmt::format("on GPU {}: {}", evidence[j].gpu, own[j].detail));
      break;
    }
  }
  return out;
}

const char* to_string(Reason reason) {
  switch (reason) {
    case Reason::Candidate: return "candidate";
    case Reason::NotVisible: return "not-visible";
    case Reason::Reaper: return "reaper";
    case Reason::Protected: return "protected";
    case Reason::OtherUser: return "other-user";
    case Reason::InTarmacJob: return "tarmac-job";
    case Reason::InSlurmJob: return "slurm-job";
    case Reason::NotHolding: return "not-holding";
    case Reason::BelowMinMemory: return "below-min-memory";
    case Reason::TooYoung: return "too-young";
    case Reason::UnknownUtilization: return "unknown-utilization";
    case Reason::Busy: return "busy";
    case Reason::ObservedTooShort: return "observed-too-short";
    case Reason::RecentlyBusy: return "recently-busy";
  }
  return "unknown";
}

const char* describe(Reason reason) {
  switch (reason) {
    case Reason::Candidate: return "holds memory without computing";
    case Reason::NotVisible: return "not visible in this PID namespace";
    case Reason::Reaper: return "reap itself or what runs it";
    case Reason::Protected: return "protected by a rule";
    case Reason::OtherUser: return "another user's, and you are not root";
    case Reason::InTarmacJob: return "inside a tarmac job (its own limits end it)";
    case Reason::InSlurmJob: return "inside a Slurm job, and Slurm manages this node";
    case Reason::NotHolding: return "not proven to hold this GPU's device file";
    case Reason::BelowMinMemory: return "holds less than --min-memory";
    case Reason::TooYoung: return "too young (reaper.min_age)";
    case Reason::UnknownUtilization: return "utilization unknown";
    case Reason::Busy: return "busy";
    case Reason::ObservedTooShort: return "observed for less than --idle-for";
    case Reason::RecentlyBusy: return "busy within --idle-for";
  }
  return "unknown";
}

const char* to_string(HiddenHolder::Relation relation) {
  return relation == HiddenHolder::Relation::Descendant ? "descendant" : "same-container";
}

const char* to_string(EvidenceSource source) { return source == EvidenceSource::Store ? "store" : "watch"; }

}  // namespace tarmac::reap
