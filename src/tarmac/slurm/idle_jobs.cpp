#include "tarmac/slurm/idle_jobs.hpp"

#include <algorithm>

namespace tarmac::slurm {

namespace {

bool held_idle(gpu::Activity a) {
  return a == gpu::Activity::Idle || a == gpu::Activity::ReservedIdle || a == gpu::Activity::Holding;
}

}  // namespace

std::optional<IdleJobAction> idle_job_action_from(std::string_view text) {
  if (text == "off") return IdleJobAction::Off;
  if (text == "notify") return IdleJobAction::Notify;
  if (text == "cancel") return IdleJobAction::Cancel;
  return std::nullopt;
}

const char* to_string(IdleJobAction action) {
  switch (action) {
    case IdleJobAction::Off: return "off";
    case IdleJobAction::Notify: return "notify";
    case IdleJobAction::Cancel: return "cancel";
  }
  return "off";
}

std::vector<IdleJobDecision> IdleJobs::observe(const host::JobMap& map, const host::JobInfos& infos,
                                               const std::map<unsigned, gpu::Activity>& classes, long long now_ms) {
  std::vector<IdleJobDecision> out;
  if (settings_.action == IdleJobAction::Off) return out;
  // Each job's GPUs, from the mapping.
  std::map<std::string, std::vector<unsigned>> gpus_of;
  for (const auto& [gpu, jobs] : map) {
    for (const auto& job : jobs) gpus_of[job].push_back(gpu);
  }
  const auto decision = [](IdleJobDecision::Kind kind, const std::string& job, const State& s) {
    return IdleJobDecision{kind, job, s.gpus, s.idle_since_ms, s.info, false};
  };
  for (const auto& [job, gpus] : gpus_of) {
    State& s = jobs_[job];
    s.gpus = gpus;
    if (auto it = infos.find(job); it != infos.end()) s.info = it->second;
    const bool idle = std::all_of(gpus.begin(), gpus.end(), [&classes](unsigned g) {
      const auto c = classes.find(g);
      return c != classes.end() && held_idle(c->second);
    });
    if (!idle) {
      if (s.warned) out.push_back(decision(IdleJobDecision::Kind::Resolved, job, s));
      s.idle = s.warned = s.cancel_asked = false;
      continue;
    }
    if (!s.idle) {
      s.idle = true;
      s.idle_since_ms = now_ms;
    }
    const long long idle_ms = now_ms - s.idle_since_ms;
    if (!s.warned && idle_ms >= settings_.warn_after_ms) {
      s.warned = true;
      out.push_back(decision(IdleJobDecision::Kind::Warn, job, s));
    }
    if (settings_.action == IdleJobAction::Cancel && s.warned && !s.cancel_asked &&
        idle_ms >= settings_.cancel_after_ms) {
      s.cancel_asked = true;
      out.push_back(decision(IdleJobDecision::Kind::Cancel, job, s));
    }
  }
  // Jobs that left the mapping: ended (or cancelled). A warned one is resolved.
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (gpus_of.contains(it->first)) {
      ++it;
      continue;
    }
    if (it->second.warned) {
      IdleJobDecision d = decision(IdleJobDecision::Kind::Resolved, it->first, it->second);
      d.gone = true;
      out.push_back(std::move(d));
    }
    it = jobs_.erase(it);
  }
  return out;
}

std::optional<bool> interactive_from_scontrol(std::string_view text) {
  for (std::size_t at = text.find("BatchFlag="); at != std::string_view::npos; at = text.find("BatchFlag=", at + 1)) {
    if (at > 0 && text[at - 1] != ' ' && text[at - 1] != '\n' && text[at - 1] != '\t') continue;
    const char flag = at + 10 < text.size() ? text[at + 10] : '\0';
    if (flag == '0') return true;
    if (flag == '1') return false;
  }
  return std::nullopt;
}

}  // namespace tarmac::slurm
