// The dispatcher's threads (dispatch.hpp, docs/backfill.md "Dispatch").
#include "tarmac/backfill/dispatch.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <deque>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>

#include "tarmac/backfill/ollama.hpp"
#include "tarmac/backfill/openai.hpp"
#include "tarmac/host/tcp_owner.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::backfill {

namespace {

// A sender keeps its connection through a wait this short (a slot given back, the writer's fsync):
// reconnecting after each would cost what keep-alive saves. A longer wait, or one for the batch's
// window, a retry's backoff or a server that was not there, closes it first (net::Session::close).
constexpr long long kKeptThroughWaitMs = 1000;

int minute_of(std::string_view hh_mm) {
  return ((hh_mm[0] - '0') * 10 + (hh_mm[1] - '0')) * 60 + (hh_mm[3] - '0') * 10 + (hh_mm[4] - '0');
}

int local_minute_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  return tm.tm_hour * 60 + tm.tm_min;
}

long long backoff(const DispatchOptions& opt, int retry) {
  long long wait = std::max(1LL, opt.backoff_ms);
  for (int i = 1; i < retry && wait < opt.max_backoff_ms; ++i) wait *= 2;
  return std::min(wait, opt.max_backoff_ms);
}

// What one send came to: an answer to write, one to write unless a retry is left, or nothing (the
// request was cancelled by stop()).
struct Outcome {
  // Unreachable: nothing was sent (no server listens, or not server_user's): the request waits.
  enum class Kind { Final, Retryable, Cancelled, Unreachable } kind = Kind::Final;
  Answer answer;
};

Outcome outcome_of(const Sendable& request, Result<net::Response> sent) {
  Outcome out;
  out.answer.index = request.row.index;
  out.answer.custom_id = request.row.custom_id;
  if (sent.ok()) {
    out.answer.status = sent->status;
    out.answer.body = std::move(sent->body);
    if (sent->status < 200 || sent->status > 299) {
      out.answer.error_code = fmt::format("http_{}", sent->status);
      out.answer.error_message = fmt::format("the server answered HTTP {}", sent->status);
      // A server error may pass (a restart, an overload), and so may "too many requests"; the
      // client's own error will not.
      if (sent->status >= 500 || sent->status == 429) out.kind = Outcome::Kind::Retryable;
    }
    return out;
  }
  const Error& e = sent.error();
  const auto* failure = e.cause_as<net::Failure>();
  out.answer.error_message = e.message;
  if (failure == nullptr) {
    out.answer.error_code = "request";  // libcurl missing, a bad URL: sending again changes nothing
    return out;
  }
  switch (*failure) {
    case net::Failure::Cancelled: out.kind = Outcome::Kind::Cancelled; break;
    case net::Failure::Timeout:
      out.answer.error_code = "timeout";
      out.kind = Outcome::Kind::Retryable;
      break;
    case net::Failure::Connection:
      out.answer.error_code = "connection";
      out.kind = Outcome::Kind::Retryable;
      break;
    case net::Failure::Refused: out.answer.error_code = "answer_too_large"; break;
    case net::Failure::Unreachable:
    case net::Failure::Untrusted:
      // No server (down, restarting), or someone else's process has its port: nothing was sent, so
      // the request is no worse for it and waits for the server rather than spend its retries.
      out.kind = Outcome::Kind::Unreachable;
      break;
  }
  return out;
}

}  // namespace

bool in_window(std::string_view window, int minute) {
  if (window.size() != 11) return true;
  const int start = minute_of(window.substr(0, 5));
  const int end = minute_of(window.substr(6, 5));
  return start < end ? (minute >= start && minute < end) : (minute >= start || minute < end);
}

int minutes_until_open(std::string_view window, int minute) {
  if (in_window(window, minute)) return 0;
  const int start = minute_of(window.substr(0, 5));
  return (start - minute + 24 * 60) % (24 * 60);
}

// One batch being sent: its workers, and what they share.
struct Dispatcher::Run {
  Batch batch;
  ServerConfig server;
  std::optional<uid_t> server_uid;  // server_user's: the owner each connection's other end must have
  // The batch's own connection to the store, used under db_mutex for moments only: by the
  // senders, the controls (stop, go, note), and the writer's ledger for its reads and commits. The
  // ledger is the writer thread's alone once the batch is started: it writes and fdatasyncs the
  // user's output with no lock held, so an output whose writes hang (a hung NFS server) holds only
  // its writer, not the scheduler's thread noting or starting batches. One connection, not one per
  // thread: two would invalidate each other's page cache at every commit (reads again, each time).
  std::unique_ptr<BatchDb> db;
  std::mutex db_mutex;
  std::unique_ptr<Ledger> ledger;
  net::Cancel cancel;  // every request in flight watches it (net::Request::cancel)
  std::mutex m;                     // guards what follows
  std::condition_variable cv;       // stop(), a window, a backoff
  bool stopping = false;
  bool stopped = false;             // by stop(): its workers have ended; go() starts them again
  // By release() (a cancel) while its writer was still in a write: the output is no longer the
  // batch's to write, so what the writer has queued goes back to pending.
  bool released = false;
  dev_t output_dev = 0;  // the output's identity, taken at start (drains_output)
  ino_t output_ino = 0;
  bool waiting_for_window = false;
  bool writing = false;       // the writer has taken an answer and not yet counted it
  unsigned workers_left = 0;  // threads not yet ended: the senders and the writer
  unsigned senders = 1;       // started by the last start_workers()
  unsigned senders_left = 0;
  unsigned in_flight = 0;
  long long busy_since_ms = 0;  // monotonic: when in_flight last went from 0 to 1
  long long busy_ms = 0;        // time with a request in flight, since the stint began
  int unreachable = 0;          // sends in a row that no server took (wait_for_server)
  long long interrupted = 0;
  // Answers the senders got, for the writer: a sender goes on to its next request while the
  // ledger writes, fsyncs and commits (the server's slot is not left idle meanwhile). Their
  // requests stay in flight in the store until written: a crash sends them again.
  std::deque<Answer> to_write;
  std::vector<std::thread> workers;  // the senders and the writer
  // What was answered since the batch was started or sent again (record_stint). Under db_mutex.
  struct Stint {
    long long since_ms = 0;
    long long first_sent_ms = 0;  // its first request taken: where its span (the batch's windows) starts
    long long done = 0;
    long long failed = 0;
    long long prompt_tokens = 0;
    long long completion_tokens = 0;
  } stint;
};

// The requests in flight to one server, all its batches together, and the most it takes.
struct Dispatcher::ServerSlots {
  std::mutex m;
  std::condition_variable cv;
  unsigned in_use = 0;
  unsigned limit = 1;
};

// One slot of a server, given back when it goes.
struct Dispatcher::SlotHold {
  std::shared_ptr<ServerSlots> slots;
  SlotHold(const SlotHold&) = delete;
  SlotHold& operator=(const SlotHold&) = delete;
  explicit SlotHold(std::shared_ptr<ServerSlots> s) : slots(std::move(s)) {}
  ~SlotHold() {
    std::lock_guard lock(slots->m);
    --slots->in_use;
    slots->cv.notify_one();
  }
};

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

std::unique_ptr<Dispatcher::SlotHold> Dispatcher::take_slot(Run& run, net::Session& session) {
  std::shared_ptr<ServerSlots> slots;
  {
    std::lock_guard lock(slots_mutex_);
    auto& s = slots_[run.batch.server];
    if (!s) s = std::make_shared<ServerSlots>();
    slots = s;
  }
  {
    std::lock_guard lock(slots->m);  // read under it by every sender of the server
    slots->limit = std::max(1U, run.server.max_parallel);
  }
  const long long waiting_since = util::monotonic_ms();
  for (;;) {
    {
      std::unique_lock lock(slots->m);
      // A slot given back wakes one waiter; a stopped batch is seen within 100 ms (stop() does
      // not know which server's slots its senders wait for).
      if (slots->in_use >= slots->limit) {
        if (util::monotonic_ms() - waiting_since >= kKeptThroughWaitMs) {
          lock.unlock();
          session.close();  // not kept open while it waits longer (net::Session::close), nor under the lock
          lock.lock();
        }
        slots->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return slots->in_use < slots->limit; });
      }
      if (slots->in_use < slots->limit) {
        ++slots->in_use;
        return std::make_unique<SlotHold>(slots);
      }
    }
    std::lock_guard lock(run.m);
    if (run.stopping) return nullptr;
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

// A worker: takes one pending request at a time and sends it until the batch has none left, or is stopped.
void Dispatcher::work(Run& run) {
  net::Session session;  // its connection kept open from one request to the next (run.cancel outlives it)
  for (;;) {
    if (!wait_for_window(run, session)) break;
    Sent sent;
    {
      const auto slot = take_slot(run, session);  // given back before the answer waits for the writer
      if (!slot) break;
      std::optional<Sendable> request;
      bool failed = false;
      {
        std::lock_guard db_lock(run.db_mutex);
        auto taken = run.db->take_pending(run.batch.id, 1, util::wall_ms());
        if (!taken.ok()) {
          log(util::LogLevel::Warning, fmt::format("backfill: batch {}: {}", run.batch.id, taken.error().message));
          failed = true;  // the store is busy or failing: try again after a wait
        } else if (!taken->empty()) {
          request = std::move(taken->front());
          if (run.stint.first_sent_ms == 0) run.stint.first_sent_ms = util::wall_ms();
        }
      }
      std::unique_lock lock(run.m);
      if (!request && !failed) break;  // nothing left to send
      if (!request) {
        // The store failed: wait, as for a retry.
        lock.unlock();
        session.close();
        lock.lock();
        run.cv.wait_for(lock, std::chrono::milliseconds(backoff(opt_, 1)), [&] { return run.stopping; });
        continue;
      }
      if (run.in_flight++ == 0) run.busy_since_ms = util::monotonic_ms();
      ++totals_.in_flight;
      lock.unlock();
      sent = send(run, *request, session);
      lock.lock();
      if (--run.in_flight == 0) run.busy_ms += util::monotonic_ms() - run.busy_since_ms;
      --totals_.in_flight;
    }
    if (sent.kind == Sent::Kind::Answered) hand_to_writer(run, std::move(sent.answer), session);
    if (sent.kind == Sent::Kind::Unreachable) {
      session.close();
      if (!wait_for_server(run, sent.why)) break;
    }
  }
  std::lock_guard lock(run.m);
  --run.senders_left;
  --run.workers_left;
  --threads_;
  run.cv.notify_all();  // the writer ends once the senders have and their answers are written
}

// False when the batch is stopped while it waits for its window.
bool Dispatcher::wait_for_window(Run& run, net::Session& session) {
  std::unique_lock lock(run.m);
  for (;;) {
    if (run.stopping) return false;
    const int minute = opt_.local_minute();
    if (in_window(run.batch.window, minute)) {
      if (run.waiting_for_window) {
        run.waiting_for_window = false;
        lock.unlock();
        set_reason(run, fmt::format("sending to server {} ({}), inside its window {}", run.batch.server,
                                    run.server.url, run.batch.window));
        lock.lock();
      }
      return true;
    }
    if (!run.waiting_for_window && run.in_flight == 0) {
      run.waiting_for_window = true;
      // The span it ran ends here (the batch's windows): once the writer has counted every answer.
      run.cv.wait(lock, [&] { return run.stopping || (run.to_write.empty() && !run.writing); });
      if (run.stopping) return false;
      lock.unlock();
      set_reason(run, fmt::format("{} {} (local time)", kWaitingForWindow, run.batch.window));
      {
        std::lock_guard db_lock(run.db_mutex);
        record_stint(run, "window closed");
      }
      lock.lock();
    }
    lock.unlock();
    session.close();  // the window may be hours away: no connection kept open meanwhile
    lock.lock();
    // Looked at again at least every window_recheck_ms: a clock set forward or back is seen that soon.
    const long long wait = std::min<long long>(opt_.window_recheck_ms,
                                               std::max(1, minutes_until_open(run.batch.window, minute)) * 60000LL);
    run.cv.wait_for(lock, std::chrono::milliseconds(std::max(1LL, wait)), [&] { return run.stopping; });
  }
}

void Dispatcher::set_reason(Run& run, const std::string& reason) {
  std::lock_guard db_lock(run.db_mutex);
  run.batch.reason = reason;
  if (auto r = run.db->save_run(run.batch); !r.ok()) log(util::LogLevel::Warning, r.error().message);
}

// Sends `request` (again after a retryable failure, up to the server's retries): its answer for the
// writer; a request cancelled by stop(), or one no server took, goes back to pending.
Dispatcher::Sent Dispatcher::send(Run& run, const Sendable& request, net::Session& session) {
  net::Request http;
  http.session = &session;
  http.method = "POST";
  http.url = server_url(run.server.url, to_url(request.row.endpoint));
  http.headers = {"Content-Type: application/json"};
  http.timeout_ms = run.server.timeout_ms;
  // A server that does not even accept the connection is not generating: 10 s, not the whole
  // request's (often 10 minutes), before the batch waits for it (wait_for_server).
  http.connect_timeout_ms = std::min(run.server.timeout_ms, 10'000LL);
  http.cancel = &run.cancel;
  http.max_body_bytes = opt_.max_answer_bytes;
  if (run.server_uid) {
    http.check_connection = [uid = *run.server_uid](const net::Connection& c) {
      return host::tcp_owner({c.peer_ip, c.peer_port}, {c.local_ip, c.local_port}) == uid;
    };
  }
  Outcome outcome;
  for (unsigned attempt = 0;; ++attempt) {
    // The one place the protocols differ: Ollama's native one is translated both ways (ollama.hpp),
    // OpenAI's streamed and put back together (openai.hpp).
    outcome = outcome_of(request, run.server.protocol == ServerProtocol::Ollama
                                      ? ollama::perform(http, run.server.url, request.row.endpoint, request.body)
                                      : openai::perform(http, request.row.endpoint, request.body, run.server.stream));
    if (outcome.kind != Outcome::Kind::Retryable || attempt >= run.server.retries) break;
    ++totals_.retried;
    session.close();  // a backoff may last a minute: no connection kept meanwhile
    std::unique_lock lock(run.m);
    if (run.cv.wait_for(lock, std::chrono::milliseconds(backoff(opt_, static_cast<int>(attempt) + 1)),
                        [&] { return run.stopping; })) {
      outcome.kind = Outcome::Kind::Cancelled;
      break;
    }
  }
  if (outcome.kind == Outcome::Kind::Cancelled) {
    put_back(run, request.row.index, "interrupted: the batch's sending was stopped");
    std::lock_guard lock(run.m);
    ++run.interrupted;
    ++totals_.interrupted;
    return Sent{Sent::Kind::PutBack, {}, {}};
  }
  if (outcome.kind == Outcome::Kind::Unreachable) {
    put_back(run, request.row.index, outcome.answer.error_message);
    return Sent{Sent::Kind::Unreachable, {}, outcome.answer.error_message};
  }
  outcome.answer.ended_ms = util::wall_ms();
  return Sent{Sent::Kind::Answered, std::move(outcome.answer), {}};
}

void Dispatcher::hand_to_writer(Run& run, Answer answer, net::Session& session) {
  std::unique_lock lock(run.m);
  const bool was_waiting = run.unreachable > 0;
  run.unreachable = 0;
  // At most one answer per sender waits for the writer: while the output cannot be written (a full
  // disk, a hung file system), the senders wait too, rather than keep every answer of the batch in
  // memory, and without a connection kept open for as long as that lasts.
  const auto room = [&] { return run.to_write.size() < run.senders || run.stopping; };
  if (!run.cv.wait_for(lock, std::chrono::milliseconds(kKeptThroughWaitMs), room)) {
    lock.unlock();
    session.close();
    lock.lock();
    run.cv.wait(lock, room);
  }
  if (run.to_write.size() >= run.senders) {  // stopped while waiting: sent again later
    lock.unlock();
    put_back(run, answer.index, "interrupted: the batch's sending was stopped");
    lock.lock();
    ++run.interrupted;
    ++totals_.interrupted;
    return;
  }
  run.to_write.push_back(std::move(answer));
  run.cv.notify_all();
  if (was_waiting) {
    lock.unlock();
    set_reason(run, fmt::format("sending to server {} ({})", run.batch.server, run.server.url));
  }
}

// No server took the last request (why): the batch says so, and its sender waits 1s, 2s, ... (at
// most max_backoff_ms) before the next try. False when the batch is stopped meanwhile.
bool Dispatcher::wait_for_server(Run& run, const std::string& why) {
  std::unique_lock lock(run.m);
  const int tries = ++run.unreachable;
  if (tries == 1) {
    lock.unlock();
    set_reason(run, fmt::format("waiting for server {} ({}): {}", run.batch.server, run.server.url, why));
    lock.lock();
  }
  return !run.cv.wait_for(lock, std::chrono::milliseconds(backoff(opt_, std::min(tries, 30))),
                          [&] { return run.stopping; });
}

void Dispatcher::put_back(Run& run, long long index, const std::string& why) {
  std::lock_guard db_lock(run.db_mutex);
  if (auto r = run.db->back_to_pending(run.batch.id, index, why); !r.ok()) {
    log(util::LogLevel::Warning, r.error().message);  // still in flight in the store: resume puts it back
  }
}

// The writer: each answer through the ledger, in the order they came, until the senders have ended
// and every answer is written; then, unless stopped, the batch is done.
void Dispatcher::write_answers(Run& run) {
  std::unique_lock lock(run.m);
  for (;;) {
    run.cv.wait(lock, [&] { return !run.to_write.empty() || run.senders_left == 0; });
    if (run.to_write.empty()) break;
    Answer answer = std::move(run.to_write.front());
    run.to_write.pop_front();
    run.cv.notify_all();  // a sender waiting for room
    run.writing = true;
    const bool released = run.released;
    lock.unlock();
    if (released) {
      put_back(run, answer.index, "interrupted: the batch was cancelled");
    } else {
      write_answer(run, answer);
    }
    lock.lock();
    run.writing = false;
    run.cv.notify_all();  // a sender waiting for every answer to be counted (wait_for_window)
  }
  const bool stopping = run.stopping;
  lock.unlock();
  if (!stopping) mark_done(run);
  lock.lock();
  --run.workers_left;
  --threads_;
  run.cv.notify_all();  // stop() waits for the writer
}

// Writes `answer` (ledger.hpp), again after a wait while it fails (a full disk): the server's answer
// is kept rather than asked for again. Once the batch is stopped, a failure puts it back to pending.
void Dispatcher::write_answer(Run& run, const Answer& answer) {
  for (int failures = 1;; ++failures) {
    auto written = [&] {
      Ledger::Tokens tokens;
      auto r = run.ledger->complete(answer, &tokens);  // the writer's alone; it takes db_mutex (Run::ledger)
      if (r.ok() && *r != Ledger::Completion::AlreadyAnswered) {
        std::lock_guard db_lock(run.db_mutex);
        count_answer(run, answer, tokens);
      }
      return r;
    }();
    if (written.ok()) return;
    if (failures == 1) {
      log(util::LogLevel::Warning, fmt::format("backfill: batch {}: the answer to {} cannot be written yet: {}",
                                               run.batch.id, answer.custom_id, written.error().message));
    }
    std::unique_lock lock(run.m);
    if (run.stopping || run.cv.wait_for(lock, std::chrono::milliseconds(backoff(opt_, failures)),
                                        [&] { return run.stopping; })) {
      lock.unlock();
      put_back(run, answer.index, written.error().message);
      return;
    }
  }
}

// Every request answered: the batch is done.
void Dispatcher::mark_done(Run& run) {
  bool done = false;
  {
    std::lock_guard db_lock(run.db_mutex);
    auto progress = run.db->progress(run.batch.id);
    if (progress.ok() && progress->pending == 0 && progress->in_flight == 0) {
      run.batch.state = BatchState::Done;
      run.batch.ended_ms = util::wall_ms();
      run.batch.reason = fmt::format("done: {} answered, {} of them with an error", progress->done + progress->failed,
                                     progress->failed);
      if (auto r = run.db->save_run(run.batch); !r.ok()) log(util::LogLevel::Warning, r.error().message);
      record_stint(run, "done");
      done = true;
    } else if (!progress.ok()) {
      log(util::LogLevel::Warning, progress.error().message);
    }
  }
  if (done && opt_.on_done) opt_.on_done(run.batch.id);
}

void Dispatcher::count_answer(Run& run, const Answer& answer, const Ledger::Tokens& tokens) {
  const bool failed = !answer.error_code.empty();
  ++(failed ? totals_.failed : totals_.done);
  totals_.prompt_tokens += tokens.prompt;
  totals_.completion_tokens += tokens.completion;
  ++(failed ? run.stint.failed : run.stint.done);
  run.stint.prompt_tokens += tokens.prompt;
  run.stint.completion_tokens += tokens.completion;
}

void Dispatcher::record_stint(Run& run, const char* why) {
  const Run::Stint s = run.stint;
  const long long now = util::wall_ms();
  run.stint = Run::Stint{now};
  long long busy_ms = 0;  // the time a request was in flight: not the waits for a window or a slot
  {
    std::lock_guard lock(run.m);
    const long long mono = util::monotonic_ms();
    busy_ms = run.busy_ms + (run.in_flight > 0 ? mono - run.busy_since_ms : 0);
    run.busy_ms = 0;
    run.busy_since_ms = mono;
  }
  if (s.done + s.failed == 0) return;  // nothing was answered: nothing to count
  if (auto r = run.db->add_window(run.batch.id, {s.first_sent_ms > 0 ? s.first_sent_ms : s.since_ms, now}); !r.ok()) {
    log(util::LogLevel::Warning, fmt::format("backfill: batch {}: when it ran is not recorded: {}", run.batch.id,
                                             r.error().message));
  }
  const nlohmann::json detail = {{"batch", run.batch.id},
                                 {"user", run.batch.user},
                                 {"model", run.batch.model},
                                 {"server", run.batch.server},
                                 {"done", s.done},
                                 {"failed", s.failed},
                                 {"prompt_tokens", s.prompt_tokens},
                                 {"completion_tokens", s.completion_tokens},
                                 {"since_unix_ms", s.since_ms},
                                 {"busy_ms", std::max(0LL, busy_ms)},
                                 // A managed server's GPUs are the ones the scheduler gave it; an
                                 // external server's are not tarmac's to know.
                                 {"gpus", run.server.kind == ServerKind::Managed ? run.server.gpus : 0U},
                                 {"why", why}};
  if (auto r = run.db->add_event(now, "backfill", util::json_text(detail)); !r.ok()) {
    log(util::LogLevel::Warning, fmt::format("backfill: batch {}: its work is not recorded: {}", run.batch.id,
                                             r.error().message));
  }
}

}  // namespace tarmac::backfill
