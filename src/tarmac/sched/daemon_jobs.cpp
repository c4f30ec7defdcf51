// The scheduler's jobs (daemon_state.hpp): persisting them, starting one under its wrapper,
// watching and signalling it, seeing it end. The pass that decides what starts is daemon_pass.cpp.
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

bool Daemon::State::lock_stuck() const {
  return lock_missed_since_ms != 0 && now_ms() - lock_missed_since_ms >= kLockStuckMs;
}

void Daemon::State::remove_leases(const Job& job) {
  if (job.gpu_uuids.empty()) return;
  auto held = lock_dir_briefly();
  if (!held) return;  // they go stale with the wrapper, or at their expiry
  dir->remove(job.gpu_uuids, std::to_string(job.id));
}

std::optional<LeaseDir::DirLock> Daemon::State::lock_dir_briefly() {
  auto held = dir->lock(kLockWaitMs);
  if (held.ok()) {
    lock_missed_since_ms = 0;
    return std::move(*held);
  }
  const long long now = now_ms();
  if (lock_missed_since_ms == 0) lock_missed_since_ms = now;
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

}  // namespace tarmac::sched
