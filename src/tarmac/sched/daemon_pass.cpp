// The scheduling pass (daemon_pass.hpp): which queued job starts where (fairness, caps, backfill and
// its preemption), and when a pass is due.
#include "tarmac/sched/daemon_pass.hpp"

#include <signal.h>

#include <algorithm>
#include <climits>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tarmac/sched/daemon_leases.hpp"
#include "tarmac/sched/queue.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::sched {

namespace {
constexpr long long kRetryMs = 1000;       // a pass over a queue that could not start anything, at most this often
constexpr long long kRecheckMs = 25;       // a pass again this soon after a job ends
constexpr long long kMinPassGapMs = 10;    // passes for new submissions, at most this often
constexpr long long kRoomMarginMs = 5000;  // after preempted jobs end, how long their room is awaited
constexpr long long kExternalUnloadMs = 5000;  // an external server's unload, at most (its request's timeout)

const char* plural(unsigned n) { return n == 1 ? "" : "s"; }

// "waiting for 2 free GPUs (1 free)", "waiting for a free MIG device of profile 1g.18gb".
std::string waiting_text(const PickRequest& request, const PickResult& picked) {
  if (request.mig) return "waiting for " + wanted_text(request);
  return fmt::format("waiting for {} ({} free)", wanted_text(request), picked.free.size());
}
}  // namespace

void Pass::recheck_soon(long long now_ms) { recheck_at_ms_ = now_ms + kRecheckMs; }

long long Pass::next_due() const {
  long long next = LLONG_MAX;
  if (recheck_at_ms_ != 0) next = recheck_at_ms_;
  if (dirty_) next = std::min(next, last_pass_ms_ + kMinPassGapMs);
  return next;
}

void Pass::run_if_due(long long now_ms, long long now_unix_ms) {
  const bool recheck = recheck_at_ms_ != 0 && now_ms >= recheck_at_ms_;
  if (recheck) recheck_at_ms_ = 0;
  // A burst of submissions is one pass, not one each; a job's end (recheck) is seen at once.
  if ((dirty_ && now_ms - last_pass_ms_ >= kMinPassGapMs) || recheck || now_ms - last_pass_ms_ >= kRetryMs) {
    run(now_ms, now_unix_ms);
  }
}

void Pass::run(long long now_ms, long long now_unix_ms) {
  dirty_ = false;
  last_pass_ms_ = now_ms;
  std::erase_if(room_until_, [this](const auto& kv) {
    const Job* job = table_.find(kv.first);
    return job == nullptr || job->state != JobState::Queued;
  });
  withdraw_leases(now_ms);
  std::vector<Job*> leases;
  std::vector<const Job*> normal;
  std::vector<Job*> backfill;
  for (auto& [id, j] : table_.jobs()) {
    if (j.state != JobState::Queued) continue;
    if (j.kind == JobKind::Lease) leases.push_back(&j);
    else if (j.backfill) backfill.push_back(&j);
    else normal.push_back(&j);
  }
  if (leases.empty() && normal.empty() && backfill.empty()) return;
  // Every GPU given out to work that is not backfill: nothing could start; skip NVML.
  if (const unsigned count = gpus_.seen_count(); count > 0 && gpus_held_for_good(table_.jobs()) >= count) return;
  if (!gpus_.ensure_backend()) return;
  const auto held = files_.lock_briefly(now_ms);
  if (!held && !files_.stuck(now_ms)) return;  // the loop comes back within kRetryMs
  auto round = begin(now_ms, now_unix_ms);
  if (!round) return;
  // A lease is answered before the queue, as one given at once on the socket would be.
  const bool lease_waits = give_leases(*round, leases);
  const bool normal_waits = start_normal(*round, normal);
  if (lease_waits || normal_waits) return;  // backfill must not take the GPUs they wait for
  start_backfill(*round, std::move(backfill));
}

std::optional<Pass::Round> Pass::begin(long long now_ms, long long now_unix_ms) {
  auto live = files_.live(now_unix_ms);
  if (!live.ok()) {
    log(util::LogLevel::Error, fmt::format("scheduler: {}", live.error().message));
    return std::nullopt;
  }
  auto snap = gpus_.look();
  if (!snap.ok()) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot look at the GPUs: {}", snap.error().message));
    return std::nullopt;
  }
  Round round{.now_ms = now_ms,
              .now_unix_ms = now_unix_ms,
              .snapshot = std::move(*snap),
              .leased = busy_gpus(*live, table_.jobs()),
              .backfill_gpus = preemptible_gpus(table_.jobs()),
              .external = external_backfill(),
              .no_room = {}};
  gpus_.drop_ended_processes(round.snapshot, now_ms);
  for (const auto& h : round.external) round.backfill_gpus.merge(gpus_of(round.snapshot, h));
  return round;
}

void Pass::withdraw_leases(long long now_ms) {
  std::vector<std::pair<long long, std::string>> withdrawn;
  for (const auto& [id, j] : table_.jobs()) {
    if (j.kind != JobKind::Lease || j.state != JobState::Queued) continue;
    const auto wait = lease_waits_.find(id);
    // One read back after a restart has nobody waiting for it either.
    if (wait == lease_waits_.end() || !awaited_ || !awaited_(id)) {
      withdrawn.emplace_back(id, "withdrawn before it was given: nobody waits for it any more");
    } else if (now_ms >= wait->second.until_ms) {
      withdrawn.emplace_back(
          id, fmt::format("not given within {}: still {}", util::format_duration_ms(wait->second.wait_ms), j.reason));
    }
  }
  for (const auto& [id, why] : withdrawn) {
    log(util::LogLevel::Info, fmt::format("scheduler: lease {} {}", id, why));
    (void)table_.end(table_.jobs().at(id), JobState::Cancelled, why);
  }
  std::erase_if(lease_waits_, [this](const auto& kv) {
    const Job* lease = table_.find(kv.first);
    return lease == nullptr || lease->state != JobState::Queued;
  });
}

bool Pass::give_leases(Round& round, const std::vector<Job*>& waiting) {
  bool waits = false;
  for (Job* lease : waiting) {
    // One waiting for a MIG device does not hold backfill off: backfill never takes one.
    if (!give_lease(round, *lease) && !lease->request.mig) waits = true;
  }
  return waits;
}

bool Pass::give_lease(Round& round, Job& lease) {
  const LeaseWait wait = lease_waits_.at(lease.id);  // withdraw_leases ended those without one
  if (!within_cap(config_.user_gpu_cap, table_.gpus_held_by(lease.uid), lease.request.n)) {
    lease.reason = fmt::format("waiting: {} holds {} of the per-user cap of {} GPUs", lease.user,
                               table_.gpus_held_by(lease.uid), config_.user_gpu_cap);
    return true;  // no preemption makes room for it
  }
  const auto picked = pick(round.snapshot, round.leased, lease.request);
  if (picked.ok()) {
    const auto uuids = round.uuids_of(picked);
    if (auto given = activate_lease(table_, files_, lease, picked.chosen, uuids, wait.for_ms, log_); !given.ok()) {
      log(util::LogLevel::Error, fmt::format("scheduler: lease {}: {}", lease.id, given.error().message));
      (void)table_.end(lease, JobState::Failed, given.error().message);  // `lease` is gone now
      return true;
    }
    for (const auto& u : uuids) round.leased[u] = fmt::format("lease {}", lease.id);
    table_.announce(lease, JobEvent::Started);
    return true;
  }
  round.no_room.push_back(lease.request);
  if (!make_room(round, lease)) {
    lease.reason = waiting_text(lease.request, picked);
  }
  return false;
}

bool Pass::start_on(const Round& round, Job& job, const PickResult& picked, LeasedGpus& taken) {
  const auto uuids = round.uuids_of(picked);
  if (!start_(job, picked.chosen, uuids)) return false;
  for (const auto& u : uuids) taken[u] = fmt::format("job {}", job.id);
  return true;
}

bool Pass::start_normal(Round& round, const std::vector<const Job*>& waiting) {
  bool waits = false;
  // Fairness counts the jobs that ended in its window and, up to now, those running.
  for (const Job* j : fair_order(waiting, usage_until(table_.usage(), table_.jobs(), round.now_unix_ms))) {
    if (!start_normal(round, table_.jobs().at(j->id)) && !j->request.mig) waits = true;
  }
  return waits;
}

bool Pass::start_normal(Round& round, Job& job) {
  // A later job asking for as much as one that found no room finds none either.
  if (round.backfill_gpus.empty() && no_room_for(job.request, round.no_room)) return false;
  if (!within_cap(config_.user_gpu_cap, table_.gpus_held_by(job.uid), job.request.n)) {
    job.reason = fmt::format("waiting: {} holds {} of the per-user cap of {} GPUs", job.user,
                             table_.gpus_held_by(job.uid), config_.user_gpu_cap);
    return true;
  }
  const auto picked = pick(round.snapshot, round.leased, job.request);
  if (picked.ok() && start_on(round, job, picked, round.leased)) return true;
  round.no_room.push_back(job.request);
  if (!make_room(round, job)) {
    job.reason = waiting_text(job.request, picked);
  }
  return false;
}

bool Pass::make_room(Round& round, Job& job) {
  const auto until = room_until_.find(job.id);
  if ((until != room_until_.end() && round.now_ms < until->second) || room_coming(table_.jobs(), job.id)) {
    return true;  // the backfill jobs it preempted free what it needs: wait for them (its reason says which)
  }
  // Would it fit if the backfill jobs gave their GPUs back, and the external servers unloaded?
  const auto room = room_in_backfill(round.snapshot, round.leased, table_.jobs(), job.request, round.external);
  if (!room) return false;
  for (long long id : room->backfill) preempt(round, table_.jobs().at(id), job);
  for (const auto& name : room->external) yield_external(round, name, room->uuids, job);
  for (const auto& u : room->uuids) round.leased[u] = fmt::format("claimed by {} {}", to_string(job.kind), job.id);
  job.reason = yield_reason(*room);
  // Their GPUs may look busy for a moment after they end (NVML lists a process until its
  // context is gone): give the room time to arrive before preempting anything else. An external
  // server's unload is bounded by its own timeout (backfill's kUnloadTimeoutMs), not by a grace.
  const long long wait = std::max(longest_grace_for(table_.jobs(), job.id),
                                  room->external.empty() ? 0LL : kExternalUnloadMs);
  room_until_[job.id] = round.now_ms + wait + kRoomMarginMs;
  return true;
}

void Pass::yield_external(Round& round, const std::string& name, const std::vector<std::string>& room,
                          const Job& job) {
  const auto holder = std::find_if(round.external.begin(), round.external.end(),
                                   [&name](const auto& h) { return h.name == name; });
  if (holder == round.external.end()) return;
  const auto on = gpus_of(round.snapshot, *holder);
  std::vector<std::string> uuids;
  for (const auto& u : room) {
    if (on.contains(u)) uuids.push_back(u);
  }
  log(util::LogLevel::Info, fmt::format("scheduler: asking backfill server {} to unload from GPU {} for {} {}", name,
                                        fmt::join(uuids, ","), to_string(job.kind), job.id));
  if (yield_external_) yield_external_(name, uuids, job);
  for (const auto& u : on) round.backfill_gpus.erase(u);
}

void Pass::preempt(Round& round, Job& backfill, const Job& job) {
  backfill.state = JobState::Stopping;
  backfill.stopping_for = StopReason::Preempt;
  backfill.preempted_for = job.id;
  backfill.reason = fmt::format("preempted for {} {}", to_string(job.kind), job.id);
  table_.persist(backfill);
  // The agent's own server (backfill's managed one) is let go of first: its batches stop sending,
  // their requests in flight go back to pending, before the server is signalled.
  if (backfill.agent && before_preempt_) before_preempt_(backfill, job);
  (void)wrappers_.signal(backfill, SIGTERM);  // a wrapper already gone is seen by its pidfd
  log(util::LogLevel::Info, fmt::format("scheduler: preempting backfill job {} for {} {}", backfill.id,
                                        to_string(job.kind), job.id));
  for (const auto& g : backfill.gpu_uuids) round.backfill_gpus.erase(g);
}

void Pass::start_backfill(Round& round, std::vector<Job*> waiting) {
  // Backfill: GPUs idle for long enough only, in submission order.
  LeasedGpus not_idle = round.leased;
  const auto seen = gpus_.seen();
  for (const auto& d : round.snapshot.devices) {
    if (!d.id.uuid) continue;
    const auto it = seen.find(*d.id.uuid);
    if (it == seen.end() || !idle_for(it->second.idle_since_ms, round.now_ms, config_.backfill_idle_ms)) {
      not_idle.emplace(*d.id.uuid, "not idle long enough for backfill");
    }
  }
  std::sort(waiting.begin(), waiting.end(), [](const Job* a, const Job* b) { return a->id < b->id; });
  for (Job* job : waiting) {
    if (!within_cap(config_.user_gpu_cap, table_.gpus_held_by(job->uid), job->request.n)) continue;
    const auto picked = pick(round.snapshot, not_idle, job->request);
    if (!picked.ok()) {
      job->reason = fmt::format("waiting for {} GPU{} idle for {}", job->request.n, plural(job->request.n),
                                util::format_duration_ms(config_.backfill_idle_ms));
      continue;
    }
    (void)start_on(round, *job, picked, not_idle);
  }
}

}  // namespace tarmac::sched
