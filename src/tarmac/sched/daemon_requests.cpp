// The scheduler's socket requests (daemon_state.hpp, docs/scheduler.md "The socket"): submit,
// jobs, wait, cancel, reserve, release, extend; rights from the peer's uid.
#include <signal.h>

#include <algorithm>
#include <variant>

#include "tarmac/sched/daemon_state.hpp"
#include "tarmac/sched/queue.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::sched {

using namespace detail;

json Daemon::State::handle(Client& c, const json& req) {
  const auto op = json_field<std::string>(req, "op").value_or("");
  if (op == "submit") return submit(c, req);
  if (op == "jobs") return list(req);
  if (op == "wait") return wait_for(c, req);
  if (op == "cancel") return cancel(c, req);
  if (op == "reserve") return reserve(c, req);
  if (op == "release") return release(c, req);
  if (op == "extend") return extend(c, req);
  return failure("invalid", fmt::format("unknown request '{}'", op));
}

unsigned Daemon::State::known_gpu_count() {
  {
    std::lock_guard lock(use_mutex);
    if (gpu_count > 0) return gpu_count;
  }
  if (!ensure_backend()) return 0;
  auto snap = backend->snapshot(gpu::SnapshotOptions{});
  return snap.ok() ? static_cast<unsigned>(snap->devices.size()) : 0;
}

// The checks a job or a lease of `n` GPUs must pass before it is queued; nullopt when it does.
std::optional<json> Daemon::State::check_request(uid_t uid, unsigned n) {
  if (n == 0) return failure("invalid", "-n must be at least 1");
  const unsigned count = known_gpu_count();
  if (count > 0 && n > count) {
    return failure("invalid", fmt::format("-n {} asks for more GPUs than there are ({})", n, count));
  }
  if (opt.config.user_gpu_cap > 0 && n > opt.config.user_gpu_cap) {
    return failure("invalid", fmt::format("-n {} is more than the per-user cap of {} GPUs (scheduler.user_gpu_cap)",
                                          n, opt.config.user_gpu_cap));
  }
  if (::geteuid() != 0 && uid != ::geteuid()) {
    return failure("denied", fmt::format("this agent runs as {} and can only start that user's jobs; run the agent as "
                                         "root to serve everyone",
                                         user_name(::geteuid())));
  }
  return std::nullopt;
}

// The job runs as the peer was when it connected: its uid, gid and groups (SO_PEERCRED,
// SO_PEERGROUPS), never what the passwd and group files say about its name.
void Daemon::State::take_credentials(const Client& c, Job& job) {
  job.uid = c.peer().uid;
  job.gid = c.peer().gid;
  job.groups = c.peer().groups;
  job.user = user_name(job.uid);
}

std::optional<json> Daemon::State::check_queued(uid_t uid) const {
  const unsigned cap = opt.config.user_queued_cap;
  if (uid == 0 || cap == 0) return std::nullopt;
  const auto queued = static_cast<unsigned>(std::count_if(jobs.begin(), jobs.end(), [uid](const auto& kv) {
    return kv.second.uid == uid && kv.second.kind == JobKind::Job && kv.second.state == JobState::Queued;
  }));
  if (queued < cap) return std::nullopt;
  return failure("busy", fmt::format("{} already has {} jobs waiting in the queue, the per-user cap "
                                     "(scheduler.user_queued_cap); wait for some to start, or cancel some",
                                     user_name(uid), queued));
}

json Daemon::State::submit(Client& c, const json& req) {
  Job job;
  job.kind = JobKind::Job;
  take_credentials(c, job);
  job.request.n = json_field<unsigned>(req, "n").value_or(1);
  if (auto bad = check_request(c.uid(), job.request.n)) return *bad;
  if (auto full = check_queued(c.uid())) return *full;
  auto argv = string_list(req, "argv");
  if (!argv || argv->empty()) return failure("invalid", "no command: argv must be a non-empty list of strings");
  job.argv = *argv;
  job.path = json_field<std::string>(req, "path").value_or(job.argv.front());
  if (job.path.empty() || job.path.front() != '/') {
    return failure("invalid", fmt::format("the command's path '{}' must be absolute", job.path));
  }
  job.env = string_list(req, "env").value_or(std::vector<std::string>{});
  job.cwd = json_field<std::string>(req, "cwd").value_or("/");
  job.name = json_field<std::string>(req, "name").value_or("");
  job.request.min_free_bytes = json_field<std::uint64_t>(req, "min_free").value_or(0);
  job.request.max_util_pct = std::min(100U, json_field<unsigned>(req, "max_util").value_or(100));
  if (auto t = json_field<long long>(req, "time_ms")) {
    if (*t <= 0) return failure("invalid", "--time must be more than 0");
    job.time_ms = *t;
  }
  job.grace_ms = json_field<long long>(req, "grace_ms").value_or(kDefaultGraceMs);
  if (job.grace_ms < 0) return failure("invalid", "--grace must not be negative");
  if (job.grace_ms > opt.config.max_grace_ms) {
    // Refused rather than shortened: the submitter learns at once that the job will not get it.
    return failure("invalid", fmt::format("--grace {} is longer than this agent allows, {} (scheduler.max_grace)",
                                          util::format_duration_ms(job.grace_ms),
                                          util::format_duration_ms(opt.config.max_grace_ms)));
  }
  job.backfill = json_field<bool>(req, "backfill").value_or(false);
  job.uuids = json_field<bool>(req, "uuids").value_or(false);
  job.detach = json_field<bool>(req, "detach").value_or(false);
  if (!job.detach && c.fds.size() < 2) {
    return failure("invalid", "an attached job needs the caller's stdout and stderr (or --detach)");
  }
  job.submitted_ms = now_ms();
  job.state = JobState::Queued;
  job.reason = "queued";
  if (auto r = db->insert(job); !r.ok()) {
    return failure("io", fmt::format("cannot record the job in the store: {}", r.error().message));
  }
  if (!save_env(job)) {
    job.state = JobState::Failed;
    job.ended_ms = now_ms();
    job.reason = fmt::format("cannot keep its environment in {}", jobs_dir);
    persist(job);
    return failure("io", job.reason);
  }
  if (job.detach) {
    job.log = log_file(job.id);
    persist(job);
  } else {
    // Its stdout and stderr are the job's until it starts; any other descriptor is closed with the request.
    for (std::size_t i = 0; i < 2; ++i) runtime[job.id].output_fds.push_back(c.fds[i].release());
    c.watching = job.id;
  }
  auto& stored = jobs.emplace(job.id, std::move(job)).first->second;
  dirty = true;
  return json{{"ok", true}, {"job", to_json(stored)}};
}

json Daemon::State::list(const json& req) {
  auto rows = db->list(json_field<bool>(req, "all").value_or(false), now_ms() - kHour);
  if (!rows.ok()) return failure("io", rows.error().message);
  json out = json::array();
  for (const auto& j : *rows) {
    const auto live = jobs.find(j.id);
    out.push_back(to_json(live != jobs.end() ? live->second : j));
  }
  return json{{"ok", true}, {"jobs", out}};
}

// The job `id` of the request, live or from the store; a failure answer when there is none.
std::variant<Job*, json> Daemon::State::find_job(const json& req, std::optional<JobKind> kind) {
  const auto id = json_field<long long>(req, "id");
  if (!id) return failure("invalid", "no job id");
  if (auto it = jobs.find(*id); it != jobs.end()) {
    if (kind && it->second.kind != *kind) {
      return failure("invalid", fmt::format("{} is a {}, not a {}", *id, to_string(it->second.kind), to_string(*kind)));
    }
    return &it->second;
  }
  auto all = db->list(true, 0);
  if (all.ok()) {
    for (const auto& j : *all) {
      if (j.id == *id) {
        return failure("ended", fmt::format("{} {} has already ended ({})", to_string(j.kind), *id, to_string(j.state)));
      }
    }
  }
  return failure("invalid", fmt::format("no job or lease {}", *id));
}

std::optional<json> Daemon::State::check_owner(const Client& c, const Job& job, const char* action) {
  if (c.uid() == 0 || c.uid() == job.uid) return std::nullopt;
  return failure("denied", fmt::format("{} {} is not yours: it belongs to {}; only its owner or root may {} it",
                                       to_string(job.kind), job.id, job.user, action));
}

json Daemon::State::wait_for(Client& c, const json& req) {
  const auto id = json_field<long long>(req, "id");
  if (id) {
    if (auto it = jobs.find(*id); it != jobs.end()) {
      c.watching = *id;
      return json{{"ok", true}, {"job", to_json(it->second)}};
    }
    auto all = db->list(true, 0);
    if (all.ok()) {
      for (const auto& j : *all) {
        if (j.id == *id) return json{{"ok", true}, {"job", to_json(j)}};  // ended: the connection closes
      }
    }
  }
  return failure("invalid", fmt::format("no job {}", id.value_or(0)));
}

json Daemon::State::cancel(Client& c, const json& req) {
  auto found = find_job(req, std::nullopt);
  if (std::holds_alternative<json>(found)) return std::get<json>(found);
  Job& job = *std::get<Job*>(found);
  if (auto denied = check_owner(c, job, "cancel")) return *denied;
  if (job.kind == JobKind::Lease) return end_lease(job, JobState::Released, "released by " + user_name(c.uid()));
  if (job.state == JobState::Queued) {
    const long long id = job.id;
    finish(job, JobState::Cancelled, "cancelled before it started");
    json out = {{"ok", true}, {"job", to_json(job)}};
    jobs.erase(id);
    return out;
  }
  job.state = JobState::Stopping;
  job.stopping_for = StopReason::Cancel;
  job.reason = "cancelled by " + user_name(c.uid());
  persist(job);
  (void)signal_job(job, SIGTERM);
  return json{{"ok", true}, {"job", to_json(job)}};
}

json Daemon::State::end_lease(Job& job, JobState state, const std::string& reason) {
  remove_leases(job);
  const long long id = job.id;
  finish(job, state, reason);
  json out = {{"ok", true}, {"job", to_json(job)}};
  jobs.erase(id);
  return out;
}

json Daemon::State::reserve(Client& c, const json& req) {
  const unsigned n = json_field<unsigned>(req, "n").value_or(1);
  if (auto bad = check_request(c.uid(), n)) return *bad;
  const auto for_ms = json_field<long long>(req, "for_ms");
  if (!for_ms || *for_ms <= 0) return failure("invalid", "--for must be a duration of more than 0");
  if (!within_cap(opt.config.user_gpu_cap, gpus_held_by(c.uid()), n)) {
    return failure("busy", fmt::format("{} already holds {} GPUs of the per-user cap of {}", user_name(c.uid()),
                                       gpus_held_by(c.uid()), opt.config.user_gpu_cap));
  }
  if (!ensure_backend()) return failure("io", "NVML cannot be used");
  PickRequest request{.n = n,
                      .min_free_bytes = json_field<std::uint64_t>(req, "min_free").value_or(0),
                      .max_util_pct = std::min(100U, json_field<unsigned>(req, "max_util").value_or(100))};
  auto held = dir->lock(kLockWaitMs);
  if (!held.ok()) return failure("io", held.error().message);
  auto live = dir->live_leases(now_ms());
  if (!live.ok()) return failure("io", live.error().message);
  auto snap = look();
  if (!snap.ok()) return failure("io", fmt::format("cannot look at the GPUs: {}", snap.error().message));
  const LeasedGpus leased = busy_gpus(*live);
  const auto r = pick(*snap, leased, request);
  if (!r.ok()) {
    // Nothing is recorded for a lease that could not be given.
    std::string why = fmt::format("no {} free GPU{}: {} free of {}", n, n == 1 ? "" : "s", r.free.size(),
                                  snap->devices.size());
    for (const auto& e : r.excluded) why += fmt::format("\n  GPU {}: {}: {}", e.index, to_string(e.reason), e.detail);
    return failure("busy", why);
  }
  Job job;
  job.kind = JobKind::Lease;
  take_credentials(c, job);
  job.name = json_field<std::string>(req, "name").value_or("");
  job.request = request;
  job.submitted_ms = now_ms();
  job.started_ms = job.submitted_ms;
  job.expires_ms = job.submitted_ms + *for_ms;
  job.state = JobState::Active;
  job.gpus = r.chosen;
  for (unsigned index : r.chosen) {
    for (const auto& d : snap->devices) {
      if (d.id.index == index) job.gpu_uuids.push_back(d.id.uuid.value_or(""));
    }
  }
  if (auto ins = db->insert(job); !ins.ok()) return failure("io", ins.error().message);
  std::vector<Lease> leases;
  for (const auto& u : job.gpu_uuids) {
    leases.push_back(Lease{.uuid = u, .pid = 0, .starttime = 0, .expires_unix_ms = job.expires_ms,
                           .job_id = std::to_string(job.id), .user = job.user});
  }
  if (auto w = dir->write(leases); !w.ok()) {
    job.state = JobState::Failed;
    job.ended_ms = now_ms();
    job.reason = w.error().message;
    persist(job);
    return failure("io", w.error().message);
  }
  runtime[job.id].last_used_ms = now_ms();
  auto& stored = jobs.emplace(job.id, std::move(job)).first->second;
  log(util::LogLevel::Info, fmt::format("scheduler: lease {} of {}: GPU {} until {}", stored.id, stored.user,
                                         indices_text(stored.gpus), util::format_duration_ms(*for_ms)));
  return json{{"ok", true}, {"job", to_json(stored)}};
}

json Daemon::State::release(Client& c, const json& req) {
  auto found = find_job(req, JobKind::Lease);
  if (std::holds_alternative<json>(found)) return std::get<json>(found);
  Job& job = *std::get<Job*>(found);
  if (auto denied = check_owner(c, job, "release")) return *denied;
  return end_lease(job, JobState::Released, "released by " + user_name(c.uid()));
}

json Daemon::State::extend(Client& c, const json& req) {
  auto found = find_job(req, JobKind::Lease);
  if (std::holds_alternative<json>(found)) return std::get<json>(found);
  Job& job = *std::get<Job*>(found);
  if (auto denied = check_owner(c, job, "extend")) return *denied;
  const auto by = json_field<long long>(req, "by_ms");
  if (!by || *by <= 0) return failure("invalid", "the extension must be a duration of more than 0");
  job.expires_ms = std::max(job.expires_ms, now_ms()) + *by;
  std::vector<Lease> leases;
  for (const auto& u : job.gpu_uuids) {
    leases.push_back(Lease{.uuid = u, .pid = 0, .starttime = 0, .expires_unix_ms = job.expires_ms,
                           .job_id = std::to_string(job.id), .user = job.user});
  }
  auto held = dir->lock(kLockWaitMs);
  if (!held.ok()) return failure("io", held.error().message);
  if (auto r = dir->write(leases); !r.ok()) return failure("io", r.error().message);
  persist(job);
  return json{{"ok", true}, {"job", to_json(job)}};
}

}  // namespace tarmac::sched
