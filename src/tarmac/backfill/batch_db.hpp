// Batches and their requests in the agent's SQLite store (tables backfill_batch and
// backfill_request, docs/backfill.md "State"), versioned in the store's meta table as
// backfill_version. One connection, used by one thread at a time.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/backfill/batch.hpp"
#include "tarmac/store/sqlite.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::backfill {

// The tables' version: 1, the first; 2 adds each batch's body_bytes (what quotas count) and its
// output's birth time, and keeps no bodies for ended batches.
inline constexpr long long kBatchTablesVersion = 2;

// What unfinished (queued or running) batches, and those being stored, hold in the store: the
// quotas' measure.
struct Holding {
  long long batches = 0;
  long long body_bytes = 0;
};

// A request being sent: its row and its body.
struct Sendable {
  RequestRow row;
  std::string body;
};

// A request answered: its line in the output and what the answer said.
struct Answered {
  long long index = 0;
  RequestState state = RequestState::Done;  // Done or Failed
  std::optional<long long> prompt_tokens;
  std::optional<long long> completion_tokens;
  long long ended_ms = 0;
  std::string error;  // Failed: why, for people
  long long out_offset = 0;
  long long out_len = 0;
};

// One transaction's worth of a batch's requests and its output's length (ledger.hpp).
struct Commit {
  std::vector<Answered> answered;
  std::vector<long long> lost;  // answered before, whose line is gone from the output: pending again
  bool in_flight_to_pending = false;  // after a restart: nothing is in flight any more
  long long output_bytes = 0;
};

class BatchDb {
 public:
  // Opens the store at `path`, creating the recorder's schema and these tables when missing and
  // upgrading them in place; refuses tables newer than this tarmac reads.
  [[nodiscard]] static Result<BatchDb> open(const std::string& path);

  // Records `batch` (its id, requests and body_bytes set here) and its requests, pending, in one
  // transaction.
  [[nodiscard]] Result<void> create(Batch& batch, const std::vector<BatchRequest>& requests);

  // A batch stored in steps, so that no other writer of the store waits behind one transaction of a
  // 200 MiB input (docs/backfill.md "Security"). begin_loading() records `batch` (its id, requests
  // and body_bytes set here from `requests`) as "loading": nothing lists, shows, sends or resumes
  // such a batch (batch(), batches()), but the quotas and the check of a new output count it
  // (holding(), unfinished_on()). load() adds its requests [from, to) in one transaction;
  // loaded() makes it queued (false when it was not loading: dropped meanwhile); drop_loading()
  // removes a batch still loading (a refusal, the agent's stop), or every one (nullopt: what a
  // crash left) and says how many.
  [[nodiscard]] Result<void> begin_loading(Batch& batch, const std::vector<BatchRequest>& requests);
  [[nodiscard]] Result<void> load(long long id, const std::vector<BatchRequest>& requests, std::size_t from,
                                  std::size_t to);
  [[nodiscard]] Result<bool> loaded(long long id);
  [[nodiscard]] Result<long long> drop_loading(std::optional<long long> id);
  // Writes the batch's own columns (not output_bytes, which only commit() moves, nor windows,
  // which only add_window() moves). A batch that has
  // ended drops its requests' bodies in the same transaction: nothing will send them, and the
  // store must not keep every prompt forever.
  [[nodiscard]] Result<void> save(const Batch& batch);
  // Writes only what sending a batch moves: its state, reason, start and end (the dispatcher's copy
  // of a batch must not write back the rest, which the socket's thread may have changed meanwhile:
  // its GPU time among them, add_gpu_ms). Drops the bodies of a batch that has ended, as save() does.
  [[nodiscard]] Result<void> save_run(const Batch& batch);
  // Adds `ms` GPU-milliseconds to batch `id` (a managed server's time, shared by its batches).
  [[nodiscard]] Result<void> add_gpu_ms(long long id, long long ms);

  // Adds `span` to batch `id`'s windows (add_span), in one transaction: the dispatcher's, at the end
  // of each stint that answered something.
  [[nodiscard]] Result<void> add_window(long long id, Span span);

  // What the unfinished batches of `uid` (nullopt: of everyone) hold, those loading included.
  [[nodiscard]] Result<Holding> holding(std::optional<uid_t> uid);
  // The unfinished (or loading) batch whose output is the file (dev, ino), if any: two batches on
  // one file would overwrite each other's lines.
  [[nodiscard]] Result<std::optional<long long>> unfinished_on(long long dev, long long ino);

  [[nodiscard]] Result<std::optional<Batch>> batch(long long id);
  enum class Which { All, Unfinished };
  [[nodiscard]] Result<std::vector<Batch>> batches(Which which);
  // Batch `id`'s counts and tokens (read from an index alone: a batch's bodies are not read).
  [[nodiscard]] Result<Progress> progress(long long id);
  // Whether batch `id` has a request pending or in flight; cheaper than progress().
  [[nodiscard]] Result<bool> unanswered(long long id);
  // Every request of batch `id` in input order, without bodies.
  [[nodiscard]] Result<std::vector<RequestRow>> rows(long long id);
  [[nodiscard]] Result<std::optional<RequestState>> state_of(long long id, long long index);

  // Up to `n` pending requests of batch `id`, first in input order first, now in flight (attempts
  // counted, started at `now_ms`).
  [[nodiscard]] Result<std::vector<Sendable>> take_pending(long long id, std::size_t n, long long now_ms);
  // Request `index` of batch `id` was not answered (an interrupted or failed send): pending again,
  // with `error` kept as its last error.
  [[nodiscard]] Result<void> back_to_pending(long long id, long long index, const std::string& error);

  // An event in the store's event table (store/rows.hpp Event), as the recorder writes them.
  [[nodiscard]] Result<void> add_event(long long ts_ms, const std::string& kind, const std::string& detail);

  // `commit` for batch `id`, in one transaction.
  [[nodiscard]] Result<void> commit(long long id, const Commit& commit);

  // For tests and the upgrade: the connection.
  [[nodiscard]] store::Database& database() { return db_; }

 private:
  explicit BatchDb(store::Database db) : db_(std::move(db)) {}
  // A statement of the hot paths (a request taken, answered), prepared once per connection: parsing
  // it anew each time was a good part of the dispatcher's CPU per request. Reset when the returned
  // hold ends, so that no read stays open on the connection.
  class Hold {
   public:
    explicit Hold(store::Statement& s) : s_(&s) {}
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { s_->reset(); }
    store::Statement* operator->() const { return s_; }
    store::Statement& operator*() const { return *s_; }

   private:
    store::Statement* s_;
  };
  [[nodiscard]] Result<store::Statement*> cached(const std::string& sql);
  [[nodiscard]] Result<void> in_transaction(const std::function<Result<void>()>& body);
  [[nodiscard]] Result<void> drop_bodies_if_ended(const Batch& batch);
  // Inside a transaction: `batch`'s row (its id set here), and its requests [from, to) as pending.
  [[nodiscard]] Result<void> insert_batch(Batch& batch);
  [[nodiscard]] Result<void> insert_requests(long long id, const std::vector<BatchRequest>& requests,
                                             std::size_t from, std::size_t to);
  store::Database db_;
  std::map<std::string, store::Statement> cached_;  // after db_: finalized before it is closed
};

}  // namespace tarmac::backfill
