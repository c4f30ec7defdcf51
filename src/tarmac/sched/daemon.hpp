// The agent's scheduler (docs/scheduler.md "Agent mode"): a thread that owns the queue. It answers
// the socket, keeps jobs and leases in the store, starts each job under its wrapper
// (`tarmac job-shim`), watches the wrappers, preempts backfill, reclaims idle leases, and re-attaches
// what was running when it starts again after a crash.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tarmac/util/log.hpp"
#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/backend.hpp"
#include "tarmac/sched/job.hpp"
#include "tarmac/sched/queue.hpp"
#include "tarmac/sched/settings.hpp"
#include "tarmac/sched/wire.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::sched {

// A lease that sat idle: warned about (reclaimed false), or taken back (reclaimed true).
struct LeaseNotice {
  bool reclaimed = false;
  long long id = 0;
  std::string user;
  std::vector<unsigned> gpus;
  std::vector<std::string> uuids;
  long long idle_since_unix_ms = 0;
  std::string summary;  // one line for people
};

// The last step of a request answered later (AnswerLater): run on the scheduler's thread, it
// returns the answer.
using Finish = std::function<nlohmann::json()>;
// Posts the last step of a request that is answered later, from any thread, once: the scheduler's
// thread runs it soon after and sends what it returns. Meanwhile the client waits: nothing more of
// what it sends is read, and it is not dropped as idle (it is when it hangs up). A client that hung
// up before gets no answer, but its Finish still runs (what it does must be done either way). One
// that is never posted leaves its client waiting until the client gives up: post every one.
using AnswerLater = std::function<void(Finish)>;
// What a request that is answered later is given: called (at most once, while answering), it says
// so and returns the request's AnswerLater; the request's own answer is then ignored.
using Defer = std::function<AnswerLater()>;

// Requests for another part of the agent on the scheduler's socket (backfill's `backfill_*`),
// answered on the scheduler's thread with the peer's credentials (SO_PEERCRED, never the request's
// word) and the descriptors that came with the request (what it does not take is closed): an
// answer, or nullopt when the op is not theirs. One whose work would hold the scheduler's thread
// (a batch's 200 MiB input to parse and store) hands it to a thread of its own and answers later
// (Defer). sched knows nothing of what they do.
using MoreRequests = std::function<std::optional<nlohmann::json>(const Peer&, std::vector<util::Fd>&,
                                                                 const nlohmann::json&, const Defer&)>;

// Jobs the agent runs on its own behalf (backfill's managed servers): queued, started, preempted
// and requeued like any job of the queue (a backfill one runs only on GPUs idle for
// scheduler.backfill_idle and yields to normal jobs), but asked for by a part of the agent rather
// than on the socket, as the account the part names. Used on the scheduler's thread only, from
// DaemonOptions::agent_tick.
class AgentJobs {
 public:
  virtual ~AgentJobs() = default;
  // Queues `job` (what to run, as whom, how many GPUs); it is marked the agent's, detached (its
  // output to the scheduler's log of it). Root (uid 0) is refused. The job's id.
  [[nodiscard]] virtual Result<long long> submit(Job job) = 0;
  // Ends job `id`: a queued one at once, a running one by SIGTERM, grace, SIGKILL.
  virtual void cancel(long long id, const std::string& why) = 0;
  // The job as the queue has it now; nullptr once it has ended.
  [[nodiscard]] virtual const Job* find(long long id) const = 0;
  // The agent's jobs that have not ended (after a restart, those no part of the agent knows).
  [[nodiscard]] virtual std::vector<long long> unfinished() const = 0;
  // The UUIDs of the GPUs given now to jobs (backfill ones too) and to leases.
  [[nodiscard]] virtual std::set<std::string> given_gpus() const = 0;
  // The UUIDs of the GPUs on which the sampler last saw one of `pids`.
  [[nodiscard]] virtual std::set<std::string> gpus_of(const std::set<unsigned>& pids) const = 0;
};

struct DaemonOptions {
  SchedulerConfig config;
  std::string socket_path;
  std::string lock_dir;
  std::string state_dir;  // job files go to <state_dir>/jobs
  std::string db_path;
  std::string shim_exe = "/proc/self/exe";  // the tarmac binary that has `job-shim`
  // A backend of the scheduler's own (the sampler keeps its own); opened when first needed.
  std::function<Result<std::unique_ptr<gpu::Backend>>()> open_backend;
  util::LogSink log;
  std::function<void(const LeaseNotice&)> notify;  // from the scheduler's thread
  // Monotonic milliseconds for every timer of the scheduler (the loop's, the clients' idle clocks,
  // the leases' idle clocks, how long a GPU has been idle for backfill, the wait for a preempted
  // job's room); empty for util::monotonic_ms. Wall time only stamps what is recorded or shown.
  // Tests inject one.
  std::function<long long()> monotonic_ms;
  MoreRequests more_requests;
  // Called on the scheduler's thread about every 250 ms, and at once after one of the agent's jobs
  // started, was requeued or ended, for parts of the agent that run jobs of their own (AgentJobs);
  // it must not block for long: the queue waits meanwhile.
  std::function<void(AgentJobs&)> agent_tick;
  // Called on the scheduler's thread when `backfill`, an agent's job, is preempted for `for_job`,
  // before its SIGTERM: the part of the agent that runs it lets go of it first (backfill stops
  // sending to the server). The queue waits meanwhile: it should take about a second at most.
  std::function<void(const Job& backfill, const Job& for_job)> before_preempt;
  // Backfill that runs outside the scheduler's jobs (queue.hpp ExternalBackfill: the agent's external
  // LLM servers): asked for at each pass, on the scheduler's thread, so it must answer at once (a
  // copy of what another thread found). A job or lease that would fit if one of them unloaded waits
  // for it, and yield_external asks it to (on the scheduler's thread: it must not block either).
  std::function<std::vector<ExternalBackfill>()> external_backfill;
  std::function<void(const std::string& name, const std::vector<std::string>& uuids, const Job& for_job)>
      yield_external;
};

class Daemon {
 public:
  // Opens the store and the socket, reads back the jobs that had not ended (re-attaching those that
  // still run), and starts the thread. Fails when the socket or the store cannot be used.
  [[nodiscard]] static Result<std::unique_ptr<Daemon>> start(DaemonOptions options);
  ~Daemon();  // stops the thread; running jobs keep running
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // The latest sample (the sampler's thread): who uses which GPU, and each GPU's activity class.
  void observe(const gpu::Snapshot& merged, const std::map<unsigned, gpu::Activity>& classes);

  // The UUIDs of the GPUs given out now, to running jobs and to leases (any thread).
  [[nodiscard]] std::set<std::string> given_gpus() const;

  struct State;

 private:
  explicit Daemon(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tarmac::sched
