// The agent's batches (docs/backfill.md "Commands"): the `backfill_*` requests of the scheduler's
// socket, answered on its thread. The agent (root) never opens a path a user named: the CLI, as the
// user, hands over the input (a sealed memfd copy, which cannot change or block while it is read)
// and the output (a new or empty regular file the user owns) by SCM_RIGHTS; who may see or cancel
// a batch follows from the peer's uid (SO_PEERCRED).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/backfill/batch_db.hpp"
#include "tarmac/backfill/dispatch.hpp"
#include "tarmac/backfill/external.hpp"
#include "tarmac/backfill/intake.hpp"
#include "tarmac/backfill/managed.hpp"
#include "tarmac/backfill/quota.hpp"
#include "tarmac/backfill/settings.hpp"
#include "tarmac/sched/wire.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::backfill {

struct ServiceOptions {
  std::string db_path;
  util::LogSink log;
  InputLimits limits;
  BatchQuota quota;
  BackfillConfig config;     // the servers batches may name
  DispatchOptions dispatch;  // its db_path and log default to the ones above
  ManagedOptions managed;    // its config and log are the ones above
  ExternalOptions external;  // likewise
};

// The server a batch that asks for `asked` ("" for the default) is sent to: the one configured of
// that name; with none asked, the only one configured. The error names what is configured.
[[nodiscard]] Result<std::string> pick_server(const BackfillConfig& config, const std::string& asked);

// A batch's figures for people and scripts (`tarmac backfill status`), at `now_ms`.
[[nodiscard]] nlohmann::json batch_json(const Batch& batch, const Progress& progress, long long now_ms);

// A batch being sent to a managed server that runs on a GPU: what the dashboard shows on its card
// (not whose it is, its id or its name: serve/metrics.hpp GpuBatch).
struct BatchOnGpu {
  std::string uuid;  // the GPU's
  std::string model;
  std::string server;
  long long answered = 0;  // done or failed
  long long requests = 0;
};

// "HH:MM-HH:MM" (00:00 to 23:59, the end may be before the start: a window over midnight); an
// error naming what is wrong otherwise.
[[nodiscard]] Result<void> check_window(std::string_view window);

class Service {
 public:
  // Opens the batches' tables in the store at options.db_path, starts the dispatcher, and reads
  // back the unfinished batches: their outputs were the agent's before it stopped, so each waits for
  // its owner to hand it over again (`tarmac backfill resume`), and is then sent on.
  [[nodiscard]] static Result<std::unique_ptr<Service>> open(ServiceOptions options);

  // The answer to a backfill_* request from `peer` with descriptors `fds`; nullopt for other ops.
  // A submission is answered later (`defer`), once its input is read and stored (intake.hpp).
  [[nodiscard]] std::optional<nlohmann::json> answer(const sched::Peer& peer, std::vector<util::Fd>& fds,
                                                     const nlohmann::json& req, const sched::Defer& defer);
  // The scheduler's thread, about every 250 ms (sched::DaemonOptions::agent_tick): the managed
  // servers are started, followed and stopped for the batches that want them.
  void tick(sched::AgentJobs& jobs);
  // The scheduler's thread, before it signals a preempted job of the agent's (DaemonOptions::before_preempt).
  void before_preempt(const sched::Job& job, const sched::Job& for_job) { managed_->before_preempt(job, for_job); }
  // The external servers whose processes are known (DaemonOptions::external_backfill); any thread.
  [[nodiscard]] std::vector<sched::ExternalBackfill> external_backfill() const { return external_->holders(); }
  // The scheduler's thread: external server `name` is to give back GPUs `uuids` (DaemonOptions::yield_external).
  void yield_external(const std::string& name, const std::vector<std::string>& uuids, const sched::Job& for_job) {
    external_->yield(name, uuids, for_job);
  }

  // The batches on each GPU now (the dashboard's cards), as the last tick saw them; safe from any thread.
  [[nodiscard]] std::vector<BatchOnGpu> on_gpus() const {
    std::lock_guard lock(on_gpus_mutex_);
    return on_gpus_;
  }

  // What the dispatcher has done and is doing (/metrics); safe from any thread.
  [[nodiscard]] DispatchCounters counters() {
    auto c = dispatcher_->counters();
    c.yields = managed_->yield_count() + external_->yield_count();
    c.yield_ms = managed_->yield_ms() + external_->yield_ms();
    return c;
  }

 private:
  Service(ServiceOptions options, BatchDb db, std::unique_ptr<Dispatcher> dispatcher)
      : opt_(std::move(options)),
        db_(std::move(db)),
        dispatcher_(std::move(dispatcher)),
        managed_(std::make_unique<ManagedServers>(opt_.managed, db_, *dispatcher_)),
        external_(std::make_unique<ExternalServers>(opt_.external, db_, *dispatcher_)) {}
  nlohmann::json submit(const sched::Peer& peer, std::vector<util::Fd>& fds, const nlohmann::json& req,
                        const sched::Defer& defer);
  // The last step of a submission, once the intake has read and stored it (or refused it): the
  // batch is queued and sent, and the answer says so.
  nlohmann::json stored(Intaken in);
  // The refusal of a new output that a cancelled batch's writer still writes to; nullopt if none.
  [[nodiscard]] std::optional<nlohmann::json> refuse_draining(const struct stat& output);
  nlohmann::json status(const sched::Peer& peer, const nlohmann::json& req);
  nlohmann::json cancel(const sched::Peer& peer, const nlohmann::json& req);
  nlohmann::json resume(const sched::Peer& peer, std::vector<util::Fd>& fds, const nlohmann::json& req);
  // The batch `id` of the request when `peer` may act on it; else the failure to answer.
  [[nodiscard]] Result<Batch> find(const sched::Peer& peer, const nlohmann::json& req);
  [[nodiscard]] nlohmann::json answer_batch(const Batch& batch);
  [[nodiscard]] nlohmann::json answer_batch(long long id);
  // Hands batch `batch`'s output to the dispatcher, which sends its pending requests.
  [[nodiscard]] Result<Reconciled> send(const Batch& batch, util::Fd output);
  void not_sent(Batch& batch, const Error& why);
  void log(util::LogLevel level, const std::string& message) const;
  // Reads on_gpus_ anew from the servers' jobs and batches, at most once a second (service_gpus.cpp).
  void publish_on_gpus(const sched::AgentJobs& jobs);

  ServiceOptions opt_;
  BatchDb db_;
  std::unique_ptr<Dispatcher> dispatcher_;  // holds the outputs of the batches being sent
  std::unique_ptr<ManagedServers> managed_;  // before the dispatcher in destruction: it stops its sending
  std::unique_ptr<ExternalServers> external_;  // likewise
  mutable std::mutex on_gpus_mutex_;
  std::vector<BatchOnGpu> on_gpus_;  // under on_gpus_mutex_
  long long on_gpus_at_ms_ = 0;      // monotonic; scheduler's thread
  std::vector<std::pair<std::string, long long>> on_gpus_key_;  // (GPU UUID, batch) last published
  // Last: stopped first, before what the Finish it posts uses.
  std::unique_ptr<Intake> intake_;
};

}  // namespace tarmac::backfill
