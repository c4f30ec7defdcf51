// What the dispatcher's three parts share (dispatch.cpp: a batch's start, stop and end;
// dispatch_send.cpp: its senders; dispatch_write.cpp: its writer): one batch being sent, a server's
// slots, and the waits they agree on. Private to src/tarmac/backfill.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tarmac/backfill/dispatch.hpp"
#include "tarmac/net/http_client.hpp"

namespace tarmac::backfill {

namespace dispatch_detail {

// A sender keeps its connection through a wait this short (a slot given back, the writer's fsync):
// reconnecting after each would cost what keep-alive saves. A longer wait, or one for the batch's
// window, a retry's backoff or a server that was not there, closes it first (net::Session::close).
constexpr long long kKeptThroughWaitMs = 1000;

// Minutes since local midnight now: DispatchOptions::local_minute unless a test gives one.
int local_minute_now();

// The wait before retry `retry` (1, 2, ...): backoff_ms doubled each time, at most max_backoff_ms.
inline long long backoff(const DispatchOptions& opt, int retry) {
  long long wait = std::max(1LL, opt.backoff_ms);
  for (int i = 1; i < retry && wait < opt.max_backoff_ms; ++i) wait *= 2;
  return std::min(wait, opt.max_backoff_ms);
}

}  // namespace dispatch_detail

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

}  // namespace tarmac::backfill
