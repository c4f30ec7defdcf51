// The dispatcher: a batch's start, stop, sending again and end (dispatch.hpp, docs/backfill.md
// "Dispatch"); its senders are dispatch_send.cpp's, its writer dispatch_write.cpp's.
#include "tarmac/backfill/dispatch.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>

#include "dispatch_run.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/clock.hpp"

namespace tarmac::backfill {

using dispatch_detail::local_minute_now;

Result<std::unique_ptr<Dispatcher>> Dispatcher::open(DispatchOptions options) {
  // Each batch has a connection of its own (Run::db); this one only finds a store it cannot use now.
  TARMAC_TRY(BatchDb::open(options.db_path));
  if (!options.local_minute) options.local_minute = local_minute_now;
  return std::unique_ptr<Dispatcher>(new Dispatcher(std::move(options)));
}

Dispatcher::Dispatcher(DispatchOptions options) : opt_(std::move(options)) {}

Dispatcher::~Dispatcher() {
  std::vector<long long> ids;
  {
    std::lock_guard lock(runs_mutex_);
    for (const auto& [id, run] : runs_) ids.push_back(id);
  }
  for (const long long id : ids) (void)release(id);
  // A writer stuck in a write uses this dispatcher: waited for (the agent's stop waits on a hung
  // file system as any process writing to it would).
  for (auto& run : draining_) {
    for (auto& t : run->workers) t.join();
  }
}

void Dispatcher::log(util::LogLevel level, const std::string& message) const {
  if (opt_.log) opt_.log(level, message);
}

Result<Reconciled> Dispatcher::start(const Batch& batch, const ServerConfig& server, util::Fd output, bool paused) {
  // Without libcurl every request would fail the same way: say so once, and send nothing.
  TARMAC_TRY(net::available());
  reap_finished();
  {
    std::lock_guard lock(runs_mutex_);
    if (runs_.count(batch.id) > 0) {
      return make_error(Error::Code::Invalid, fmt::format("batch {} is being sent already", batch.id));
    }
  }
  auto run = std::make_unique<Run>();
  run->batch = batch;
  run->server = server;
  if (!server.server_user.empty()) {
    TARMAC_TRY_ASSIGN(run->server_uid, server_user_uid(server.server_user));
  }
  TARMAC_TRY_ASSIGN(auto db, BatchDb::open(opt_.db_path));
  run->db = std::make_unique<BatchDb>(std::move(db));
  struct stat st {};
  if (::fstat(output.get(), &st) != 0) return make_error(Error::Code::Io, "cannot look at the batch's output");
  run->output_dev = st.st_dev;
  run->output_ino = st.st_ino;
  {
    // A cancelled batch whose writer is still in a write (a hung file system) owns the file, and
    // its batch id, until that write returns: a second Run beside it would break exactly-once.
    std::lock_guard lock(runs_mutex_);
    for (const auto& d : draining_) {
      if (d->batch.id == batch.id || (d->output_dev == st.st_dev && d->output_ino == st.st_ino)) {
        return make_error(Error::Code::Invalid,
                          fmt::format("the output of batch {} is still being written by a cancelled batch whose last "
                                      "write has not returned (a hung file system?)",
                                      batch.id));
      }
    }
  }
  run->ledger = std::make_unique<Ledger>(*run->db, batch.id, std::move(output), opt_.io, opt_.hook);
  run->ledger->share_db(&run->db_mutex);
  Reconciled reconciled;
  TARMAC_TRY_ASSIGN(reconciled, run->ledger->reconcile(Ledger::InFlight::BackToPending));  // locks db_mutex
  {
    std::lock_guard db_lock(run->db_mutex);
    run->batch.state = BatchState::Running;
    if (run->batch.started_ms == 0) run->batch.started_ms = util::wall_ms();
    run->batch.reason = paused ? fmt::format("waiting for server {} to be started on idle GPUs", batch.server)
                               : fmt::format("sending to server {} ({})", batch.server, server.url);
    TARMAC_TRY(run->db->save_run(run->batch));
    run->stint = Run::Stint{util::wall_ms()};
  }
  if (paused) {
    run->stopped = true;  // as after stop(): go() starts its workers
  } else if (auto started = start_workers(*run); !started.ok()) {
    return started.take_error();  // its threads have ended
  }
  std::lock_guard lock(runs_mutex_);
  runs_[batch.id] = std::move(run);
  return reconciled;
}

unsigned Dispatcher::claim_threads(unsigned wanted) {
  unsigned have = threads_.load();
  for (;;) {
    const unsigned left = have >= opt_.max_threads ? 0 : opt_.max_threads - have;
    if (left < 2) return 0;
    const unsigned senders = std::min(wanted, left - 1);
    if (threads_.compare_exchange_weak(have, have + senders + 1)) return senders;
  }
}

// min(--parallel, max_parallel) senders (fewer when the dispatcher runs max_threads) and a writer
// for `run`, which has none running. A thread the system will not make (its task limit) ends the
// ones made already: the batch is left stopped, and the agent goes on.
Result<void> Dispatcher::start_workers(Run& run) {
  const unsigned n = claim_threads(std::max(1U, std::min(run.batch.parallel, run.server.max_parallel)));
  if (n == 0) {
    return make_error(Error::Code::Io, fmt::format("the agent runs as many backfill threads as it may ({}); it "
                                                   "waits for other batches to end",
                                                   opt_.max_threads));
  }
  std::unique_lock lock(run.m);  // held while they are made: none of them sends before all are
  run.stopping = false;
  run.stopped = false;
  run.cancel.reset();
  run.waiting_for_window = false;
  run.workers.clear();
  run.senders = n;
  run.senders_left = n;
  run.workers_left = n + 1;
  try {
    for (unsigned i = 0; i < n; ++i) run.workers.emplace_back([this, &run] { work(run); });
    run.workers.emplace_back([this, &run] { write_answers(run); });
    return {};
  } catch (const std::system_error& e) {
    const auto made = static_cast<unsigned>(run.workers.size());  // senders only: the writer is made last
    threads_ -= n + 1 - made;
    run.stopping = true;
    run.senders_left = made;
    run.workers_left = made;
    lock.unlock();
    run.cv.notify_all();
    for (auto& t : run.workers) t.join();
    lock.lock();
    run.workers.clear();
    run.stopped = true;
    log(util::LogLevel::Warning, fmt::format("backfill: batch {}: cannot start its threads: {}", run.batch.id, e.what()));
    return make_error(Error::Code::Io, fmt::format("the agent cannot start the batch's threads now ({})", e.what()));
  }
}


long long Dispatcher::stop(long long id) {
  // The map is not held while the workers end (up to a second); only this thread removes runs.
  Run* run = nullptr;
  {
    std::lock_guard lock(runs_mutex_);
    const auto it = runs_.find(id);
    if (it == runs_.end()) return 0;
    run = it->second.get();
    std::lock_guard run_lock(run->m);
    if (run->stopped || run->stopping) return 0;
    run->stopping = true;
    run->cancel.set();  // the connections in flight are shut down now
  }
  run->cv.notify_all();
  // The senders end at once; the writer writes what they handed it, and may be stuck in a write.
  for (std::size_t i = 0; i + 1 < run->workers.size(); ++i) run->workers[i].join();
  bool writer_ended = false;
  {
    std::unique_lock lock(run->m);
    writer_ended = run->cv.wait_for(lock, std::chrono::milliseconds(opt_.writer_wait_ms),
                                    [&] { return run->workers_left == 0; });
  }
  if (writer_ended && !run->workers.empty()) run->workers.back().join();
  if (!writer_ended) {
    log(util::LogLevel::Warning,
        fmt::format("backfill: batch {}: its output's write has not returned in {} ms (a hung file system?): "
                    "stopped without it; its writer ends when the write does",
                    run->batch.id, opt_.writer_wait_ms));
  }
  {
    std::lock_guard db_lock(run->db_mutex);
    record_stint(*run, "stopped");
  }
  std::lock_guard lock(run->m);
  run->stopped = true;
  // Joined; or the writer alone, still running: joined by end_writer() once it has ended.
  run->workers.erase(run->workers.begin(), run->workers.end() - (writer_ended ? 0 : 1));
  const long long interrupted = run->interrupted;
  run->interrupted = 0;
  return interrupted;
}

Result<void> Dispatcher::go(long long id, const std::string& url) {
  Run* run = nullptr;
  {
    std::lock_guard lock(runs_mutex_);
    const auto it = runs_.find(id);
    if (it == runs_.end()) return make_error(Error::Code::NotFound, fmt::format("batch {} is not held", id));
    run = it->second.get();
    std::lock_guard run_lock(run->m);
    if (!run->stopped) return {};  // being sent
    if (run->workers_left > 0) {
      return make_error(Error::Code::Io, fmt::format("batch {}: its output's last write has not returned yet (a "
                                                     "hung file system?): it is sent again once it has",
                                                     id));
    }
    if (!url.empty()) run->server.url = url;  // stopped: no worker reads it now
  }
  for (auto& t : run->workers) t.join();  // a writer stop() left running, ended since
  run->workers.clear();
  set_reason(*run, fmt::format("sending to server {} ({})", run->batch.server, run->server.url));
  {
    std::lock_guard db_lock(run->db_mutex);
    run->stint = Run::Stint{util::wall_ms()};
  }
  return start_workers(*run);
}

void Dispatcher::note(long long id, const std::string& reason) {
  Run* run = nullptr;
  {
    std::lock_guard lock(runs_mutex_);
    const auto it = runs_.find(id);
    if (it == runs_.end()) return;
    run = it->second.get();
  }
  set_reason(*run, reason);  // only this thread removes runs: `run` outlives the call
}

long long Dispatcher::release(long long id) {
  const long long interrupted = stop(id);
  std::unique_ptr<Run> run;
  {
    std::lock_guard lock(runs_mutex_);
    const auto it = runs_.find(id);
    if (it == runs_.end()) return interrupted;
    run = std::move(it->second);
    runs_.erase(it);
    std::lock_guard run_lock(run->m);
    if (run->workers_left > 0) {  // its writer is stuck in a write: destroyed once that returns
      run->released = true;
      draining_.push_back(std::move(run));
      return interrupted;
    }
  }
  for (auto& t : run->workers) t.join();
  run.reset();  // its threads have ended: the ledger and the output close here
  return interrupted;
}

bool Dispatcher::drains_output(dev_t dev, ino_t ino) {
  reap_finished();
  std::lock_guard lock(runs_mutex_);
  return std::any_of(draining_.begin(), draining_.end(),
                     [&](const auto& run) { return run->output_dev == dev && run->output_ino == ino; });
}

bool Dispatcher::holds(long long id) {
  reap_finished();
  std::lock_guard lock(runs_mutex_);
  return runs_.count(id) > 0;
}

DispatchCounters Dispatcher::counters() {
  DispatchCounters c;
  c.done = totals_.done;
  c.failed = totals_.failed;
  c.retried = totals_.retried;
  c.interrupted = totals_.interrupted;
  c.prompt_tokens = totals_.prompt_tokens;
  c.completion_tokens = totals_.completion_tokens;
  c.in_flight = totals_.in_flight;
  std::lock_guard lock(runs_mutex_);
  for (const auto& [id, run] : runs_) {
    std::lock_guard run_lock(run->m);
    if (!run->stopped && !run->stopping && run->workers_left > 0) ++c.batches_sending;
  }
  return c;
}

// Batches whose every request is answered: their threads have ended, their outputs are closed here.
void Dispatcher::reap_finished() {
  std::vector<std::unique_ptr<Run>> done;
  {
    std::lock_guard lock(runs_mutex_);
    for (auto it = runs_.begin(); it != runs_.end();) {
      std::lock_guard run_lock(it->second->m);
      if (it->second->workers_left == 0 && !it->second->stopping && !it->second->stopped) {
        done.push_back(std::move(it->second));
        it = runs_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = draining_.begin(); it != draining_.end();) {
      std::unique_lock run_lock((*it)->m);
      if ((*it)->workers_left == 0) {
        run_lock.unlock();
        done.push_back(std::move(*it));
        it = draining_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& run : done) {
    for (auto& t : run->workers) t.join();
    run.reset();
  }
}

void Dispatcher::set_reason(Run& run, const std::string& reason) {
  std::lock_guard db_lock(run.db_mutex);
  run.batch.reason = reason;
  if (auto r = run.db->save_run(run.batch); !r.ok()) log(util::LogLevel::Warning, r.error().message);
}


}  // namespace tarmac::backfill
