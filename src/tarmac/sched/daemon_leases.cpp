// Leases that sit idle or run out (daemon_leases.hpp).
#include "tarmac/sched/daemon_leases.hpp"

#include <fmt/format.h>

#include <vector>

#include "tarmac/sched/daemon_common.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::sched {

using detail::indices_text;

Job end_lease(JobTable& table, LeaseFiles& files, Job& job, JobState state, const std::string& reason, long long now_ms) {
  files.remove_for(job, now_ms);
  return table.end(job, state, reason);
}

Result<void> activate_lease(JobTable& table, LeaseFiles& files, Job& lease, const std::vector<unsigned>& chosen,
                            const std::vector<std::string>& uuids, long long for_ms, const util::LogSink& log) {
  Job given = lease;
  given.started_ms = util::wall_ms();
  given.expires_ms = given.started_ms + for_ms;
  given.state = JobState::Active;
  given.gpus = chosen;
  given.gpu_uuids = uuids;
  given.reason.clear();
  TARMAC_TRY(files.write_for(given, 0, 0));
  lease = std::move(given);
  table.persist(lease);
  if (log) {
    log(util::LogLevel::Info, fmt::format("scheduler: lease {} of {}: GPU {} for {}", lease.id, lease.user,
                                          indices_text(lease.gpus), util::format_duration_ms(for_ms)));
  }
  return {};
}

namespace {

bool used(const Job& lease, const std::map<std::string, GpuUse>& seen) {
  for (const auto& u : lease.gpu_uuids) {
    const auto it = seen.find(u);
    if (it != seen.end() && (!it->second.pids.empty() || it->second.util.value_or(0) > 0)) return true;
  }
  return false;
}

bool active_lease(const Job* job) { return job != nullptr && job->kind == JobKind::Lease && job->state == JobState::Active; }

}  // namespace

void IdleLeases::check(const std::map<std::string, GpuUse>& seen, long long now_ms, long long now_unix_ms) {
  std::erase_if(idle_, [this](const auto& kv) { return !active_lease(table_.find(kv.first)); });
  std::vector<std::pair<long long, JobState>> ended;
  for (auto& [id, job] : table_.jobs()) {
    if (!active_lease(&job)) continue;
    Idle& idle = idle_.try_emplace(id, Idle{.last_used_ms = now_ms}).first->second;
    if (used(job, seen)) idle = Idle{.last_used_ms = now_ms};
    if (job.expires_ms > 0 && now_unix_ms >= job.expires_ms) {
      ended.emplace_back(id, JobState::Expired);
      continue;
    }
    if (idle.warned_ms == 0 && now_ms - idle.last_used_ms >= config_.lease_idle_limit_ms) {
      idle.warned_ms = now_ms;
      notice(job, false, now_ms - idle.last_used_ms, now_unix_ms);
    }
    // The grace period counts from the warning, as the warning says.
    if (idle.warned_ms != 0 && now_ms - idle.warned_ms >= config_.lease_idle_grace_ms) {
      notice(job, true, now_ms - idle.last_used_ms, now_unix_ms);
      ended.emplace_back(id, JobState::Reclaimed);
    }
  }
  for (const auto& [id, state] : ended) {
    idle_.erase(id);
    (void)end_lease(table_, files_, table_.jobs().at(id), state,
                    state == JobState::Reclaimed ? "its GPUs sat idle" : "its time ran out", now_ms);
  }
}

void IdleLeases::notice(const Job& job, bool reclaimed, long long idle_ms, long long now_unix_ms) {
  LeaseNotice n;
  n.reclaimed = reclaimed;
  n.id = job.id;
  n.user = job.user;
  n.gpus = job.gpus;
  n.uuids = job.gpu_uuids;
  n.idle_since_unix_ms = now_unix_ms - idle_ms;  // for people: when it was last used, in wall time
  const std::string idle = util::format_duration_ms(idle_ms);
  n.summary = reclaimed ? fmt::format("lease {} of {} (GPU {}) reclaimed: unused for {}", job.id, job.user,
                                      indices_text(job.gpus), idle)
                        : fmt::format("lease {} of {} (GPU {}) unused for {}: it will be released in {} unless used",
                                      job.id, job.user, indices_text(job.gpus), idle,
                                      util::format_duration_ms(config_.lease_idle_grace_ms));
  log(util::LogLevel::Warning, "scheduler: " + n.summary);
  table_.record_event(job.gpus.empty() ? std::nullopt : std::optional<unsigned>(job.gpus.front()),
                      reclaimed ? "lease_reclaimed" : "lease_idle", n.summary);
  if (notify_) notify_(n);
}

}  // namespace tarmac::sched
