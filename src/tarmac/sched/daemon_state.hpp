// The inside of the agent's scheduler (daemon.hpp): Daemon::State composes the parts, each with one
// job and each in its own files, and does what spans them (starting a job, seeing its wrapper end,
// recovery, the loop). Private to src/tarmac/sched.
//
//   JobTable     (daemon_table)     the jobs and leases that have not ended, their files, the store, fairness usage
//   Wrappers     (daemon_wrappers)  the runtime of running jobs: pidfds, reaping, signals, attached output
//   Clients      (daemon_clients)   the socket's connections: accept, serve, send, close
//   Requests     (daemon_requests)  what each request may do, and its answer
//   GpuView      (daemon_gpus)      the scheduler's backend, the sampler's latest sample, the GPUs given out
//   LeaseFiles   (daemon_locks)     the shared lock directory: its lock and this agent's lease files
//   Pass         (daemon_pass)      which queued job starts where, what is preempted, when a pass is due
//   IdleLeases   (daemon_leases)    leases unused or out of time: warned, reclaimed, ended
//   OutsideUse   (daemon_flags)     jobs whose processes use GPUs they were not given
//
// daemon.cpp: the start, the loop, reading the queue back after a crash; daemon_jobs.cpp: starting
// a job under its wrapper and seeing the wrapper end.
#pragma once

#include <atomic>
#include <fmt/format.h>
#include <string>
#include <thread>
#include <vector>

#include "tarmac/sched/daemon.hpp"
#include "tarmac/sched/daemon_clients.hpp"
#include "tarmac/sched/daemon_flags.hpp"
#include "tarmac/sched/daemon_gpus.hpp"
#include "tarmac/sched/daemon_leases.hpp"
#include "tarmac/sched/daemon_locks.hpp"
#include "tarmac/sched/daemon_pass.hpp"
#include "tarmac/sched/daemon_requests.hpp"
#include "tarmac/sched/daemon_table.hpp"
#include "tarmac/sched/daemon_wrappers.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/fd.hpp"

namespace tarmac::sched {

using Runtime = Wrappers::Runtime;  // start_job's name for a job's runtime

// The State is also the AgentJobs a part of the agent is handed on its tick (DaemonOptions::agent_tick).
struct Daemon::State final : AgentJobs {
  // The store, the lock directory and the socket are opened by Daemon::start; `wake` is the eventfd
  // that stops the loop's wait.
  State(DaemonOptions options, JobDb db, LeaseDir dir, Listener listener, util::Fd wake);

  DaemonOptions opt;
  JobTable table;
  Wrappers wrappers;
  GpuView gpus;
  LeaseFiles files;
  IdleLeases idle;
  OutsideUse outside;
  Pass pass;
  Requests requests;
  Clients clients;
  util::Fd wake_fd;
  std::atomic<bool> stop{false};
  std::thread thread;
  long long last_slow_tick_ms = 0;  // clock()
  // An agent's job started, was requeued or ended: its part's tick runs at the end of this turn of
  // the loop (outside the pass, which holds pointers into the table), not up to kTickMs later.
  bool agent_tick_due = false;

  // Monotonic milliseconds for the loop's timers and the clients' clocks (DaemonOptions::monotonic_ms,
  // injected by tests); wall time (util::wall_ms) only for what is recorded or shown.
  long long clock() const { return opt.monotonic_ms ? opt.monotonic_ms() : util::monotonic_ms(); }

  void log(util::LogLevel level, const std::string& message) const {
    if (opt.log) opt.log(level, message);
  }
  std::string file(long long id, const char* ext) const { return table.file(id, ext); }
  std::string log_file(long long id) const { return table.log_file(id); }

  // A job started, was queued again or ended: its followers hear it, its ended wrapper is let go, and
  // a pass is due for what it freed.
  void on_job_event(const Job& job, JobEvent event);

  // --- a job and its wrapper (daemon_jobs.cpp) ---

  // Starts `job` on `chosen` (indices) / `uuids`; under the lease directory's lock.
  bool start_job(Job& job, const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids);
  // Writes the spec the wrapper reads: what to run, as whom, with which GPUs visible.
  bool write_spec(const Job& job, const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids);
  // Creates and locks job's ID.lock for its wrapper to inherit; -1 (logged) when it cannot.
  int lock_for_wrapper(const Job& job);
  // The wrapper `pid` runs: the job is running, its leases written, its wrapper watched.
  void record_start(Job& job, int pid, const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids);
  // The wrapper of `job` is gone: record how the job ended (or requeue a preempted one).
  void on_wrapper_gone(Job& job);
  // How `job` ended, from its ID.exit (or lost, without one).
  void record_end(Job& job);

  // --- the agent's own jobs (AgentJobs, daemon_jobs.cpp) ---

  [[nodiscard]] Result<long long> submit(Job job) override;
  void cancel(long long id, const std::string& why) override;
  [[nodiscard]] const Job* find(long long id) const override;
  [[nodiscard]] std::vector<long long> unfinished() const override;
  [[nodiscard]] std::set<std::string> given_gpus() const override { return table.given_gpus(); }
  [[nodiscard]] std::set<std::string> gpus_of(const std::set<unsigned>& pids) const override;

  // --- recovery (daemon.cpp) ---

  void recover();
  enum class Recovered { Waiting, Reattached, Ended, Requeued };
  Recovered recover(Job job);
  // The GPUs the job's spec names (written before its wrapper starts), into job.gpus/gpu_uuids;
  // nothing when the spec cannot be read.
  void read_spec_gpus(Job& job) const;

  // --- the loop (daemon.cpp) ---

  void run();
  // Every kTickMs: idle leases, jobs outside their GPUs, wrappers watched without a pidfd, the
  // agent's tick.
  void slow_tick();
  // DaemonOptions::agent_tick with this State as the AgentJobs.
  void tick_agent();
};

}  // namespace tarmac::sched
