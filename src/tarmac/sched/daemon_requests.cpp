// The scheduler's socket requests (daemon_requests.hpp, docs/scheduler.md "The socket"): submit,
// jobs, wait, cancel, reserve, release, extend; rights from the peer's uid.
#include "tarmac/sched/daemon_requests.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fmt/format.h>

#include "tarmac/sched/daemon_common.hpp"
#include "tarmac/sched/queue.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::sched {

using detail::failure;
using detail::indices_text;
using detail::user_name;
using json = nlohmann::json;

namespace {

constexpr long long kHour = 3600LL * 1000;  // `tarmac jobs` shows what ended this long ago
constexpr long long kMaxLeaseWaitMs = 10 * 60 * 1000;  // a reserve waits for backfill at most this long

json job_answer(const Job& job) { return json{{"ok", true}, {"job", to_json(job)}}; }

std::optional<std::vector<std::string>> string_list(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string()) return std::nullopt;
    out.push_back(v.get<std::string>());
  }
  return out;
}

// The job runs as the peer was when it connected: its uid, gid and groups (SO_PEERCRED,
// SO_PEERGROUPS), never what the passwd and group files say about its name.
void take_credentials(const Client& c, Job& job) {
  job.uid = c.peer().uid;
  job.gid = c.peer().gid;
  job.groups = c.peer().groups;
  job.user = user_name(job.uid);
}

std::optional<json> check_owner(const Client& c, const Job& job, const char* action) {
  if (c.uid() == 0 || c.uid() == job.uid) return std::nullopt;
  return failure("denied", fmt::format("{} {} is not yours: it belongs to {}; only its owner or root may {} it",
                                       to_string(job.kind), job.id, job.user, action));
}

// The request's MIG profile ("mig": a profile name, "" for any, absent or null for GPUs) into
// `request`, or a failure answer when it is not one or the rest of the request does not fit it.
std::optional<json> read_mig(const json& req, PickRequest& request) {
  const auto it = req.find("mig");
  if (it == req.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return failure("invalid", "mig must be a MIG profile name or \"\" (any)");
  request.mig = it->get<std::string>();
  if (auto bad = mig_request_error(request)) return failure("invalid", *bad);
  return std::nullopt;
}

// What a submission asks to run, and how (not who, nor how many GPUs); a failure answer when a
// field is missing or out of bounds.
std::variant<Job, json> read_submission(const json& req, const SchedulerConfig& config) {
  Job job;
  job.kind = JobKind::Job;
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
  if (job.grace_ms > config.max_grace_ms) {
    // Refused rather than shortened: the submitter learns at once that the job will not get it.
    return failure("invalid", fmt::format("--grace {} is longer than this agent allows, {} (scheduler.max_grace)",
                                          util::format_duration_ms(job.grace_ms),
                                          util::format_duration_ms(config.max_grace_ms)));
  }
  job.backfill = json_field<bool>(req, "backfill").value_or(false);
  if (auto bad = read_mig(req, job.request)) return *bad;
  if (job.backfill && job.request.mig) {
    return failure("invalid", "--backfill runs on whole idle GPUs, not on MIG devices: leave out one of them");
  }
  job.uuids = json_field<bool>(req, "uuids").value_or(false);
  job.detach = json_field<bool>(req, "detach").value_or(false);
  return job;
}

}  // namespace

json Requests::answer(Client& c, const json& req, const Defer& defer) {
  const auto op = json_field<std::string>(req, "op").value_or("");
  if (op == "submit") return submit(c, req);
  if (op == "jobs") return list(req);
  if (op == "wait") return wait_for(c, req);
  if (op == "cancel") return cancel(c, req);
  if (op == "reserve") return reserve(c, req);
  if (op == "release") return release(c, req);
  if (op == "extend") return extend(c, req);
  if (more_) {
    if (auto answered = more_(c.peer(), c.fds, req, defer)) return *answered;
  }
  return failure("invalid", fmt::format("unknown request '{}'", op));
}

std::optional<json> Requests::check_size(uid_t uid, unsigned n) {
  if (n == 0) return failure("invalid", "-n must be at least 1");
  const unsigned count = gpus_.known_count();
  if (count > 0 && n > count) {
    return failure("invalid", fmt::format("-n {} asks for more GPUs than there are ({})", n, count));
  }
  if (config_.user_gpu_cap > 0 && n > config_.user_gpu_cap) {
    return failure("invalid", fmt::format("-n {} is more than the per-user cap of {} GPUs (scheduler.user_gpu_cap)",
                                          n, config_.user_gpu_cap));
  }
  if (::geteuid() != 0 && uid != ::geteuid()) {
    return failure("denied", fmt::format("this agent runs as {} and can only start that user's jobs; run the agent as "
                                         "root to serve everyone",
                                         user_name(::geteuid())));
  }
  return std::nullopt;
}

std::optional<json> Requests::check_queued(uid_t uid) const {
  const unsigned cap = config_.user_queued_cap;
  if (uid == 0 || cap == 0) return std::nullopt;
  const unsigned queued = table_.queued_of(uid);
  if (queued < cap) return std::nullopt;
  return failure("busy", fmt::format("{} already has {} jobs waiting in the queue, the per-user cap "
                                     "(scheduler.user_queued_cap); wait for some to start, or cancel some",
                                     user_name(uid), queued));
}

json Requests::submit(Client& c, const json& req) {
  const unsigned n = json_field<unsigned>(req, "n").value_or(1);
  if (auto bad = check_size(c.uid(), n)) return *bad;
  if (auto full = check_queued(c.uid())) return *full;
  auto read = read_submission(req, config_);
  if (auto* bad = std::get_if<json>(&read)) return *bad;
  Job job = std::move(std::get<Job>(read));
  job.request.n = n;
  if (job.request.mig && n != 1) return failure("invalid", *mig_request_error(job.request));
  take_credentials(c, job);
  if (!job.detach && c.fds.size() < 2) {
    return failure("invalid", "an attached job needs the caller's stdout and stderr (or --detach)");
  }
  return queue(c, std::move(job));
}

json Requests::queue(Client& c, Job job) {
  std::vector<util::Fd> output;
  if (!job.detach) {
    // Its stdout and stderr are the job's until it starts; any other descriptor is closed with the request.
    for (std::size_t i = 0; i < 2; ++i) output.push_back(std::move(c.fds[i]));
  }
  auto recorded = record(std::move(job), std::move(output));
  if (auto* bad = std::get_if<json>(&recorded)) return *bad;
  const Job& stored = *std::get<Job*>(recorded);
  if (!stored.detach) c.watching = stored.id;
  return job_answer(stored);
}

std::variant<Job*, json> Requests::record(Job job, std::vector<util::Fd> output) {
  job.submitted_ms = util::wall_ms();
  job.state = JobState::Queued;
  job.reason = "queued";
  if (auto r = table_.insert(job); !r.ok()) {
    return failure("io", fmt::format("cannot record the job in the store: {}", r.error().message));
  }
  if (!table_.save_env(job)) {
    job.state = JobState::Failed;
    job.ended_ms = util::wall_ms();
    job.reason = fmt::format("cannot keep its environment in {}", table_.jobs_dir());
    table_.persist(job);
    return failure("io", job.reason);
  }
  if (job.detach) {
    job.log = table_.log_file(job.id);
    table_.persist(job);
  } else {
    wrappers_.hold_output(job.id, std::move(output));
  }
  Job& stored = table_.add(std::move(job));
  pass_.want();
  return &stored;
}

json Requests::list(const json& req) {
  auto rows = table_.list(json_field<bool>(req, "all").value_or(false), util::wall_ms() - kHour);
  if (!rows.ok()) return failure("io", rows.error().message);
  json out = json::array();
  for (const auto& j : *rows) {
    const Job* live = table_.find(j.id);
    out.push_back(to_json(live != nullptr ? *live : j));
  }
  return json{{"ok", true}, {"jobs", out}};
}

std::variant<Job*, json> Requests::find_job(const json& req, std::optional<JobKind> kind) {
  const auto id = json_field<long long>(req, "id");
  if (!id) return failure("invalid", "no job id");
  if (Job* job = table_.find(*id)) {
    if (kind && job->kind != *kind) {
      return failure("invalid", fmt::format("{} is a {}, not a {}", *id, to_string(job->kind), to_string(*kind)));
    }
    return job;
  }
  if (const auto ended = table_.ended(*id)) {
    return failure("ended",
                   fmt::format("{} {} has already ended ({})", to_string(ended->kind), *id, to_string(ended->state)));
  }
  return failure("invalid", fmt::format("no job or lease {}", *id));
}

json Requests::wait_for(Client& c, const json& req) {
  const auto id = json_field<long long>(req, "id");
  if (id) {
    if (const Job* job = table_.find(*id)) {
      c.watching = *id;
      return job_answer(*job);
    }
    if (const auto ended = table_.ended(*id)) return job_answer(*ended);  // the connection closes
  }
  return failure("invalid", fmt::format("no job {}", id.value_or(0)));
}

json Requests::cancel(Client& c, const json& req) {
  auto found = find_job(req, std::nullopt);
  if (auto* bad = std::get_if<json>(&found)) return *bad;
  Job& job = *std::get<Job*>(found);
  if (job.kind == JobKind::Lease) return end_lease_for(c, job);
  if (auto denied = check_owner(c, job, "cancel")) return *denied;
  if (job.state == JobState::Queued) return job_answer(table_.end(job, JobState::Cancelled, "cancelled before it started"));
  end_job(job, "cancelled by " + user_name(c.uid()));
  return job_answer(job);
}

void Requests::end_job(Job& job, const std::string& why) {
  if (job.state == JobState::Queued) {
    (void)table_.end(job, JobState::Cancelled, why);  // `job` is gone from the table now
    return;
  }
  if (job.state == JobState::Stopping && job.stopping_for == StopReason::Cancel) return;
  job.state = JobState::Stopping;
  job.stopping_for = StopReason::Cancel;
  job.reason = why;
  table_.persist(job);
  (void)wrappers_.signal(job, SIGTERM);
}

json Requests::reserve(Client& c, const json& req) {
  const unsigned n = json_field<unsigned>(req, "n").value_or(1);
  if (auto bad = check_size(c.uid(), n)) return *bad;
  const auto for_ms = json_field<long long>(req, "for_ms");
  if (!for_ms || *for_ms <= 0) return failure("invalid", "--for must be a duration of more than 0");
  // A client that sends none (older ones) is answered at once, as it expects.
  const long long wait_ms = json_field<long long>(req, "wait_ms").value_or(0);
  if (wait_ms < 0 || wait_ms > kMaxLeaseWaitMs) {
    return failure("invalid", fmt::format("--wait must be between 0 and {}", util::format_duration_ms(kMaxLeaseWaitMs)));
  }
  const unsigned holds = table_.gpus_held_by(c.uid());
  const unsigned awaited = gpus_awaited_by(table_.jobs(), c.uid());
  if (!within_cap(config_.user_gpu_cap, holds + awaited, n)) {
    return failure("busy", fmt::format("{} already holds {} GPUs{} of the per-user cap of {}", user_name(c.uid()),
                                       holds, awaited > 0 ? fmt::format(" and waits for {} more", awaited) : "",
                                       config_.user_gpu_cap));
  }
  if (!gpus_.ensure_backend()) return failure("io", "NVML cannot be used");
  Job job;
  job.kind = JobKind::Lease;
  take_credentials(c, job);
  job.name = json_field<std::string>(req, "name").value_or("");
  job.request = PickRequest{.n = n,
                            .min_free_bytes = json_field<std::uint64_t>(req, "min_free").value_or(0),
                            .max_util_pct = std::min(100U, json_field<unsigned>(req, "max_util").value_or(100)),
                            .mig = std::nullopt};
  if (auto bad = read_mig(req, job.request)) return *bad;
  auto held = files_.lock_for_request();  // held until the lease files are written
  if (!held.ok()) return failure("io", held.error().message);
  auto live = files_.live(util::wall_ms());
  if (!live.ok()) return failure("io", live.error().message);
  auto snap = gpus_.look();
  if (!snap.ok()) return failure("io", fmt::format("cannot look at the GPUs: {}", snap.error().message));
  const LeasedGpus busy = busy_gpus(*live, table_.jobs());
  const auto picked = pick(*snap, busy, job.request);
  if (picked.ok()) return give_lease(std::move(job), picked.chosen, given_uuids(*snap, picked), *for_ms);
  // Backfill holds what it needs: backfill yields to a lease as to a normal job.
  const auto room = room_in_backfill(*snap, busy, table_.jobs(), job.request, pass_.external_backfill());
  if (room && wait_ms > 0) {
    return wait_for_backfill(c, std::move(job), *room,
                             Pass::LeaseWait{.until_ms = clock_() + wait_ms, .wait_ms = wait_ms, .for_ms = *for_ms});
  }
  // Nothing is recorded for a lease that could not be given.
  std::string why = job.request.mig ? fmt::format("no {}", wanted_text(job.request).substr(2))
                                    : fmt::format("no {}: {} free of {}", wanted_text(job.request), picked.free.size(),
                                                  snap->devices.size());
  for (const auto& e : picked.excluded) {
    const std::string where = e.mig ? fmt::format("GPU {} MIG {}", e.index, *e.mig) : fmt::format("GPU {}", e.index);
    why += fmt::format("\n  {}: {}: {}", where, to_string(e.reason), e.detail);
  }
  if (room) why += fmt::format("\n  backfill could yield GPU {}: reserve --wait D takes it back", indices_text(room->chosen));
  return failure("busy", why);
}

json Requests::give_lease(Job job, const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids,
                          long long for_ms) {
  job.submitted_ms = util::wall_ms();
  if (auto ins = table_.insert(job); !ins.ok()) return failure("io", ins.error().message);
  if (auto given = activate_lease(table_, files_, job, chosen, uuids, for_ms, log_); !given.ok()) {
    job.state = JobState::Failed;
    job.ended_ms = util::wall_ms();
    job.reason = given.error().message;
    table_.persist(job);
    return failure("io", job.reason);
  }
  idle_.given(job.id, clock_());
  return job_answer(table_.add(std::move(job)));
}

json Requests::wait_for_backfill(Client& c, Job job, const BackfillRoom& room, const Pass::LeaseWait& wait) {
  job.submitted_ms = util::wall_ms();
  job.state = JobState::Queued;
  job.reason = yield_reason(room);
  if (auto ins = table_.insert(job); !ins.ok()) return failure("io", ins.error().message);
  const Job& stored = table_.add(std::move(job));
  // The client hears "started" or "ended" as a job's follower does; the pass withdraws the lease
  // when it stops following or the wait runs out.
  c.watching = stored.id;
  pass_.lease_waits(stored.id, wait);
  pass_.want();
  if (log_) {
    log_(util::LogLevel::Info, fmt::format("scheduler: lease {} of {} waits up to {}: {}", stored.id, stored.user,
                                           util::format_duration_ms(wait.wait_ms), stored.reason));
  }
  return job_answer(stored);
}

json Requests::release(Client& c, const json& req) {
  auto found = find_job(req, JobKind::Lease);
  if (auto* bad = std::get_if<json>(&found)) return *bad;
  return end_lease_for(c, *std::get<Job*>(found));
}

json Requests::end_lease_for(const Client& c, Job& job) {
  if (auto denied = check_owner(c, job, "release")) return *denied;
  if (job.state == JobState::Queued) return job_answer(table_.end(job, JobState::Cancelled, "cancelled before it was given"));
  return job_answer(end_lease(table_, files_, job, JobState::Released, "released by " + user_name(c.uid()), clock_()));
}

json Requests::extend(Client& c, const json& req) {
  auto found = find_job(req, JobKind::Lease);
  if (auto* bad = std::get_if<json>(&found)) return *bad;
  Job& job = *std::get<Job*>(found);
  if (auto denied = check_owner(c, job, "extend")) return *denied;
  if (job.state == JobState::Queued) {
    return failure("invalid", fmt::format("lease {} has not been given yet: its time starts when it is", job.id));
  }
  const auto by = json_field<long long>(req, "by_ms");
  if (!by || *by <= 0) return failure("invalid", "the extension must be a duration of more than 0");
  // The lease holds its new expiry only once its files say so: a lease the agent thinks extended
  // while its files expire would be handed to someone else by an agentless pick.
  Job extended = job;
  extended.expires_ms = std::max(job.expires_ms, util::wall_ms()) + *by;
  auto held = files_.lock_for_request();
  if (!held.ok()) return failure("io", held.error().message);
  if (auto r = files_.write_for(extended, 0, 0); !r.ok()) return failure("io", r.error().message);
  job.expires_ms = extended.expires_ms;
  table_.persist(job);
  return job_answer(job);
}

}  // namespace tarmac::sched
