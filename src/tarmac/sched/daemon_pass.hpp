// The scheduling pass (daemon_state.hpp). Private to src/tarmac/sched.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tarmac/sched/daemon_gpus.hpp"
#include "tarmac/sched/daemon_locks.hpp"
#include "tarmac/sched/daemon_table.hpp"
#include "tarmac/sched/daemon_wrappers.hpp"
#include "tarmac/sched/queue.hpp"
#include "tarmac/sched/settings.hpp"

namespace tarmac::sched {

// The scheduling pass: which waiting leases are given, which queued jobs start where, and which
// backfill jobs stop to make room for a lease or a normal job, with queue.hpp's pure policies deciding (fair order, caps, what would fit
// without the backfill jobs) and pick() choosing the GPUs; and when a pass is due (something
// changed, a job ended, or kRetryMs went by). Owns the pass's timers, on the monotonic clock, how
// long each job that preempted waits for its room before it may preempt again, and how long each
// waiting lease may wait.
class Pass {
 public:
  // Starts `job` on `chosen` (indices) / `uuids`; false when it could not.
  using Start = std::function<bool(Job& job, const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids)>;

  Pass(const SchedulerConfig& config, JobTable& table, GpuView& gpus, LeaseFiles& files, Wrappers& wrappers,
       Start start, util::LogSink log)
      : config_(config), table_(table), gpus_(gpus), files_(files), wrappers_(wrappers), start_(std::move(start)),
        log_(std::move(log)) {}

  // Called before an agent's backfill job is sent SIGTERM to make room (DaemonOptions::before_preempt).
  using BeforePreempt = std::function<void(const Job& backfill, const Job& for_job)>;
  void before_preempt(BeforePreempt hook) { before_preempt_ = std::move(hook); }

  // The external backfill servers now (DaemonOptions::external_backfill), and the call that asks one
  // of them to give back the GPUs `uuids` to `for_job` (DaemonOptions::yield_external).
  using ExternalList = std::function<std::vector<ExternalBackfill>()>;
  using YieldExternal =
      std::function<void(const std::string& name, const std::vector<std::string>& uuids, const Job& for_job)>;
  void external(ExternalList list, YieldExternal yield) {
    external_list_ = std::move(list);
    yield_external_ = std::move(yield);
  }
  // The external backfill servers now (none without the hook).
  [[nodiscard]] std::vector<ExternalBackfill> external_backfill() const {
    return external_list_ ? external_list_() : std::vector<ExternalBackfill>{};
  }

  // Whether a client still waits for lease `id` (follows it on the socket).
  using Awaited = std::function<bool(long long id)>;
  void awaited(Awaited check) { awaited_ = std::move(check); }

  // How long a lease that waits for backfill to yield may wait, and for how long it is then given.
  struct LeaseWait {
    long long until_ms = 0;  // monotonic: then it is withdrawn
    long long wait_ms = 0;
    long long for_ms = 0;
  };
  // Lease `id`, queued in the table, is given by a pass when its GPUs are free (backfill on them is
  // preempted), or withdrawn at `wait.until_ms` or when no client awaits it any more.
  void lease_waits(long long id, LeaseWait wait) { lease_waits_[id] = wait; }

  // Something changed (a submission, an end): a pass is due soon (a burst of them is one pass).
  void want() { dirty_ = true; }
  // A job ended at `now_ms`: a pass is due in a moment, whatever else is due.
  void recheck_soon(long long now_ms);
  // The next time (monotonic) a pass is due for a change or a job's end; LLONG_MAX for none.
  [[nodiscard]] long long next_due() const;
  // Runs a pass when one is due at `now_ms` (monotonic; `now_unix_ms` is the wall clock's now).
  void run_if_due(long long now_ms, long long now_unix_ms);
  // One pass: gives the leases that wait, starts what can start, preempts backfill for the leases
  // and normal jobs that wait.
  void run(long long now_ms, long long now_unix_ms);

 private:
  // One pass's view: the GPUs as they are, who holds which, and what already found no room.
  struct Round {
    long long now_ms = 0;       // monotonic
    long long now_unix_ms = 0;  // wall, for the leases' expiry and fairness
    gpu::Snapshot snapshot;
    LeasedGpus leased;
    std::set<std::string> backfill_gpus;  // GPUs of running backfill jobs not yet being stopped, and of external servers
    std::vector<ExternalBackfill> external;  // the external backfill servers (Pass::external)
    std::vector<PickRequest> no_room;     // requests that found no room in this pass
    [[nodiscard]] std::vector<std::string> uuids_of(const PickResult& picked) const {
      return given_uuids(snapshot, picked);
    }
  };

  [[nodiscard]] std::optional<Round> begin(long long now_ms, long long now_unix_ms);
  // Ends the waiting leases whose wait ran out or that no client awaits any more.
  void withdraw_leases(long long now_ms);
  // Gives waiting leases their GPUs, in the order asked; true when one of them waits for room.
  bool give_leases(Round& round, const std::vector<Job*>& waiting);
  // Gives `lease`, or makes room for it; false when it waits for room.
  bool give_lease(Round& round, Job& lease);
  // Starts normal jobs in fair order; true when one of them waits for room (then no backfill starts).
  bool start_normal(Round& round, const std::vector<const Job*>& waiting);
  // Starts `job`, or makes room for it; false when it waits for room.
  bool start_normal(Round& round, Job& job);
  // Preempts the backfill jobs whose GPUs would let `job` (a normal job or a lease) start; true when
  // it waits for backfill jobs to yield (preempted now or before; its reason says which).
  bool make_room(Round& round, Job& job);
  void preempt(Round& round, Job& backfill, const Job& job);
  // Asks external server `name` to unload from those of the GPUs `room` it is on, for `job`.
  void yield_external(Round& round, const std::string& name, const std::vector<std::string>& room, const Job& job);
  // Starts backfill jobs, in submission order, on GPUs idle for scheduler.backfill_idle.
  void start_backfill(Round& round, std::vector<Job*> waiting);
  // Starts `job` on `chosen`, marking its GPUs taken in `taken`.
  bool start_on(const Round& round, Job& job, const PickResult& picked, LeasedGpus& taken);
  void log(util::LogLevel level, const std::string& message) const {
    if (log_) log_(level, message);
  }

  const SchedulerConfig& config_;
  JobTable& table_;
  GpuView& gpus_;
  LeaseFiles& files_;
  Wrappers& wrappers_;
  Start start_;
  util::LogSink log_;
  BeforePreempt before_preempt_;
  ExternalList external_list_;
  YieldExternal yield_external_;
  Awaited awaited_;

  bool dirty_ = true;             // something changed: run a pass
  long long last_pass_ms_ = 0;
  long long recheck_at_ms_ = 0;   // a pass due soon after a job ended; 0: none
  std::map<long long, long long> room_until_;  // a normal job that preempted: no more preemption for it until then
  std::map<long long, LeaseWait> lease_waits_;  // the leases that wait to be given
};

}  // namespace tarmac::sched
