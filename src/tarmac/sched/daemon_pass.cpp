// The scheduler's pass (daemon_state.hpp): what the GPUs are doing, which are busy, which queued
// job starts where (fairness, caps, backfill and its preemption), and every tick's checks of idle
// leases, jobs outside their GPUs and wrappers watched without a pidfd.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "tarmac/sched/daemon_state.hpp"
#include "tarmac/sched/queue.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::sched {

using namespace detail;
// A snapshot with processes (and the topology, read at the first one).
Result<gpu::Snapshot> Daemon::State::look() {
  auto snap = backend->snapshot(
      gpu::SnapshotOptions{.processes = true, .topology = !topology.has_value(), .values = kPickValues});
  if (!snap.ok()) {
    backend.reset();
    topology.reset();
    return snap;
  }
  if (snap->topology) topology = snap->topology;
  else snap->topology = topology;
  return snap;
}

LeasedGpus Daemon::State::busy_gpus(const std::vector<Lease>& live) const {
  LeasedGpus out;
  for (const auto& l : live) out[l.uuid] = describe(l);
  for (const auto& [id, j] : jobs) {
    if (j.state != JobState::Running && j.state != JobState::Stopping && j.state != JobState::Active) continue;
    for (const auto& u : j.gpu_uuids) out[u] = fmt::format("{} {} of {}", to_string(j.kind), j.id, j.user);
  }
  return out;
}

unsigned Daemon::State::gpus_held_by(uid_t uid) const {
  unsigned n = 0;
  for (const auto& [id, j] : jobs) {
    if (j.uid == uid && (j.state == JobState::Running || j.state == JobState::Stopping || j.state == JobState::Active)) {
      n += static_cast<unsigned>(j.gpu_uuids.size());
    }
  }
  return n;
}

bool Daemon::State::ensure_backend() {
  if (backend) return true;
  auto b = opt.open_backend();
  if (!b.ok()) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot open NVML: {}", b.error().message));
    return false;
  }
  backend = std::move(*b);
  return true;
}

void Daemon::State::pass() {
  dirty = false;
  last_pass_ms = clock();
  std::vector<const Job*> normal;
  std::vector<Job*> backfill;
  for (auto& [id, j] : jobs) {
    if (j.kind != JobKind::Job || j.state != JobState::Queued) continue;
    if (j.backfill) backfill.push_back(&j);
    else normal.push_back(&j);
  }
  if (normal.empty() && backfill.empty()) return;
  {
    // Every GPU given out to work that is not backfill: nothing could start; skip NVML.
    unsigned held = 0;
    for (const auto& [id, j] : jobs) {
      if ((j.state == JobState::Running && !j.backfill) || j.state == JobState::Active) {
        held += static_cast<unsigned>(j.gpu_uuids.size());
      }
    }
    std::lock_guard lock(use_mutex);
    if (gpu_count > 0 && held >= gpu_count) return;
  }
  if (!ensure_backend()) return;
  const auto held = lock_dir_briefly();
  if (!held && !lock_stuck()) return;  // the loop comes back within kRetryMs
  const long long now = now_ms();
  auto live = dir->live_leases(now);
  if (!live.ok()) {
    log(util::LogLevel::Error, fmt::format("scheduler: {}", live.error().message));
    return;
  }
  auto snap = look();
  if (!snap.ok()) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot look at the GPUs: {}", snap.error().message));
    return;
  }
  std::erase_if(ended_pids, [now](const auto& kv) { return now - kv.second > kEndedPidMs; });
  for (auto& d : snap->devices) {
    std::erase_if(d.processes, [this](const gpu::GpuProcess& p) {
      return p.pid >= 2 && ended_pids.contains(p.pid) && ::kill(static_cast<pid_t>(p.pid), 0) != 0 && errno == ESRCH;
    });
  }
  LeasedGpus leased = busy_gpus(*live);
  const auto uuids_of = [&](const std::vector<unsigned>& chosen) {
    std::vector<std::string> out;
    for (unsigned index : chosen) {
      for (const auto& d : snap->devices) {
        if (d.id.index == index) out.push_back(d.id.uuid.value_or(""));
      }
    }
    return out;
  };
  std::set<std::string> backfill_gpus;  // GPUs of running backfill jobs not yet being stopped
  for (const auto& [id, j] : jobs) {
    if (j.kind == JobKind::Job && j.backfill && j.state == JobState::Running) {
      backfill_gpus.insert(j.gpu_uuids.begin(), j.gpu_uuids.end());
    }
  }
  std::map<uid_t, long long> used = usage;  // ended jobs, and running ones up to now
  for (const auto& [id, j] : jobs) {
    if (j.kind == JobKind::Job && j.started_ms > 0 && (j.state == JobState::Running || j.state == JobState::Stopping)) {
      used[j.uid] += static_cast<long long>(j.gpus.size()) * std::max(0LL, now - j.started_ms);
    }
  }
  bool normal_waits = false;
  // Requests that found no room in this pass: a later job asking for as much finds none either.
  std::vector<PickRequest> no_room;
  const auto hopeless = [&no_room](const PickRequest& r) {
    return std::any_of(no_room.begin(), no_room.end(), [&r](const PickRequest& f) {
      return r.n >= f.n && r.min_free_bytes >= f.min_free_bytes && r.max_util_pct <= f.max_util_pct;
    });
  };
  for (const Job* cj : fair_order(normal, used)) {
    Job& job = jobs.at(cj->id);
    if (backfill_gpus.empty() && hopeless(job.request)) {
      normal_waits = true;
      continue;
    }
    if (!within_cap(opt.config.user_gpu_cap, gpus_held_by(job.uid), job.request.n)) {
      job.reason = fmt::format("waiting: {} holds {} of the per-user cap of {} GPUs", job.user,
                               gpus_held_by(job.uid), opt.config.user_gpu_cap);
      continue;
    }
    const auto r = pick(*snap, leased, job.request);
    if (r.ok()) {
      const auto uuids = uuids_of(r.chosen);
      if (start_job(job, r.chosen, uuids)) {
        for (const auto& u : uuids) leased[u] = fmt::format("job {}", job.id);
        continue;
      }
    }
    normal_waits = true;
    no_room.push_back(job.request);
    job.reason = fmt::format("waiting for {} free GPU{} ({} free)", job.request.n, job.request.n == 1 ? "" : "s",
                             r.free.size());
    if (backfill_gpus.empty()) continue;
    // Backfill jobs already stopping for this job free what it needs: wait for them.
    const bool room_coming = now < job.room_until_ms || std::any_of(jobs.begin(), jobs.end(), [&job](const auto& kv) {
      return kv.second.state == JobState::Stopping && kv.second.preempted_for == job.id;
    });
    if (room_coming) {
      job.reason = "waiting for preempted backfill jobs to end";
      continue;
    }
    // Would it fit if the backfill jobs gave their GPUs back?
    LeasedGpus without = leased;
    for (const auto& u : backfill_gpus) without.erase(u);
    const auto r2 = pick(without_jobs_on(*snap, backfill_gpus), without, job.request);
    if (!r2.ok()) continue;
    for (const auto& u : uuids_of(r2.chosen)) {
      for (auto& [id, b] : jobs) {
        if (!b.backfill || b.state != JobState::Running) continue;
        if (std::find(b.gpu_uuids.begin(), b.gpu_uuids.end(), u) == b.gpu_uuids.end()) continue;
        b.state = JobState::Stopping;
        b.stopping_for = StopReason::Preempt;
        b.preempted_for = job.id;
        b.reason = fmt::format("preempted for job {}", job.id);
        persist(b);
        (void)signal_job(b, SIGTERM);  // a wrapper already gone is seen by its pidfd
        log(util::LogLevel::Info, fmt::format("scheduler: preempting backfill job {} for job {}", b.id, job.id));
        for (const auto& g : b.gpu_uuids) backfill_gpus.erase(g);
      }
      leased[u] = fmt::format("claimed by job {}", job.id);
    }
    job.reason = "waiting for preempted backfill jobs to end";
    // Their GPUs may look busy for a moment after they end (NVML lists a process until its
    // context is gone): give the room time to arrive before preempting anything else.
    long long longest_grace = 0;
    for (const auto& [id, b] : jobs) {
      if (b.preempted_for == job.id) longest_grace = std::max(longest_grace, b.grace_ms);
    }
    job.room_until_ms = now + longest_grace + kRoomMarginMs;
  }
  if (normal_waits) return;
  // Backfill: GPUs idle for long enough only, in submission order.
  LeasedGpus not_idle = leased;
  {
    std::lock_guard lock(use_mutex);
    for (const auto& d : snap->devices) {
      if (!d.id.uuid) continue;
      const auto it = use.find(*d.id.uuid);
      if (it == use.end() || it->second.idle_since_ms == 0 ||
          now - it->second.idle_since_ms < opt.config.backfill_idle_ms) {
        not_idle.emplace(*d.id.uuid, "not idle long enough for backfill");
      }
    }
  }
  std::sort(backfill.begin(), backfill.end(), [](const Job* a, const Job* b) { return a->id < b->id; });
  for (Job* job : backfill) {
    if (!within_cap(opt.config.user_gpu_cap, gpus_held_by(job->uid), job->request.n)) continue;
    const auto r = pick(*snap, not_idle, job->request);
    if (!r.ok()) {
      job->reason = fmt::format("waiting for {} GPU{} idle for {}", job->request.n, job->request.n == 1 ? "" : "s",
                                util::format_duration_ms(opt.config.backfill_idle_ms));
      continue;
    }
    const auto uuids = uuids_of(r.chosen);
    if (start_job(*job, r.chosen, uuids)) {
      for (const auto& u : uuids) not_idle[u] = fmt::format("job {}", job->id);
    }
  }
}

void Daemon::State::slow_tick() {
  const long long now = now_ms();
  last_slow_tick_ms = clock();
  std::map<std::string, GpuUse> seen;
  {
    std::lock_guard lock(use_mutex);
    seen = use;
  }
  std::vector<long long> ended;
  for (auto& [id, job] : jobs) {
    if (job.kind != JobKind::Lease || job.state != JobState::Active) continue;
    Runtime& rt = runtime[id];
    if (rt.last_used_ms == 0) rt.last_used_ms = std::max(job.started_ms, now);
    bool used = false;
    for (const auto& u : job.gpu_uuids) {
      const auto it = seen.find(u);
      if (it != seen.end() && (!it->second.pids.empty() || it->second.util.value_or(0) > 0)) used = true;
    }
    if (used) {
      rt.last_used_ms = now;
      rt.warned_ms = 0;
    }
    if (job.expires_ms > 0 && now >= job.expires_ms) {
      ended.push_back(id);
      continue;
    }
    const long long idle = now - rt.last_used_ms;
    if (rt.warned_ms == 0 && idle >= opt.config.lease_idle_limit_ms) {
      rt.warned_ms = now;
      lease_notice(job, false, rt.last_used_ms);
    }
    // The grace period counts from the warning, as the warning says.
    if (rt.warned_ms != 0 && now - rt.warned_ms >= opt.config.lease_idle_grace_ms) {
      lease_notice(job, true, rt.last_used_ms);
      ended.push_back(id);
    }
  }
  for (long long id : ended) {
    Job& job = jobs.at(id);
    remove_leases(job);
    const bool reclaimed = !(job.expires_ms > 0 && now >= job.expires_ms);
    finish(job, reclaimed ? JobState::Reclaimed : JobState::Expired,
           reclaimed ? "its GPUs sat idle" : "its time ran out");
    jobs.erase(id);
  }
  flag_outside(seen);
  check_wrappers_without_pidfd();
}

void Daemon::State::lease_notice(const Job& job, bool reclaimed, long long idle_since) {
  LeaseNotice n;
  n.reclaimed = reclaimed;
  n.id = job.id;
  n.user = job.user;
  n.gpus = job.gpus;
  n.uuids = job.gpu_uuids;
  n.idle_since_unix_ms = idle_since;
  const std::string idle = util::format_duration_ms(now_ms() - idle_since);
  n.summary = reclaimed ? fmt::format("lease {} of {} (GPU {}) reclaimed: unused for {}", job.id, job.user,
                                      indices_text(job.gpus), idle)
                        : fmt::format("lease {} of {} (GPU {}) unused for {}: it will be released in {} unless used",
                                      job.id, job.user, indices_text(job.gpus), idle,
                                      util::format_duration_ms(opt.config.lease_idle_grace_ms));
  log(util::LogLevel::Warning, "scheduler: " + n.summary);
  record_event(job.gpus.empty() ? std::nullopt : std::optional<unsigned>(job.gpus.front()),
               reclaimed ? "lease_reclaimed" : "lease_idle", n.summary);
  if (opt.notify) opt.notify(n);
}

void Daemon::State::flag_outside(const std::map<std::string, GpuUse>& seen) {
  std::set<unsigned> alive;
  for (const auto& [uuid, g] : seen) {
    for (unsigned pid : g.pids) {
      alive.insert(pid);
      auto it = job_of_pid.find(pid);
      if (it == job_of_pid.end()) it = job_of_pid.emplace(pid, job_id_of(pid)).first;
      if (it->second.empty()) continue;
      const auto parsed = util::parse_int(it->second, 1, LLONG_MAX);
      if (!parsed) continue;
      const long long id = *parsed;
      const auto jt = jobs.find(id);
      if (jt == jobs.end() || jt->second.kind != JobKind::Job || jt->second.state != JobState::Running) continue;
      Job& job = jt->second;
      if (std::find(job.gpu_uuids.begin(), job.gpu_uuids.end(), uuid) != job.gpu_uuids.end()) continue;
      if (!flagged.insert({id, g.index}).second) continue;
      job.outside.push_back(g.index);
      persist(job);
      const std::string detail = fmt::format("job {} of {} uses GPU {} (pid {}), which it was not given (it has {})",
                                             id, job.user, g.index, pid, indices_text(job.gpus));
      log(util::LogLevel::Warning, "scheduler: " + detail);
      record_event(g.index, "job_outside", detail);
    }
  }
  std::erase_if(job_of_pid, [&alive](const auto& kv) { return !alive.contains(kv.first); });
}

// Wrappers watched without a pidfd (a kernel without pidfd_open): checked by pid and start time.
void Daemon::State::check_wrappers_without_pidfd() {
  std::vector<long long> gone;
  for (auto& [id, job] : jobs) {
    if (job.kind != JobKind::Job || (job.state != JobState::Running && job.state != JobState::Stopping)) continue;
    const auto rt = runtime.find(id);
    if (rt != runtime.end() && rt->second.pidfd >= 0) continue;
    if (job.shim_pid < 2) {
      // Re-attached before its wrapper had written its pid: look again, without waiting.
      const WrapperProbe w = probe_wrapper(id);
      if (!w.alive) {
        gone.push_back(id);
      } else if (w.pid != 0) {
        job.shim_pid = w.pid;
        job.shim_start = w.start;
        persist(job);
        watch(job, false);
      }
      continue;
    }
    if (rt != runtime.end() && rt->second.child) {
      int status = 0;
      if (::waitpid(job.shim_pid, &status, WNOHANG) == job.shim_pid) {
        rt->second.child = false;
        gone.push_back(id);
      }
      continue;
    }
    const auto start = process_starttime(job.shim_pid);
    if (!start || (job.shim_start != 0 && *start != job.shim_start)) gone.push_back(id);
  }
  for (long long id : gone) on_wrapper_gone(jobs.at(id));
}

}  // namespace tarmac::sched
