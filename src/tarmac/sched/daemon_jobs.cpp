// The scheduler's jobs and their wrappers (daemon_state.hpp): starting a job under its wrapper
// (`tarmac job-shim`), and recording how it ended once the wrapper is gone. The pass that decides
// what starts is daemon_pass.cpp; the wrappers' pidfds and signals are daemon_wrappers.cpp.
#include <sys/file.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <filesystem>

#include "tarmac/sched/daemon_common.hpp"
#include "tarmac/sched/daemon_state.hpp"
#include "tarmac/sched/supervise.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/process.hpp"

namespace tarmac::sched {

using detail::read_small;
using detail::user_name;
using nlohmann::json;

bool Daemon::State::write_spec(const Job& job, const std::vector<unsigned>& chosen,
                               const std::vector<std::string>& uuids) {
  std::error_code ec;
  std::filesystem::create_directories(table.jobs_dir(), ec);
  if (ec) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot create {}: {}", table.jobs_dir(), ec.message()));
    return false;
  }
  const std::string id = std::to_string(job.id);
  std::string visible;
  bool mig = false;  // a MIG device: named by its UUID, and PCI order does not order it
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    // A MIG device is named to CUDA by its UUID only.
    const bool by_uuid = job.uuids || (i < uuids.size() && is_mig_uuid(uuids[i]));
    mig = mig || (i < uuids.size() && is_mig_uuid(uuids[i]));
    visible += (i ? "," : "") + (by_uuid ? uuids[i] : std::to_string(chosen[i]));
  }
  json spec = {{"id", job.id},
               {"path", job.path},
               {"argv", job.argv},
               {"env", job_environment(job.env, visible, job.uuids || mig, id, job.name)},
               {"cwd", job.cwd},
               {"uid", job.uid},
               {"gid", job.gid},
               {"groups", job.groups},
               {"user", job.user},
               {"time_ms", job.time_ms ? json(*job.time_ms) : json(nullptr)},
               // A job queued under a longer cap (or before there was one) gets today's.
               {"grace_ms", std::min(job.grace_ms, opt.config.max_grace_ms)},
               {"jobs_dir", table.jobs_dir()},
               // What recovery reads back when the agent died between the wrapper's start and the
               // job's row saying so (Daemon::State::recover).
               {"gpus", chosen},
               {"gpu_uuids", uuids}};
  if (!util::write_file_atomically(file(job.id, "json"), util::json_text(spec))) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot write job {}'s spec in {}", job.id, table.jobs_dir()));
    return false;
  }
  return true;
}

int Daemon::State::lock_for_wrapper(const Job& job) {
  const int lock_fd = ::open(file(job.id, "lock").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if (lock_fd >= 0) ::close(lock_fd);
    log(util::LogLevel::Error, fmt::format("scheduler: cannot lock {}", file(job.id, "lock")));
    return -1;
  }
  return lock_fd;
}

// Starts `job` on `chosen` (indices) / `uuids`; under the lease directory's lock.
bool Daemon::State::start_job(Job& job, const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids) {
  if (!write_spec(job, chosen, uuids)) return false;
  // The lock is taken here, before the wrapper exists, and handed to it: from now on "the lock
  // is held" means "the wrapper lives" (docs/scheduler.md "The wrapper and persistence").
  const int lock_fd = lock_for_wrapper(job);
  if (lock_fd < 0) return false;
  int out_fd = -1;
  int err_fd = -1;
  Runtime& rt = wrappers.runtime(job.id);
  if (job.detach || rt.output_fds.size() < 2) {
    job.log = log_file(job.id);
    out_fd = ::open(job.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (out_fd >= 0) (void)!::fchown(out_fd, job.uid, job.gid);
    err_fd = out_fd;
  } else {
    out_fd = rt.output_fds[0].get();
    err_fd = rt.output_fds[1].get();
  }
  const std::string spec_path = file(job.id, "json");
  // util::start_process (a vfork-like clone), not fork: the agent has threads and a heap, and
  // copying its page tables for every job was most of a job's start (and of the hand-over between
  // jobs). The wrapper gets the agent's environment (the job gets its submitter's, from the spec),
  // the lock as descriptor 3 and nothing above it, its own session, and signals as new but its
  // stop signals blocked.
  util::ProcessSpec shim;
  shim.path = opt.shim_exe;
  shim.argv = {"tarmac", "job-shim", spec_path};
  shim.env = util::own_environment();
  shim.fds = {{0, util::kDevNull},
              {1, out_fd >= 0 ? out_fd : util::kDevNull},
              {2, err_fd >= 0 ? err_fd : util::kDevNull},
              {3, lock_fd}};
  shim.session = util::Session::NewSession;
  // Its stop signals blocked from the first instruction: a cancel or a yield that comes while the
  // wrapper is still starting (slow under a loaded machine) waits for its handler, rather than
  // ending it by the default action before it can record how the job ended (a "lost" job).
  shim.signal_mask = handled_signals();
  auto started = util::start_process(shim);
  ::close(lock_fd);
  if (job.detach || rt.output_fds.size() < 2) {
    if (out_fd >= 0) ::close(out_fd);
  }
  // A backfill job may be preempted and started again: it keeps its submitter's output.
  if (!job.backfill) rt.output_fds.clear();
  if (!started.ok()) {
    log(util::LogLevel::Error, fmt::format("scheduler: cannot start job {}: {}", job.id, started.error().message));
    table.remove_job_files(job.id);
    return false;
  }
  rt.pidfd = std::move(started->pidfd);  // made with the process: no pid to check for reuse
  record_start(job, started->pid, chosen, uuids);
  return true;
}

void Daemon::State::record_start(Job& job, int pid, const std::vector<unsigned>& chosen,
                                 const std::vector<std::string>& uuids) {
  job.shim_pid = pid;
  job.shim_start = process_starttime(pid).value_or(0);
  job.state = JobState::Running;
  job.started_ms = util::wall_ms();
  job.gpus = chosen;
  job.gpu_uuids = uuids;
  job.reason.clear();
  if (auto r = files.write_for(job, pid, job.shim_start); !r.ok()) {
    log(util::LogLevel::Warning, fmt::format("scheduler: job {}: cannot write its leases: {}", job.id, r.error().message));
  }
  table.persist(job);
  wrappers.watch(job, true);
  table.announce(job, JobEvent::Started);
}

void Daemon::State::on_wrapper_gone(Job& job) {
  wrappers.reap(job);
  // NVML may list the job's process for a moment after it is gone; the pass knows it is gone.
  if (const auto run_text = read_small(file(job.id, "run"))) {
    const auto words = util::split(*run_text, ' ');
    if (const auto pid = words.empty() ? std::nullopt : parse_pid(words[0])) {
      gpus.process_ended(static_cast<unsigned>(*pid), clock());
    }
  }
  pass.recheck_soon(clock());
  files.remove_for(job, clock());
  if (job.stopping_for == StopReason::Preempt) {
    wrappers.unwatch(job.id);
    table.requeue_preempted(job, util::wall_ms());
    log(util::LogLevel::Info, fmt::format("scheduler: backfill job {} preempted and queued again", job.id));
    return;
  }
  record_end(job);
}

void Daemon::State::record_end(Job& job) {
  const long long id = job.id;
  if (const auto exit_text = read_small(file(id, "exit"))) {
    const auto words = util::split(*exit_text, ' ');
    // "code ended_unix_ms", written by the wrapper; a damaged file counts as a failure now.
    const auto code = words.empty() ? std::nullopt : util::parse_int(words[0], 0, 255);
    const auto ended = words.size() > 1 ? util::parse_int(words[1], 1, LLONG_MAX) : std::nullopt;
    job.exit_code = static_cast<int>(code.value_or(1));
    job.ended_ms = ended.value_or(util::wall_ms());
    const bool cancelled = job.stopping_for == StopReason::Cancel;
    (void)table.end(job, cancelled ? JobState::Cancelled : JobState::Done, "");  // keeps "cancelled by ..."
  } else {
    const Job lost = table.end(job, JobState::Lost, "its wrapper ended without writing a result (killed?)");
    log(util::LogLevel::Warning, fmt::format("scheduler: job {} lost: {}", id, lost.reason));
  }
  table.remove_job_files(id);
}

// A job of the agent's own goes through the same record as a submission (the store, its
// environment, the queue), detached, marked the agent's; never as root: the agent's jobs run what
// users send (their prompts), so they run as an account of their own.
Result<long long> Daemon::State::submit(Job job) {
  if (job.uid == 0) return make_error(Error::Code::Invalid, "the agent runs no job of its own as root");
  if (job.path.empty() || job.path.front() != '/') {
    return make_error(Error::Code::Invalid, fmt::format("the program '{}' must be an absolute path", job.path));
  }
  job.kind = JobKind::Job;
  job.agent = true;
  job.detach = true;
  job.user = user_name(job.uid);
  job.grace_ms = std::min(job.grace_ms, opt.config.max_grace_ms);
  auto recorded = requests.record(std::move(job), {});
  if (const auto* bad = std::get_if<nlohmann::json>(&recorded)) {
    return make_error(Error::Code::Io, bad->value("error", std::string("the job could not be queued")));
  }
  const Job& stored = *std::get<Job*>(recorded);
  log(util::LogLevel::Info, fmt::format("scheduler: job {} queued for the agent ({}, as {})", stored.id, stored.name,
                                        stored.user));
  return stored.id;
}

void Daemon::State::cancel(long long id, const std::string& why) {
  Job* job = table.find(id);
  if (job != nullptr && job->agent && job->kind == JobKind::Job) requests.end_job(*job, why);
}

const Job* Daemon::State::find(long long id) const {
  const auto& jobs = table.jobs();
  const auto it = jobs.find(id);
  return it == jobs.end() || has_ended(it->second.state) ? nullptr : &it->second;
}

std::vector<long long> Daemon::State::unfinished() const {
  std::vector<long long> out;
  for (const auto& [id, job] : table.jobs()) {
    if (job.agent && !has_ended(job.state)) out.push_back(id);
  }
  return out;
}

std::set<std::string> Daemon::State::gpus_of(const std::set<unsigned>& pids) const {
  std::set<std::string> out;
  for (const auto& [uuid, use] : gpus.seen()) {
    if (std::any_of(use.pids.begin(), use.pids.end(), [&pids](unsigned pid) { return pids.contains(pid); })) {
      out.insert(uuid);
    }
  }
  return out;
}

}  // namespace tarmac::sched
