// The inside of the agent's scheduler (daemon.hpp): the Daemon's state and the helpers its three
// source files share. daemon.cpp: the start, the loop, reading the queue back after a crash;
// daemon_jobs.cpp: starting, watching and ending jobs, the scheduling pass, leases and flags;
// daemon_requests.cpp: the socket's requests. Private to src/tarmac/sched.
#pragma once

#include <fcntl.h>
#include <pwd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "tarmac/sched/client.hpp"
#include "tarmac/sched/daemon.hpp"
#include "tarmac/sched/job.hpp"
#include "tarmac/sched/jobdb.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/sched/supervise.hpp"
#include "tarmac/sched/wire.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sched::detail {

using nlohmann::json;


inline constexpr long long kHour = 3600LL * 1000;
inline constexpr int kTickMs = 250;           // the loop's longest sleep
inline constexpr long long kRetryMs = 1000;   // a pass over a queue that could not start anything, at most this often
inline constexpr long long kAcceptPauseMs = 100;  // out of descriptors: accept again after this
inline constexpr long long kRoomMarginMs = 5000;   // after preempted jobs end, how long their room is awaited
inline constexpr long long kEndedPidMs = 10000;    // how long an ended job's pid is known as gone
inline constexpr long long kRecheckMs = 25;        // a pass again this soon after a job ends
inline constexpr long long kMinPassGapMs = 10;     // passes for new submissions, at most this often

inline long long now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

inline int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
inline int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}
inline constexpr long long kLockWaitMs = 200;  // the longest the loop waits for the lock directory's lock
// Any user may flock the shared directory's .lock: held longer than this, the pass goes on without
// it (its own jobs and leases are busy whatever the files say), so nobody can stop the queue.
inline constexpr long long kLockStuckMs = 10000;

// What a job's ID.lock says about its wrapper: whether it lives (holds the lock) and, once it has
// written them, its pid and start time.
struct WrapperProbe {
  bool alive = false;
  int pid = 0;  // 0 until the wrapper has written "pid starttime"
  unsigned long long start = 0;
};

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

// A request's answer when it fails: the words, and how the client should exit.
inline json failure(const std::string& code, const std::string& message) {
  return json{{"ok", false}, {"code", code}, {"error", message}};
}

inline std::optional<std::vector<std::string>> string_list(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string()) return std::nullopt;
    out.push_back(v.get<std::string>());
  }
  return out;
}

// The name to show for `uid` (the number when it has no passwd entry). Only a name: a job's gid and
// groups come from its submitter's credentials, never from a lookup of this name.
inline std::string user_name(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) return found->pw_name;
  return std::to_string(uid);
}

inline std::string indices_text(const std::vector<unsigned>& v) {
  std::string out;
  for (unsigned i : v) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

// The TARMAC_JOB_ID in a process's environment, "" when it has none or cannot be read.
inline std::string job_id_of(unsigned pid) {
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
inline std::optional<std::string> read_small(const std::string& path) {
  auto text = util::read_file(path);
  if (!text) return std::nullopt;
  return std::string(util::trim(*text));
}


}  // namespace tarmac::sched::detail

namespace tarmac::sched {

using detail::GpuUse;
using detail::json;
using detail::Runtime;
using detail::WrapperProbe;

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
  // The loop's timers, on the monotonic clock (clock()): a step of the wall clock moves none of them.
  long long last_pass_ms = 0;
  long long last_slow_tick_ms = 0;
  long long accept_after_ms = 0;     // out of descriptors: the listener rests until then
  std::map<unsigned, std::string> job_of_pid;  // environ cache
  std::map<unsigned, long long> ended_pids;    // leaders of jobs that ended lately -> when
  long long recheck_at_ms = 0;                 // a pass due soon after a job ended (clock()); 0: none
  std::set<std::pair<long long, unsigned>> flagged;
  long long lock_warned_ms = 0;  // when a held directory lock was last logged
  long long lock_missed_since_ms = 0;  // since when the directory lock could not be had; 0 when it could

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

  // Monotonic milliseconds for the loop's timers and the clients' clocks (DaemonOptions::monotonic_ms,
  // injected by tests); wall time (now_ms) only for what is recorded or shown.
  long long clock() const { return opt.monotonic_ms ? opt.monotonic_ms() : sched::monotonic_ms(); }

  void log(util::LogLevel level, const std::string& message) const {
    if (opt.log) opt.log(level, message);
  }

  std::string file(long long id, const char* ext) const { return fmt::format("{}/{}.{}", jobs_dir, id, ext); }
  std::string log_file(long long id) const { return fmt::format("{}/{}.log", logs_dir, id); }

  // The submitter's environment is kept beside the job files (mode 0600 in a 0700 directory), not in
  // the store, which other users may read.
  bool save_env(const Job& job);
  void load_env(Job& job);
  void persist(const Job& job);
  void record_event(std::optional<unsigned> gpu, const std::string& kind, const std::string& detail);

  // The files of one run of the job (a preempted job is started again with new ones).
  void remove_job_files(long long id);

  // --- events to attached clients ---

  void tell_watchers(const Job& job, const char* event);
  void finish(Job& job, JobState state, const std::string& reason);
  void remove_leases(const Job& job);

  // --- the wrapper of a running job ---

  void watch(Job& job, bool child);

  // Sends `sig` to the wrapper of `job` through its pidfd (never by a bare pid, which may be 0 or
  // reused); false when there is no wrapper to signal.
  bool signal_job(Job& job, int sig);

  // The wrapper's lock file of job `id`, read without waiting.
  WrapperProbe probe_wrapper(long long id) const;

  // The wrapper of `job` is gone: record how the job ended (or requeue a preempted one).
  void on_wrapper_gone(Job& job);

  // Starts `job` on `chosen` (indices) / `uuids`; under the lease directory's lock.
  bool start_job(Job& job, const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids);

  // --- the scheduling pass ---

  // A snapshot with processes (and the topology, read at the first one).
  Result<gpu::Snapshot> look();

  unsigned gpus_held_by(uid_t uid) const;

  // GPUs nobody else may be given: the live leases of the lock directory and, whatever its files
  // say (a user may remove or replace them), this agent's own running jobs and active leases.
  LeasedGpus busy_gpus(const std::vector<Lease>& live) const;

  // The lock directory's lock, waited for at most kLockWaitMs; logged (at most once a minute) when
  // someone holds it longer.
  std::optional<LeaseDir::DirLock> lock_dir_briefly();

  // Whether the directory lock has been out of reach for kLockStuckMs (someone holds it on purpose):
  // the pass then schedules without it rather than not at all.
  bool lock_stuck() const;

  bool ensure_backend();
  void pass();

  // --- leases and flags, every tick ---

  void slow_tick();
  void lease_notice(const Job& job, bool reclaimed, long long idle_since);
  void flag_outside(const std::map<std::string, GpuUse>& seen);

  // Wrappers watched without a pidfd (a kernel without pidfd_open): checked by pid and start time.
  void check_wrappers_without_pidfd();

  // --- recovery ---

  void recover();

  // --- requests ---

  json handle(Client& c, const json& req);
  unsigned known_gpu_count();

  // The checks a job or a lease of `n` GPUs must pass before it is queued; nullopt when it does.
  std::optional<json> check_request(uid_t uid, unsigned n);
  // A failure when `uid` already has scheduler.user_queued_cap jobs waiting; nullopt otherwise.
  std::optional<json> check_queued(uid_t uid) const;
  void take_credentials(const Client& c, Job& job);
  json submit(Client& c, const json& req);
  json list(const json& req);

  // The job `id` of the request, live or from the store; a failure answer when there is none.
  std::variant<Job*, json> find_job(const json& req, std::optional<JobKind> kind);
  std::optional<json> check_owner(const Client& c, const Job& job, const char* action);
  json wait_for(Client& c, const json& req);
  json cancel(Client& c, const json& req);
  json end_lease(Job& job, JobState state, const std::string& reason);
  json reserve(Client& c, const json& req);
  json release(Client& c, const json& req);
  json extend(Client& c, const json& req);

  // --- the socket's clients (daemon_clients.cpp) ---

  ClientLimits client_limits() const;
  // Accepts every pending connection, refusing (with a line that says why) those past the caps.
  void accept_clients();
  // Reads and answers c's requests while its answers are read.
  void serve_client(Client& c);
  // Sends `line` to c, dropping a client that lets its output pile up.
  void send(Client& c, const std::string& line);
  // Drops the clients that made no progress for the idle timeout; closes the finished ones.
  void close_clients();
  // When the next client is due to be dropped (clock()); LLONG_MAX for none.
  long long next_client_deadline() const;

  // --- the loop ---

  void run();
};

}  // namespace tarmac::sched
