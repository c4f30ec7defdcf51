#include "tarmac/sched/daemon.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <variant>

#include "tarmac/sched/job.hpp"
#include "tarmac/sched/jobdb.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/sched/queue.hpp"
#include "tarmac/sched/supervise.hpp"
#include "tarmac/sched/wire.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

extern char** environ;

namespace tarmac::sched {

namespace {

using nlohmann::json;

constexpr long long kHour = 3600LL * 1000;
constexpr int kTickMs = 250;           // the loop's longest sleep
constexpr long long kRetryMs = 1000;   // a pass over a queue that could not start anything, at most this often
constexpr std::size_t kMaxClients = 1024;
constexpr long long kRoomMarginMs = 5000;   // after preempted jobs end, how long their room is awaited
constexpr long long kEndedPidMs = 10000;    // how long an ended job's pid is known as gone
constexpr long long kRecheckMs = 25;        // a pass again this soon after a job ends
constexpr long long kMinPassGapMs = 10;     // passes for new submissions, at most this often

long long now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// What the sampler saw on one GPU.
struct GpuUse {
  unsigned index = 0;
  std::optional<unsigned> util;
  std::vector<unsigned> pids;
  long long idle_since_ms = 0;  // real time its class became idle; 0 while it is not
};

// A running wrapper, or an attached submitter's descriptors.
struct Runtime {
  int pidfd = -1;
  bool child = false;            // the agent started it (and must reap it)
  std::vector<int> output_fds;   // the submitter's stdout and stderr (attached jobs, until started)
  long long last_used_ms = 0;    // leases
  long long warned_ms = 0;       // leases: when the idle warning went out; 0 when it has not
};

struct Client {
  Connection conn;
  uid_t uid = 0;
  std::vector<int> fds;
  long long watching = 0;  // the job whose events it gets; 0 for none
  bool done = false;       // close once its answer is sent
};

// A request's answer when it fails: the words, and how the client should exit.
json failure(const std::string& code, const std::string& message) {
  return json{{"ok", false}, {"code", code}, {"error", message}};
}

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

std::string user_name(uid_t uid, gid_t* gid = nullptr) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    if (gid != nullptr) *gid = found->pw_gid;
    return found->pw_name;
  }
  if (gid != nullptr) *gid = static_cast<gid_t>(uid);
  return std::to_string(uid);
}

std::string indices_text(const std::vector<unsigned>& v) {
  std::string out;
  for (unsigned i : v) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

// The TARMAC_JOB_ID in a process's environment, "" when it has none or cannot be read.
std::string job_id_of(unsigned pid) {
  auto text = util::read_file(fmt::format("/proc/{}/environ", pid));
  if (!text) return "";
  std::string_view env = *text;
  constexpr std::string_view kKey = "TARMAC_JOB_ID=";
  std::size_t pos = 0;
  while (pos < env.size()) {
    std::size_t end = env.find('\0', pos);
    if (end == std::string_view::npos) end = env.size();
    const auto kv = env.substr(pos, end - pos);
    if (kv.starts_with(kKey)) return std::string(kv.substr(kKey.size()));
    pos = end + 1;
  }
  return "";
}

// The contents of a job file, trimmed; nullopt when missing.
std::optional<std::string> read_small(const std::string& path) {
  auto text = util::read_file(path);
  if (!text) return std::nullopt;
  return std::string(util::trim(*text));
}

}  // namespace

struct Daemon::State {
  DaemonOptions opt;
  std::string jobs_dir;  // 0700: specs, environments, locks, results
  std::string logs_dir;  // 0755: detached jobs' output, each file owned by its job's user
  Listener listener;
  std::optional<JobDb> db;
  std::optional<LeaseDir> dir;
  std::unique_ptr<gpu::Backend> backend;
  std::optional<gpu::Topology> topology;  // read once: links do not change while NVML is open
  int wake_fd = -1;
  std::atomic<bool> stop{false};
  std::thread thread;

  std::map<long long, Job> jobs;  // every job and lease that has not ended
  std::map<long long, Runtime> runtime;
  std::vector<std::unique_ptr<Client>> clients;
  std::map<uid_t, long long> usage;  // ended jobs' GPU-ms in the fairness window, per uid
  bool dirty = true;                 // something changed: run a pass
  long long last_pass_ms = 0;
  long long last_slow_tick_ms = 0;
  std::map<unsigned, std::string> job_of_pid;  // environ cache
  std::map<unsigned, long long> ended_pids;    // leaders of jobs that ended lately -> when
  long long recheck_at_ms = 0;                 // a pass due soon after a job ended; 0: none
  std::set<std::pair<long long, unsigned>> flagged;

  mutable std::mutex use_mutex;  // guards the three below: observe() writes two, the loop the third
  std::map<std::string, GpuUse> use;
  unsigned gpu_count = 0;
  std::set<std::string> given;  // GPUs of running jobs and active leases

  void publish_given() {
    std::set<std::string> now_given;
    for (const auto& [id, j] : jobs) {
      if (j.state == JobState::Running || j.state == JobState::Stopping || j.state == JobState::Active) {
        now_given.insert(j.gpu_uuids.begin(), j.gpu_uuids.end());
      }
    }
    std::lock_guard lock(use_mutex);
    given = std::move(now_given);
  }

  ~State() {
    for (auto& [id, rt] : runtime) {
      if (rt.pidfd >= 0) ::close(rt.pidfd);
      for (int fd : rt.output_fds) ::close(fd);
    }
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void log(agent::LogLevel level, const std::string& message) const {
    if (opt.log) opt.log(level, message);
  }

  std::string file(long long id, const char* ext) const { return fmt::format("{}/{}.{}", jobs_dir, id, ext); }
  std::string log_file(long long id) const { return fmt::format("{}/{}.log", logs_dir, id); }

  // The submitter's environment is kept beside the job files (mode 0600 in a 0700 directory), not in
  // the store, which other users may read.
  bool save_env(const Job& job) {
    return util::write_file_atomically(file(job.id, "env"), json(job.env).dump()) &&
           ::chmod(file(job.id, "env").c_str(), 0600) == 0;
  }
  void load_env(Job& job) {
    const auto text = util::read_file(file(job.id, "env"));
    const json env = text ? json::parse(*text, nullptr, false) : json();
    job.env.clear();
    if (!env.is_array()) return;
    for (const auto& v : env) {
      if (v.is_string()) job.env.push_back(v.get<std::string>());
    }
  }

  void persist(const Job& job) {
    if (auto r = db->save(job); !r.ok()) {
      log(agent::LogLevel::Error, fmt::format("scheduler: cannot record job {}: {}", job.id, r.error().message));
    }
  }

  void record_event(std::optional<unsigned> gpu, const std::string& kind, const std::string& detail) {
    if (auto r = db->event(now_ms(), gpu, kind, detail); !r.ok()) {
      log(agent::LogLevel::Warning, fmt::format("scheduler: cannot record event {}: {}", kind, r.error().message));
    }
  }

  // The files of one run of the job (a preempted job is started again with new ones).
  void remove_job_files(long long id) {
    for (const char* ext : {"json", "lock", "run", "exit"}) ::unlink(file(id, ext).c_str());
  }

  // --- events to attached clients ---

  void tell_watchers(const Job& job, const char* event) {
    const std::string line = json{{"event", event}, {"job", to_json(job)}}.dump();
    for (auto& c : clients) {
      if (c->watching != job.id) continue;
      if (!c->conn.send_line(line).ok()) c->done = true;
      if (has_ended(job.state)) c->done = true;
    }
  }

  void finish(Job& job, JobState state, const std::string& reason) {
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

  void remove_leases(const Job& job) {
    if (job.gpu_uuids.empty()) return;
    auto held = dir->lock();
    if (!held.ok()) return;  // they go stale with the wrapper, or at their expiry
    dir->remove(job.gpu_uuids, std::to_string(job.id));
  }

  // --- the wrapper of a running job ---

  void watch(Job& job, bool child) {
    Runtime& rt = runtime[job.id];
    rt.child = child;
    if (rt.pidfd < 0 && job.shim_pid > 0) rt.pidfd = pidfd_open(job.shim_pid);
  }

  // The wrapper of `job` is gone: record how the job ended (or requeue a preempted one).
  void on_wrapper_gone(Job& job) {
    Runtime& rt = runtime[job.id];
    if (rt.child) {
      int status = 0;
      (void)::waitpid(job.shim_pid, &status, 0);
    }
    const auto exit_text = read_small(file(job.id, "exit"));
    // NVML may list the job's process for a moment after it is gone; the pass knows it is gone.
    if (const auto run_text = read_small(file(job.id, "run"))) {
      const auto words = util::split(*run_text, ' ');
      if (!words.empty()) ended_pids[static_cast<unsigned>(std::atol(std::string(words[0]).c_str()))] = now_ms();
    }
    recheck_at_ms = now_ms() + kRecheckMs;
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
      log(agent::LogLevel::Info, fmt::format("scheduler: backfill job {} preempted and queued again", job.id));
      dirty = true;
      return;
    }
    if (exit_text) {
      const auto words = util::split(*exit_text, ' ');
      int code = 1;
      long long ended = now_ms();
      if (!words.empty()) code = std::atoi(std::string(words[0]).c_str());
      if (words.size() > 1) ended = std::atoll(std::string(words[1]).c_str());
      job.exit_code = code;
      job.ended_ms = ended;
      const bool cancelled = job.stopping_for == StopReason::Cancel;
      finish(job, cancelled ? JobState::Cancelled : JobState::Done, cancelled ? "cancelled" : "");
    } else {
      finish(job, JobState::Lost, "its wrapper ended without writing a result (killed?)");
      log(agent::LogLevel::Warning, fmt::format("scheduler: job {} lost: {}", job.id, job.reason));
    }
    const long long id = job.id;
    remove_job_files(id);
    jobs.erase(id);
  }

  // Starts `job` on `chosen` (indices) / `uuids`; under the lease directory's lock.
  bool start_job(Job& job, const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids) {
    std::error_code ec;
    std::filesystem::create_directories(jobs_dir, ec);
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
                 {"user", job.user},
                 {"time_ms", job.time_ms ? json(*job.time_ms) : json(nullptr)},
                 {"grace_ms", job.grace_ms},
                 {"jobs_dir", jobs_dir}};
    if (!util::write_file_atomically(file(job.id, "json"), spec.dump())) {
      log(agent::LogLevel::Error, fmt::format("scheduler: cannot write job {}'s spec in {}", job.id, jobs_dir));
      return false;
    }
    // The lock is taken here, before the wrapper exists, and handed to it: from now on "the lock
    // is held" means "the wrapper lives" (docs/scheduler.md "The wrapper and persistence").
    const int lock_fd = ::open(file(job.id, "lock").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      if (lock_fd >= 0) ::close(lock_fd);
      log(agent::LogLevel::Error, fmt::format("scheduler: cannot lock {}", file(job.id, "lock")));
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
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (out_fd >= 0) posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
    else posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    if (err_fd >= 0) posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
    else posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, lock_fd, 3);
    posix_spawn_file_actions_addclosefrom_np(&actions, 4);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    sigset_t all;
    sigfillset(&all);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char* const argv[] = {const_cast<char*>("tarmac"), const_cast<char*>("job-shim"),
                          const_cast<char*>(spec_path.c_str()), nullptr};
    pid_t pid = -1;  // the wrapper gets the agent's environment; the job gets its submitter's (spec)
    const int spawn_errno = ::posix_spawn(&pid, opt.shim_exe.c_str(), &actions, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(lock_fd);
    if (job.detach || rt.output_fds.size() < 2) {
      if (out_fd >= 0) ::close(out_fd);
    }
    for (int fd : rt.output_fds) ::close(fd);
    rt.output_fds.clear();
    if (spawn_errno != 0) {
      log(agent::LogLevel::Error,
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
      log(agent::LogLevel::Warning, fmt::format("scheduler: job {}: cannot write its leases: {}", job.id, r.error().message));
    }
    persist(job);
    watch(job, true);
    tell_watchers(job, "started");
    return true;
  }

  // --- the scheduling pass ---

  // A snapshot with processes (and the topology, read at the first one).
  Result<gpu::Snapshot> look() {
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

  unsigned gpus_held_by(uid_t uid) const {
    unsigned n = 0;
    for (const auto& [id, j] : jobs) {
      if (j.uid == uid && (j.state == JobState::Running || j.state == JobState::Stopping || j.state == JobState::Active)) {
        n += static_cast<unsigned>(j.gpu_uuids.size());
      }
    }
    return n;
  }

  bool ensure_backend() {
    if (backend) return true;
    auto b = opt.open_backend();
    if (!b.ok()) {
      log(agent::LogLevel::Error, fmt::format("scheduler: cannot open NVML: {}", b.error().message));
      return false;
    }
    backend = std::move(*b);
    return true;
  }

  void pass() {
    dirty = false;
    last_pass_ms = now_ms();
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
    auto held = dir->lock();
    if (!held.ok()) {
      log(agent::LogLevel::Error, fmt::format("scheduler: {}", held.error().message));
      return;
    }
    const long long now = now_ms();
    auto live = dir->live_leases(now);
    if (!live.ok()) {
      log(agent::LogLevel::Error, fmt::format("scheduler: {}", live.error().message));
      return;
    }
    auto snap = look();
    if (!snap.ok()) {
      log(agent::LogLevel::Error, fmt::format("scheduler: cannot look at the GPUs: {}", snap.error().message));
      return;
    }
    std::erase_if(ended_pids, [now](const auto& kv) { return now - kv.second > kEndedPidMs; });
    for (auto& d : snap->devices) {
      std::erase_if(d.processes, [this](const gpu::GpuProcess& p) {
        return ended_pids.contains(p.pid) && ::kill(static_cast<pid_t>(p.pid), 0) != 0 && errno == ESRCH;
      });
    }
    LeasedGpus leased;
    for (const auto& l : *live) leased[l.uuid] = describe(l);
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
          ::kill(b.shim_pid, SIGTERM);
          log(agent::LogLevel::Info, fmt::format("scheduler: preempting backfill job {} for job {}", b.id, job.id));
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

  // --- leases and flags, every tick ---

  void slow_tick() {
    const long long now = now_ms();
    last_slow_tick_ms = now;
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

  void lease_notice(const Job& job, bool reclaimed, long long idle_since) {
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
    log(agent::LogLevel::Warning, "scheduler: " + n.summary);
    record_event(job.gpus.empty() ? std::nullopt : std::optional<unsigned>(job.gpus.front()),
                 reclaimed ? "lease_reclaimed" : "lease_idle", n.summary);
    if (opt.notify) opt.notify(n);
  }

  void flag_outside(const std::map<std::string, GpuUse>& seen) {
    std::set<unsigned> alive;
    for (const auto& [uuid, g] : seen) {
      for (unsigned pid : g.pids) {
        alive.insert(pid);
        auto it = job_of_pid.find(pid);
        if (it == job_of_pid.end()) it = job_of_pid.emplace(pid, job_id_of(pid)).first;
        if (it->second.empty()) continue;
        long long id = 0;
        const auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), id);
        if (ec != std::errc() || end != it->second.data() + it->second.size()) continue;
        const auto jt = jobs.find(id);
        if (jt == jobs.end() || jt->second.kind != JobKind::Job || jt->second.state != JobState::Running) continue;
        Job& job = jt->second;
        if (std::find(job.gpu_uuids.begin(), job.gpu_uuids.end(), uuid) != job.gpu_uuids.end()) continue;
        if (!flagged.insert({id, g.index}).second) continue;
        job.outside.push_back(g.index);
        persist(job);
        const std::string detail = fmt::format("job {} of {} uses GPU {} (pid {}), which it was not given (it has {})",
                                               id, job.user, g.index, pid, indices_text(job.gpus));
        log(agent::LogLevel::Warning, "scheduler: " + detail);
        record_event(g.index, "job_outside", detail);
      }
    }
    std::erase_if(job_of_pid, [&alive](const auto& kv) { return !alive.contains(kv.first); });
  }

  // Wrappers watched without a pidfd (a kernel without pidfd_open): checked by pid and start time.
  void check_wrappers_without_pidfd() {
    std::vector<long long> gone;
    for (auto& [id, job] : jobs) {
      if (job.kind != JobKind::Job || (job.state != JobState::Running && job.state != JobState::Stopping)) continue;
      const auto rt = runtime.find(id);
      if (rt != runtime.end() && rt->second.pidfd >= 0) continue;
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

  // --- recovery ---

  void recover() {
    auto unfinished = db->unfinished();
    if (!unfinished.ok()) {
      log(agent::LogLevel::Error, fmt::format("scheduler: cannot read the queue: {}", unfinished.error().message));
      return;
    }
    int reattached = 0;
    int requeued = 0;
    int ended = 0;
    for (Job& job : *unfinished) {
      const long long id = job.id;
      load_env(job);
      if (job.kind == JobKind::Lease) {
        jobs.emplace(id, std::move(job));
        continue;
      }
      if (job.state == JobState::Queued && !std::filesystem::exists(file(id, "lock"))) {
        jobs.emplace(id, std::move(job));
        continue;
      }
      const int fd = ::open(file(id, "lock").c_str(), O_RDWR | O_CLOEXEC);
      const bool wrapper_alive = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0;
      std::string lock_text;
      if (fd >= 0) {
        lock_text = read_small(file(id, "lock")).value_or("");
        ::close(fd);
      }
      if (wrapper_alive) {
        // The wrapper writes "pid starttime" into its lock as its first act; one started an
        // instant before the agent died may not have yet.
        for (int i = 0; i < 40 && util::split(lock_text, ' ').size() < 2; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          lock_text = read_small(file(id, "lock")).value_or("");
        }
        const auto words = util::split(lock_text, ' ');
        if (words.size() >= 2) {
          job.shim_pid = std::atoi(std::string(words[0]).c_str());
          job.shim_start = std::strtoull(std::string(words[1]).c_str(), nullptr, 10);
        }
        if (job.state == JobState::Queued) job.state = JobState::Running;
        if (job.state == JobState::Stopping) {
          job.stopping_for = job.reason.starts_with("preempted") ? StopReason::Preempt : StopReason::Cancel;
        }
        if (job.started_ms == 0) job.started_ms = now_ms();
        auto& stored = jobs.emplace(id, std::move(job)).first->second;
        persist(stored);
        watch(stored, false);
        ++reattached;
        continue;
      }
      if (job.state == JobState::Stopping) {
        job.stopping_for = job.reason.starts_with("preempted") ? StopReason::Preempt : StopReason::Cancel;
      }
      auto& stored = jobs.emplace(id, std::move(job)).first->second;
      const bool ran = std::filesystem::exists(file(id, "run")) || std::filesystem::exists(file(id, "exit"));
      if (ran) {
        on_wrapper_gone(stored);
        ++ended;
        continue;
      }
      // Never got as far as starting CMD: queue it again.
      remove_job_files(id);
      remove_leases(stored);
      stored.state = JobState::Queued;
      stored.gpus.clear();
      stored.gpu_uuids.clear();
      stored.started_ms = 0;
      stored.shim_pid = 0;
      stored.reason = "queued again: the agent stopped before it started";
      persist(stored);
      ++requeued;
    }
    if (!unfinished->empty()) {
      log(agent::LogLevel::Info,
          fmt::format("scheduler: read back {} unfinished jobs and leases: {} re-attached, {} ended while the agent was "
                      "away, {} queued again",
                      unfinished->size(), reattached, ended, requeued));
    }
  }

  // --- requests ---

  json handle(Client& c, const json& req) {
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

  unsigned known_gpu_count() {
    {
      std::lock_guard lock(use_mutex);
      if (gpu_count > 0) return gpu_count;
    }
    if (!ensure_backend()) return 0;
    auto snap = backend->snapshot(gpu::SnapshotOptions{});
    return snap.ok() ? static_cast<unsigned>(snap->devices.size()) : 0;
  }

  // The checks a job or a lease of `n` GPUs must pass before it is queued; nullopt when it does.
  std::optional<json> check_request(uid_t uid, unsigned n) {
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

  json submit(Client& c, const json& req) {
    Job job;
    job.kind = JobKind::Job;
    job.uid = c.uid;
    job.user = user_name(c.uid, &job.gid);
    job.request.n = json_field<unsigned>(req, "n").value_or(1);
    if (auto bad = check_request(c.uid, job.request.n)) return *bad;
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
    job.grace_ms = std::max(0LL, json_field<long long>(req, "grace_ms").value_or(10000));
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
      runtime[job.id].output_fds = std::move(c.fds);
      c.fds.clear();
      c.watching = job.id;
    }
    auto& stored = jobs.emplace(job.id, std::move(job)).first->second;
    dirty = true;
    return json{{"ok", true}, {"job", to_json(stored)}};
  }

  json list(const json& req) {
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
  std::variant<Job*, json> find_job(const json& req, std::optional<JobKind> kind) {
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

  std::optional<json> check_owner(const Client& c, const Job& job, const char* action) {
    if (c.uid == 0 || c.uid == job.uid) return std::nullopt;
    return failure("denied", fmt::format("{} {} is not yours: it belongs to {}; only its owner or root may {} it",
                                         to_string(job.kind), job.id, job.user, action));
  }

  json wait_for(Client& c, const json& req) {
    const auto id = json_field<long long>(req, "id");
    if (id) {
      if (auto it = jobs.find(*id); it != jobs.end()) {
        c.watching = *id;
        return json{{"ok", true}, {"job", to_json(it->second)}};
      }
      auto all = db->list(true, 0);
      if (all.ok()) {
        for (const auto& j : *all) {
          if (j.id == *id) {
            c.done = true;
            return json{{"ok", true}, {"job", to_json(j)}};
          }
        }
      }
    }
    return failure("invalid", fmt::format("no job {}", id.value_or(0)));
  }

  json cancel(Client& c, const json& req) {
    auto found = find_job(req, std::nullopt);
    if (std::holds_alternative<json>(found)) return std::get<json>(found);
    Job& job = *std::get<Job*>(found);
    if (auto denied = check_owner(c, job, "cancel")) return *denied;
    if (job.kind == JobKind::Lease) return end_lease(job, JobState::Released, "released by " + user_name(c.uid));
    if (job.state == JobState::Queued) {
      const long long id = job.id;
      finish(job, JobState::Cancelled, "cancelled before it started");
      json out = {{"ok", true}, {"job", to_json(job)}};
      jobs.erase(id);
      return out;
    }
    job.state = JobState::Stopping;
    job.stopping_for = StopReason::Cancel;
    job.reason = "cancelled by " + user_name(c.uid);
    persist(job);
    if (job.shim_pid > 0) ::kill(job.shim_pid, SIGTERM);
    return json{{"ok", true}, {"job", to_json(job)}};
  }

  json end_lease(Job& job, JobState state, const std::string& reason) {
    remove_leases(job);
    const long long id = job.id;
    finish(job, state, reason);
    json out = {{"ok", true}, {"job", to_json(job)}};
    jobs.erase(id);
    return out;
  }

  json reserve(Client& c, const json& req) {
    const unsigned n = json_field<unsigned>(req, "n").value_or(1);
    if (auto bad = check_request(c.uid, n)) return *bad;
    const auto for_ms = json_field<long long>(req, "for_ms");
    if (!for_ms || *for_ms <= 0) return failure("invalid", "--for must be a duration of more than 0");
    if (!within_cap(opt.config.user_gpu_cap, gpus_held_by(c.uid), n)) {
      return failure("busy", fmt::format("{} already holds {} GPUs of the per-user cap of {}", user_name(c.uid),
                                         gpus_held_by(c.uid), opt.config.user_gpu_cap));
    }
    if (!ensure_backend()) return failure("io", "NVML cannot be used");
    PickRequest request{.n = n,
                        .min_free_bytes = json_field<std::uint64_t>(req, "min_free").value_or(0),
                        .max_util_pct = std::min(100U, json_field<unsigned>(req, "max_util").value_or(100))};
    auto held = dir->lock();
    if (!held.ok()) return failure("io", held.error().message);
    auto live = dir->live_leases(now_ms());
    if (!live.ok()) return failure("io", live.error().message);
    auto snap = look();
    if (!snap.ok()) return failure("io", fmt::format("cannot look at the GPUs: {}", snap.error().message));
    LeasedGpus leased;
    for (const auto& l : *live) leased[l.uuid] = describe(l);
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
    job.uid = c.uid;
    job.user = user_name(c.uid, &job.gid);
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
    log(agent::LogLevel::Info, fmt::format("scheduler: lease {} of {}: GPU {} until {}", stored.id, stored.user,
                                           indices_text(stored.gpus), util::format_duration_ms(*for_ms)));
    return json{{"ok", true}, {"job", to_json(stored)}};
  }

  json release(Client& c, const json& req) {
    auto found = find_job(req, JobKind::Lease);
    if (std::holds_alternative<json>(found)) return std::get<json>(found);
    Job& job = *std::get<Job*>(found);
    if (auto denied = check_owner(c, job, "release")) return *denied;
    return end_lease(job, JobState::Released, "released by " + user_name(c.uid));
  }

  json extend(Client& c, const json& req) {
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
    auto held = dir->lock();
    if (!held.ok()) return failure("io", held.error().message);
    if (auto r = dir->write(leases); !r.ok()) return failure("io", r.error().message);
    persist(job);
    return json{{"ok", true}, {"job", to_json(job)}};
  }

  // --- the loop ---

  void serve_client(Client& c) {
    if (!c.conn.fill(c.fds)) {
      c.done = true;
      return;
    }
    std::string line;
    while (!c.done && c.conn.take_line(line)) {
      const json req = json::parse(line, nullptr, false);
      json answer = req.is_object() ? handle(c, req) : failure("invalid", "a request must be one JSON object");
      if (!c.conn.send_line(answer.dump()).ok()) c.done = true;
      if (c.watching == 0) c.done = true;
      else if (auto it = jobs.find(c.watching); it == jobs.end()) c.done = true;
      // Descriptors came with this request; what it did not take is closed.
      for (int fd : c.fds) ::close(fd);
      c.fds.clear();
    }
    if (c.done) {
      for (int fd : c.fds) ::close(fd);
      c.fds.clear();
    }
  }

  void run() {
    while (!stop.load()) {
      std::vector<pollfd> fds;
      fds.push_back({wake_fd, POLLIN, 0});
      fds.push_back({listener.fd(), POLLIN, 0});
      for (const auto& c : clients) fds.push_back({c->conn.fd(), POLLIN, 0});
      std::vector<long long> pid_jobs;
      for (const auto& [id, rt] : runtime) {
        if (rt.pidfd < 0) continue;
        fds.push_back({rt.pidfd, POLLIN, 0});
        pid_jobs.push_back(id);
      }
      long long timeout = kTickMs;
      if (recheck_at_ms != 0) timeout = std::clamp(recheck_at_ms - now_ms(), 0LL, timeout);
      if (dirty) timeout = std::clamp(last_pass_ms + kMinPassGapMs - now_ms(), 0LL, timeout);
      (void)::poll(fds.data(), fds.size(), static_cast<int>(timeout));
      if (fds[0].revents != 0) {
        std::uint64_t v = 0;
        (void)!::read(wake_fd, &v, sizeof v);
      }
      if (fds[1].revents != 0) {
        for (Connection conn = listener.accept(); conn.fd() >= 0; conn = listener.accept()) {
          if (clients.size() >= kMaxClients) continue;  // closed at once
          auto client = std::make_unique<Client>();
          pid_t pid = 0;
          if (!conn.peer(client->uid, pid)) continue;
          client->conn = std::move(conn);
          clients.push_back(std::move(client));
          serve_client(*clients.back());  // a request often arrives with the connection
        }
      }
      const std::size_t first_client = 2;
      const std::size_t polled_clients = fds.size() - 2 - pid_jobs.size();
      for (std::size_t i = 0; i < polled_clients && i < clients.size(); ++i) {
        if (fds[first_client + i].revents != 0) serve_client(*clients[i]);
      }
      for (std::size_t i = 0; i < pid_jobs.size(); ++i) {
        if (fds[first_client + polled_clients + i].revents == 0) continue;
        if (auto it = jobs.find(pid_jobs[i]); it != jobs.end()) on_wrapper_gone(it->second);
      }
      std::erase_if(clients, [](const auto& c) { return c->done; });
      publish_given();
      const long long now = now_ms();
      if (now - last_slow_tick_ms >= kTickMs) slow_tick();
      const bool recheck = recheck_at_ms != 0 && now >= recheck_at_ms;
      if (recheck) recheck_at_ms = 0;
      // A burst of submissions is one pass, not one each; a job's end (recheck) is seen at once.
      if ((dirty && now - last_pass_ms >= kMinPassGapMs) || recheck || now - last_pass_ms >= kRetryMs) pass();
    }
  }
};

Daemon::Daemon(std::unique_ptr<State> state) : state_(std::move(state)) {}

Daemon::~Daemon() {
  state_->stop.store(true);
  const std::uint64_t one = 1;
  (void)!::write(state_->wake_fd, &one, sizeof one);
  if (state_->thread.joinable()) state_->thread.join();
}

Result<std::unique_ptr<Daemon>> Daemon::start(DaemonOptions options) {
  auto s = std::make_unique<State>();
  s->opt = std::move(options);
  s->jobs_dir = s->opt.state_dir + "/jobs";
  s->logs_dir = s->opt.state_dir + "/logs";
  for (const auto& [dir, mode] : {std::pair{s->jobs_dir, 0700}, std::pair{s->logs_dir, 0755}}) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return make_error(Error::Code::Io, fmt::format("cannot create {}: {}", dir, ec.message()));
    ::chmod(dir.c_str(), static_cast<mode_t>(mode));
  }
  TARMAC_TRY_ASSIGN(auto db, JobDb::open(s->opt.db_path));
  s->db.emplace(std::move(db));
  TARMAC_TRY_ASSIGN(auto dir, LeaseDir::open(s->opt.lock_dir));
  s->dir.emplace(std::move(dir));
  TARMAC_TRY_ASSIGN(auto listener, Listener::open(s->opt.socket_path));
  s->listener = std::move(listener);
  s->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (auto usage = s->db->usage(now_ms() - s->opt.config.fair_window_ms, now_ms()); usage.ok()) s->usage = *usage;
  s->recover();
  State* raw = s.get();
  s->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<Daemon>(new Daemon(std::move(s)));
}

std::set<std::string> Daemon::given_gpus() const {
  std::lock_guard lock(state_->use_mutex);
  return state_->given;
}

void Daemon::observe(const gpu::Snapshot& merged, const std::map<unsigned, gpu::Activity>& classes) {
  const long long now = now_ms();
  std::lock_guard lock(state_->use_mutex);
  state_->gpu_count = static_cast<unsigned>(merged.devices.size());
  for (const auto& d : merged.devices) {
    if (!d.id.uuid) continue;
    GpuUse& g = state_->use[*d.id.uuid];
    g.index = d.id.index;
    g.util = d.sample.util_gpu_pct;
    g.pids.clear();
    for (const auto& p : d.processes) g.pids.push_back(p.pid);
    const auto c = classes.find(d.id.index);
    const bool idle = c != classes.end() && (c->second == gpu::Activity::Idle || c->second == gpu::Activity::ReservedIdle);
    if (!idle) g.idle_since_ms = 0;
    else if (g.idle_since_ms == 0) g.idle_since_ms = now;
  }
}

}  // namespace tarmac::sched
