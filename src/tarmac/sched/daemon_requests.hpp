// The scheduler's socket requests (daemon_state.hpp). Private to src/tarmac/sched.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>

#include "tarmac/sched/client.hpp"
#include "tarmac/sched/daemon.hpp"
#include "tarmac/sched/daemon_gpus.hpp"
#include "tarmac/sched/daemon_leases.hpp"
#include "tarmac/sched/daemon_locks.hpp"
#include "tarmac/sched/daemon_pass.hpp"
#include "tarmac/sched/daemon_table.hpp"
#include "tarmac/sched/daemon_wrappers.hpp"
#include "tarmac/sched/settings.hpp"

namespace tarmac::sched {

// The socket's requests (docs/scheduler.md "The socket"): submit, jobs, wait, cancel, reserve,
// release, extend. Each one is checked (its fields, the caps, the caller's rights, which come from
// the connection's peer credentials and never from the request) and answered by acting on the parts
// it is given. Owns nothing.
class Requests {
 public:
  using json = nlohmann::json;

  Requests(const SchedulerConfig& config, JobTable& table, Wrappers& wrappers, GpuView& gpus, LeaseFiles& files,
           IdleLeases& idle, Pass& pass, std::function<long long()> clock, util::LogSink log,
           MoreRequests more = {})
      : config_(config), table_(table), wrappers_(wrappers), gpus_(gpus), files_(files), idle_(idle), pass_(pass),
        clock_(std::move(clock)), log_(std::move(log)), more_(std::move(more)) {}

  // The answer to `req` from client `c`: {"ok": true, ...}, or a failure with its code and words;
  // ignored when the request called `defer` (MoreRequests: it is answered later).
  [[nodiscard]] json answer(Client& c, const json& req, const Defer& defer);

  // Records `job` (checked) in the store and the queue; `output` is its stdout and stderr until it
  // starts (empty: detached, its output to its log). The table's job, or the failure to answer.
  [[nodiscard]] std::variant<Job*, json> record(Job job, std::vector<util::Fd> output);
  // Ends job `job`: a queued one at once (it leaves the table: `job` is gone after), a running one
  // by SIGTERM (then its grace, SIGKILL).
  void end_job(Job& job, const std::string& why);

 private:
  json submit(Client& c, const json& req);
  // Records `job` (checked) in the store and the queue; an attached job takes c's stdout and stderr.
  json queue(Client& c, Job job);
  json list(const json& req);
  json wait_for(Client& c, const json& req);
  json cancel(Client& c, const json& req);
  json reserve(Client& c, const json& req);
  // Records lease `job` and gives it the GPUs `chosen` / `uuids` for `for_ms`.
  json give_lease(Job job, const std::vector<unsigned>& chosen, const std::vector<std::string>& uuids, long long for_ms);
  // Records lease `job` as waiting for the backfill jobs of `room` to yield (the pass preempts them
  // and gives it), with c following it for up to `wait`.
  json wait_for_backfill(Client& c, Job job, const BackfillRoom& room, const Pass::LeaseWait& wait);
  json release(Client& c, const json& req);
  // Ends lease `job` at its owner's (or root's) request: a given one is released, a waiting one cancelled.
  json end_lease_for(const Client& c, Job& job);
  json extend(Client& c, const json& req);

  // The checks a job or a lease of `n` GPUs of `uid` must pass before it is queued; nullopt when it does.
  [[nodiscard]] std::optional<json> check_size(uid_t uid, unsigned n);
  // A failure when `uid` already has scheduler.user_queued_cap jobs waiting; nullopt otherwise.
  [[nodiscard]] std::optional<json> check_queued(uid_t uid) const;
  // The job `id` of the request, live; a failure answer when it has ended or there is none.
  [[nodiscard]] std::variant<Job*, json> find_job(const json& req, std::optional<JobKind> kind);

  const SchedulerConfig& config_;
  JobTable& table_;
  Wrappers& wrappers_;
  GpuView& gpus_;
  LeaseFiles& files_;
  IdleLeases& idle_;
  Pass& pass_;
  std::function<long long()> clock_;
  util::LogSink log_;
  MoreRequests more_;
};

}  // namespace tarmac::sched
