// Sends batches' requests to their LLM servers (docs/backfill.md "Dispatch"): for each batch whose
// output the agent holds, up to min(--parallel, the server's max_parallel) requests at once, each on
// a worker thread of its own with net::perform (so neither the socket's thread nor the sampler ever
// waits on a server), only inside the batch's --window. Every answer goes through the batch's
// Ledger on the batch's writer thread, one at a time (the ledger's writes and the store's commits
// are serialized, and a sender goes on to its next request meanwhile), so each custom_id is in the
// output exactly once. A 5xx answer, a lost connection and a timeout are sent
// again after 1s, 2s, 4s ... up to the server's `retries`, then written with their error; any other
// answer is written at once.
//
// stop() is the one way a batch's sending ends early (cancel, and later the yield of its GPUs): no
// request is sent any more, the in-flight ones are cancelled (their connections closed, which is how
// llama-server and Ollama cancel a generation), and they go back to pending. The output stays with
// the dispatcher: go() sends again (after a yield), release() closes it (cancel).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tarmac/backfill/batch_db.hpp"
#include "tarmac/backfill/ledger.hpp"
#include "tarmac/backfill/settings.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/log.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::net {
class Session;
}  // namespace tarmac::net

namespace tarmac::backfill {

struct DispatchOptions {
  std::string db_path;  // the agent's store: the dispatcher has a connection of its own
  util::LogSink log;
  long long backoff_ms = 1000;          // the wait before the first retry; doubled for each next one
  long long max_backoff_ms = 60 * 1000;
  std::size_t max_answer_bytes = 16 << 20;  // an answer's body kept; a larger one is written as an error
  // Minutes since local midnight now, for --window; empty: the clock. Tests inject one.
  std::function<int()> local_minute;
  long long window_recheck_ms = 60 * 1000;  // outside its window, a batch looks at the clock this often
  // The most threads the dispatcher runs at once, every batch's senders and writers together: a
  // batch that would go past it gets fewer senders, and one that cannot have two threads waits.
  unsigned max_threads = 512;
  // How long stop() waits for a batch's writer to end once its senders have: a write to an output
  // on a hung file system can last forever, and stop() is the yield's (the scheduler's thread).
  // Past it the writer is left to end on its own, the batch stopped (go() waits for the writer).
  long long writer_wait_ms = 2000;
  // Tests: the output's system calls and the ledger's steps (ledger.hpp).
  OutputIo io;
  LedgerHook hook;
  // Called (from a worker thread) when a batch has ended: every request answered. For the agent's log.
  std::function<void(long long batch)> on_done;
};

// What the dispatcher has done since it was opened (the agent started), for /metrics
// (docs/metrics.md), and what it is doing now.
struct DispatchCounters {
  long long done = 0;         // requests answered and written
  long long failed = 0;       // ... written with an error (after their retries)
  long long retried = 0;      // sends tried again after a retryable failure
  long long interrupted = 0;  // requests in flight when their batch was stopped: pending again
  long long prompt_tokens = 0;
  long long completion_tokens = 0;
  long long in_flight = 0;         // now
  long long batches_sending = 0;   // now: held and not stopped
  long long yields = 0;            // servers that gave GPUs back: managed ones stopped, external ones unloaded
  long long yield_ms = 0;          // ... their durations summed
};

// Whether local minute `minute` (0 to 1439) is inside `window` ("HH:MM-HH:MM", the end excluded, over
// midnight when the end is before the start); an empty window is always open.
[[nodiscard]] bool in_window(std::string_view window, int minute);
// How a batch's reason starts while it waits for its window (no ETA is given meanwhile).
inline constexpr std::string_view kWaitingForWindow = "waiting for its window";
// Minutes from `minute` until `window` opens (0 when open).
[[nodiscard]] int minutes_until_open(std::string_view window, int minute);

// start(), stop(), go(), release() and holds() are called from one thread (the agent's socket
// thread); the dispatcher's own threads only send, write and mark batches done.
class Dispatcher {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Dispatcher>> open(DispatchOptions options);
  ~Dispatcher();  // stops every batch (their requests back to pending) and waits for the threads
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Takes batch `batch`'s output, checks it against the store (Ledger::reconcile: after a restart
  // nothing is in flight any more), and starts sending the batch's pending requests to `server`.
  // At most the server's max_parallel requests are in flight to one server (by name) at once, all
  // its batches together. An error (the output closed) when its threads cannot be had.
  // `paused`: the output is taken and checked, but nothing is sent until go() (a managed server,
  // which runs only while its GPUs are idle: go() names its url then).
  [[nodiscard]] Result<Reconciled> start(const Batch& batch, const ServerConfig& server, util::Fd output,
                                         bool paused = false);

  // Stops batch `id`'s sending: nothing more is sent, and the requests in flight are cancelled
  // (their connections closed) and go back to pending. The output stays held (go() sends again).
  // Returns once the batch's senders have ended (at once, their connections shut down: net::Cancel)
  // and its writer has, or writer_wait_ms has passed: a writer stuck in a write to its output (a
  // hung file system) ends on its own later, and go() is refused until then.
  // How many requests were interrupted; 0 for a batch not being sent.
  long long stop(long long id);
  // Sends stopped batch `id` again (to `url` when one is given: a managed server's, known once it
  // runs); an error when the dispatcher does not hold it, or when its threads cannot be had (it
  // stays held, stopped).
  [[nodiscard]] Result<void> go(long long id, const std::string& url = "");
  // Records `reason` as batch `id`'s (what `status` shows) when the dispatcher holds it.
  void note(long long id, const std::string& reason);
  // Local minutes since midnight now, as the batches' windows are read (DispatchOptions::local_minute).
  [[nodiscard]] int local_minute() const { return opt_.local_minute(); }
  // stop(), then closes the output: the dispatcher lets batch `id` go (cancel). A writer still
  // stuck in a write keeps the output until it returns (reaped then, or by the destructor, which
  // waits for it).
  long long release(long long id);

  // Whether the dispatcher holds batch `id`'s output (being sent, or stopped).
  [[nodiscard]] bool holds(long long id);
  // Whether a released batch's writer, stuck in a write, still holds the file (dev, ino): not
  // another batch's output until that write has returned.
  [[nodiscard]] bool drains_output(dev_t dev, ino_t ino);

  // Safe from any thread (the HTTP endpoint's).
  [[nodiscard]] DispatchCounters counters();

  struct Run;  // one batch being sent (dispatch.cpp)

 private:
  explicit Dispatcher(DispatchOptions options);
  void reap_finished();
  [[nodiscard]] Result<void> start_workers(Run& run);
  // Up to `wanted` senders, and a writer, out of max_threads: how many senders were granted (0: none).
  [[nodiscard]] unsigned claim_threads(unsigned wanted);
  struct ServerSlots;
  struct SlotHold;
  // A slot of `run`'s server (max_parallel of them), waited for: nullptr when the batch is stopped
  // meanwhile. It and wait_for_window close the sender's kept connection before they wait.
  [[nodiscard]] std::unique_ptr<SlotHold> take_slot(Run& run, net::Session& session);
  void work(Run& run);
  [[nodiscard]] bool wait_for_window(Run& run, net::Session& session);
  void set_reason(Run& run, const std::string& reason);
  // What one send came to (dispatch.cpp send()).
  struct Sent {
    enum class Kind { Answered, PutBack, Unreachable } kind = Kind::PutBack;
    Answer answer;    // Answered: for the writer
    std::string why;  // Unreachable: why no server took it
  };
  [[nodiscard]] Sent send(Run& run, const Sendable& request, net::Session& session);
  // Queues `answer` for the writer, waiting while one per sender waits already.
  void hand_to_writer(Run& run, Answer answer, net::Session& session);
  [[nodiscard]] bool wait_for_server(Run& run, const std::string& why);
  void put_back(Run& run, long long index, const std::string& why);
  void write_answers(Run& run);
  void write_answer(Run& run, const Answer& answer);
  void mark_done(Run& run);
  // Records what `run` did since it was started or sent again as a "backfill" event in the store
  // (the report's "idle hours turned into work"), and starts counting anew. Under run.db_mutex.
  void record_stint(Run& run, const char* why);
  // An answer written: counted in the totals and the run's stint. Under run.db_mutex.
  void count_answer(Run& run, const Answer& answer, const Ledger::Tokens& tokens);
  void log(util::LogLevel level, const std::string& message) const;

  DispatchOptions opt_;
  std::mutex runs_mutex_;
  std::map<long long, std::unique_ptr<Run>> runs_;
  // Released batches whose writer was still in a write (stop()): destroyed once it has ended.
  std::vector<std::unique_ptr<Run>> draining_;
  std::mutex slots_mutex_;
  std::map<std::string, std::shared_ptr<ServerSlots>> slots_;  // by server name
  std::atomic<unsigned> threads_{0};
  struct Totals {
    std::atomic<long long> done{0}, failed{0}, retried{0}, interrupted{0}, prompt_tokens{0}, completion_tokens{0},
        in_flight{0};
  } totals_;
};

}  // namespace tarmac::backfill
