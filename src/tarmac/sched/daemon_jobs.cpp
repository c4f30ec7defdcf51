// The scheduler's jobs (daemon_state.hpp): starting one under its wrapper, seeing it end, the
// scheduling pass (fairness, backfill, preemption), idle leases and jobs outside their GPUs.
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "tarmac/sched/daemon_state.hpp"
#include "tarmac/sched/queue.hpp"
#include "tarmac/sched/supervise.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/units.hpp"

extern char** environ;

namespace tarmac::sched {

using namespace detail;

// The submitter's environment is kept beside the job files (mode 0600 in a 0700 directory), not in
// the store, which other users may read.
bool Daemon::State::save_env(const Job& job) {
  return util::write_file_atomically(file(job.id, "env"), util::json_text(json(job.env))) &&
         ::chmod(file(job.id, "env").c_str(), 0600) == 0;
}

void Daemon::State::load_env(Job& job) {
  const auto text = util::read_file(file(job.id, "env"));
  const json env = text ? json::parse(*text, nullptr, false) : json();
  job.env.clear();
  if (!env.is_array()) return;
  for (const auto& v : env) {
    if (v.is_string()) job.env.push_back(v.get<std::string>());
  }
}

void Daemon::State::persist(const Job& job) {
  if (auto r = db->save(job); !r.ok()) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot record job {}: {}", job.id, r.error().message));
  }
}

void Daemon::State::record_event(std::optional<unsigned> gpu, const std::string& kind, const std::string& detail) {
  if (auto r = db->event(now_ms(), gpu, kind, detail); !r.ok()) {
    log(util::LogLevel::Warning, fmt::format("scheduler: cannot record event {}: {}", kind, r.error().message));
  }
}

// The files of one run of the job (a preempted job is started again with new ones).
void Daemon::State::remove_job_files(long long id) {
  for (const char* ext : {"json", "lock", "run", "exit"}) ::unlink(file(id, ext).c_str());
}

void Daemon::State::tell_watchers(const Job& job, const char* event) {
  const std::string line = util::json_text(json{{"event", event}, {"job", to_json(job)}});
  for (auto& c : clients) {
    if (c->watching != job.id) continue;
    send(*c, line);
    if (has_ended(job.state)) c->close_when_written();
  }
}

void Daemon::State::finish(Job& job, JobState state, const std::string& reason) {
  job.state = state;
  if (!reason.empty()) job.reason = reason;
  if (job.ended_ms == 0) job.ended_ms = now_ms();
  job.shim_pid = 0;
  ::unlink(file(job.id, "env").c_str());
  if (job.kind == JobKind::Job && job.started_ms > 0) {
    usage[job.uid] += static_cast<long long>(job.gpus.size()) * std::max(0LL, job.ended_ms - job.started_ms);
  }
  persist(job);
  tell_watchers(job, "ended");
  if (auto it = runtime.find(job.id); it != runtime.end()) {
    if (it->second.pidfd >= 0) ::close(it->second.pidfd);
    for (int fd : it->second.output_fds) ::close(fd);
    runtime.erase(it);
  }
  dirty = true;
}

void Daemon::State::remove_leases(const Job& job) {
  if (job.gpu_uuids.empty()) return;
  auto held = lock_dir_briefly();
  if (!held) return;  // they go stale with the wrapper, or at their expiry
  dir->remove(job.gpu_uuids, std::to_string(job.id));
}

std::optional<LeaseDir::DirLock> Daemon::State::lock_dir_briefly() {
  auto held = dir->lock(kLockWaitMs);
  if (held.ok()) return std::move(*held);
  const long long now = now_ms();
  if (now - lock_warned_ms >= 60 * 1000) {
    lock_warned_ms = now;
    log(util::LogLevel::Warning, fmt::format("scheduler: {}", held.error().message));
  }
  return std::nullopt;
}

void Daemon::State::watch(Job& job, bool child) {
  Runtime& rt = runtime[job.id];
  rt.child = child;
  if (rt.pidfd >= 0 || job.shim_pid < 2) return;
  rt.pidfd = pidfd_open(job.shim_pid);
  if (rt.pidfd < 0) {
    if (errno != ESRCH) {
      log(util::LogLevel::Warning, fmt::format("scheduler: job {}: cannot watch its wrapper (pid {}) by a pidfd: {}; "
                                                "checked by pid and start time instead",
                                                job.id, job.shim_pid, std::strerror(errno)));
    }
    return;
  }
  // The pid came from a file or the store: make sure the pidfd is the wrapper's, not a reuse's.
  if (job.shim_start != 0 && process_starttime(job.shim_pid) != job.shim_start) {
    log(util::LogLevel::Warning, fmt::format("scheduler: job {}: pid {} is no longer its wrapper", job.id, job.shim_pid));
    ::close(rt.pidfd);
    rt.pidfd = -1;
    job.shim_pid = 0;
  }
}

bool Daemon::State::signal_job(Job& job, int sig) {
  const auto rt = runtime.find(job.id);
  if (rt != runtime.end() && rt->second.pidfd >= 0) {
    if (pidfd_send_signal(rt->second.pidfd, sig) == 0) return true;
    if (errno != ENOSYS) {
      if (errno != ESRCH) {
        log(util::LogLevel::Warning,
            fmt::format("scheduler: cannot signal job {}'s wrapper: {}", job.id, std::strerror(errno)));
      }
      return false;
    }
  }
  // No pidfd (a kernel without pidfd_open): by pid, only while that pid is still the wrapper.
  if (job.shim_pid < 2 || job.shim_start == 0 || process_starttime(job.shim_pid) != job.shim_start) return false;
  return ::kill(job.shim_pid, sig) == 0;
}

WrapperProbe Daemon::State::probe_wrapper(long long id) const {
  WrapperProbe out;
  const util::Fd fd(::open(file(id, "lock").c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return out;
  out.alive = ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0;  // the wrapper holds it while it lives
  const auto words = util::split(read_small(file(id, "lock")).value_or(""), ' ');
  if (words.size() >= 2) {
    const auto pid = parse_pid(words[0]);
    const auto start = util::parse_int(words[1], 1, LLONG_MAX);
    if (pid && start) {
      out.pid = *pid;
      out.start = static_cast<unsigned long long>(*start);
    }
  }
  return out;
}

// The wrapper of `job` is gone: record how the job ended (or requeue a preempted one).
void Daemon::State::on_wrapper_gone(Job& job) {
  Runtime& rt = runtime[job.id];
  if (rt.child && job.shim_pid >= 2) {  // waitpid(0) would wait for any child of the group
    int status = 0;
    while (::waitpid(job.shim_pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  const auto exit_text = read_small(file(job.id, "exit"));
  // NVML may list the job's process for a moment after it is gone; the pass knows it is gone.
  if (const auto run_text = read_small(file(job.id, "run"))) {
    const auto words = util::split(*run_text, ' ');
    if (const auto pid = words.empty() ? std::nullopt : parse_pid(words[0])) ended_pids[static_cast<unsigned>(*pid)] = now_ms();
  }
  recheck_at_ms = clock() + kRecheckMs;
  remove_leases(job);
  if (job.stopping_for == StopReason::Preempt) {
    // Back to the queue: its files first, so that a crash now finds a queued job with none.
    remove_job_files(job.id);
    if (rt.pidfd >= 0) ::close(rt.pidfd);
    rt.pidfd = -1;
    job.state = JobState::Queued;
    job.requeues += 1;
    if (job.started_ms > 0) {
      usage[job.uid] += static_cast<long long>(job.gpus.size()) * std::max(0LL, now_ms() - job.started_ms);
    }
    job.gpus.clear();
    job.gpu_uuids.clear();
    job.started_ms = 0;
    job.shim_pid = 0;
    job.shim_start = 0;
    job.stopping_for = StopReason::None;
    job.preempted_for = 0;
    job.reason = "preempted by a normal job; queued again";
    persist(job);
    tell_watchers(job, "requeued");
    log(util::LogLevel::Info, fmt::format("scheduler: backfill job {} preempted and queued again", job.id));
    dirty = true;
    return;
  }
  if (exit_text) {
    const auto words = util::split(*exit_text, ' ');
    // "code ended_unix_ms", written by the wrapper; a damaged file counts as a failure now.
    const auto code = words.empty() ? std::nullopt : util::parse_int(words[0], 0, 255);
    const auto ended = words.size() > 1 ? util::parse_int(words[1], 1, LLONG_MAX) : std::nullopt;
    job.exit_code = static_cast<int>(code.value_or(1));
    job.ended_ms = ended.value_or(now_ms());
    const bool cancelled = job.stopping_for == StopReason::Cancel;
    finish(job, cancelled ? JobState::Cancelled : JobState::Done, "");  // keeps "cancelled by ..."
  } else {
    finish(job, JobState::Lost, "its wrapper ended without writing a result (killed?)");
    log(util::LogLevel::Warning, fmt::format("scheduler: job {} lost: {}", job.id, job.reason));
  }
  const long long id = job.id;
  remove_job_files(id);
  jobs.erase(id);
}

// Starts `job` on `chosen` (indices) / `uuids`; under the lease directory's lock.
bool Daemon::State::start_job(Job& job, const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids) {
  std::error_code ec;
  std::filesystem::create_directories(jobs_dir, ec);
  if (ec) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot create {}: {}", jobs_dir, ec.message()));
    return false;
  }
  const std::string id = std::to_string(job.id);
  std::string visible;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    visible += (i ? "," : "") + (job.uuids ? uuids[i] : std::to_string(chosen[i]));
  }
  json spec = {{"id", job.id},
               {"path", job.path},
               {"argv", job.argv},
               {"env", job_environment(job.env, visible, job.uuids, id, job.name)},
               {"cwd", job.cwd},
               {"uid", job.uid},
               {"gid", job.gid},
               {"groups", job.groups},
               {"user", job.user},
               {"time_ms", job.time_ms ? json(*job.time_ms) : json(nullptr)},
               // A job queued under a longer cap (or before there was one) gets today's.
               {"grace_ms", std::min(job.grace_ms, opt.config.max_grace_ms)},
               {"jobs_dir", jobs_dir}};
  if (!util::write_file_atomically(file(job.id, "json"), util::json_text(spec))) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot write job {}'s spec in {}", job.id, jobs_dir));
    return false;
  }
  // The lock is taken here, before the wrapper exists, and handed to it: from now on "the lock
  // is held" means "the wrapper lives" (docs/scheduler.md "The wrapper and persistence").
  const int lock_fd = ::open(file(job.id, "lock").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if (lock_fd >= 0) ::close(lock_fd);
    log(util::LogLevel::Error, fmt::format("scheduler: cannot lock {}", file(job.id, "lock")));
    return false;
  }
  int out_fd = -1;
  int err_fd = -1;
  Runtime& rt = runtime[job.id];
  if (job.detach || rt.output_fds.size() < 2) {
    job.log = log_file(job.id);
    out_fd = ::open(job.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (out_fd >= 0) (void)!::fchown(out_fd, job.uid, job.gid);
    err_fd = out_fd;
  } else {
    out_fd = rt.output_fds[0];
    err_fd = rt.output_fds[1];
  }
  const std::string spec_path = file(job.id, "json");
  // posix_spawn, not fork: the agent has threads and a heap, and copying its page tables for
  // every job was most of a job's start (and of the hand-over between jobs).
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  if (const int e = posix_spawn_file_actions_init(&actions); e != 0) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot start job {}: {}", job.id, std::strerror(e)));
    ::close(lock_fd);
    if ((job.detach || rt.output_fds.size() < 2) && out_fd >= 0) ::close(out_fd);
    return false;
  }
  (void)posix_spawnattr_init(&attr);  // only fails on ENOMEM in theory; glibc's never fails
  // Every step is checked: a job started without its descriptors would write into the agent's own.
  int setup = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  const auto step = [&setup](int e) {
    if (setup == 0) setup = e;
  };
  step(out_fd >= 0 ? posix_spawn_file_actions_adddup2(&actions, out_fd, 1)
                   : posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0));
  step(err_fd >= 0 ? posix_spawn_file_actions_adddup2(&actions, err_fd, 2)
                   : posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0));
  step(posix_spawn_file_actions_adddup2(&actions, lock_fd, 3));
  step(posix_spawn_file_actions_addclosefrom_np(&actions, 4));
  sigset_t none;
  sigemptyset(&none);
  step(posix_spawnattr_setsigmask(&attr, &none));
  sigset_t all;
  sigfillset(&all);
  step(posix_spawnattr_setsigdefault(&attr, &all));
  step(posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF));
  char* const argv[] = {const_cast<char*>("tarmac"), const_cast<char*>("job-shim"),
                        const_cast<char*>(spec_path.c_str()), nullptr};
  pid_t pid = -1;  // the wrapper gets the agent's environment; the job gets its submitter's (spec)
  const int spawn_errno = setup != 0 ? setup : ::posix_spawn(&pid, opt.shim_exe.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(lock_fd);
  if (job.detach || rt.output_fds.size() < 2) {
    if (out_fd >= 0) ::close(out_fd);
  }
  if (!job.backfill) {
    // A backfill job may be preempted and started again: it keeps its submitter's output.
    for (int fd : rt.output_fds) ::close(fd);
    rt.output_fds.clear();
  }
  if (spawn_errno != 0) {
    log(util::LogLevel::Error,
        fmt::format("scheduler: cannot start job {}: {}: {}", job.id, opt.shim_exe, std::strerror(spawn_errno)));
    remove_job_files(job.id);
    return false;
  }
  job.shim_pid = pid;
  job.shim_start = process_starttime(pid).value_or(0);
  job.state = JobState::Running;
  job.started_ms = now_ms();
  job.gpus = chosen;
  job.gpu_uuids = uuids;
  job.reason.clear();
  std::vector<Lease> leases;
  for (const auto& uuid : uuids) {
    leases.push_back(Lease{.uuid = uuid, .pid = pid, .starttime = job.shim_start, .expires_unix_ms = 0,
                           .job_id = std::to_string(job.id), .user = job.user});
  }
  if (auto r = dir->write(leases); !r.ok()) {
    log(util::LogLevel::Warning, fmt::format("scheduler: job {}: cannot write its leases: {}", job.id, r.error().message));
  }
  persist(job);
  watch(job, true);
  tell_watchers(job, "started");
  return true;
}

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
  if (!held) return;  // the loop comes back within kRetryMs
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
