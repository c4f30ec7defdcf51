// A batch's output file and its rows in the store, kept in step so that every custom_id is in the
// output exactly once across crashes, kill -9 and a full disk (docs/backfill.md "Exactly once"):
//
//   1. an answer's line is written at the end the store accounts for (output_bytes) and fsynced;
//   2. then one transaction marks the request answered with the line's place and moves output_bytes.
//
// So the output is never behind the store. On a restart (and after any step that failed halfway)
// reconcile() reads what lies past output_bytes: each whole line that answers a request not yet
// answered is adopted (that request is never sent again), the first line that does not (torn by a
// crash, garbled, a duplicate) is cut with everything after it. An output shorter than the store
// says (someone truncated it) puts the requests whose lines are gone back to pending: the store
// keeps no answers, so sending them again is the only way to have each line once.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "tarmac/backfill/batch_db.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::backfill {

// The system calls the ledger writes the output with; tests replace them to inject ENOSPC or EIO.
struct OutputIo {
  std::function<ssize_t(int, const void*, std::size_t, off_t)> pwrite = ::pwrite;
  std::function<int(int)> sync = ::fdatasync;
  std::function<int(int, off_t)> truncate = ::ftruncate;
};

// Where complete() is: tests stop the process at each step (kill -9) to check the recovery.
enum class LedgerStep { Written, Synced, Committed };
using LedgerHook = std::function<void(LedgerStep, long long index)>;

// What the server said to one request (or why it could not), for its output line.
struct Answer {
  long long index = 0;
  std::string custom_id;
  std::optional<long> status;  // the HTTP status, when the server answered
  std::string body;            // the server's body: JSON kept as JSON, anything else as a string
  std::string error_code;      // empty: no error; "timeout", "connection", "http_500", ...
  std::string error_message;
  long long ended_ms = 0;
};

// The output line of `answer` in the OpenAI Batch output format (no newline):
// {"id", "custom_id", "response": {"status_code", "request_id", "body"} or null, "error": null or
// {"code", "message"}}.
[[nodiscard]] std::string output_line(long long batch, const Answer& answer);

// What reconcile() did.
struct Reconciled {
  long long adopted = 0;    // lines past output_bytes that answered requests: recorded
  long long cut_bytes = 0;  // bytes cut from the end (a torn or unknown line and what followed)
  long long lost = 0;       // requests whose lines were gone: pending again
};

class Ledger {
 public:
  // What reconcile() does with requests in flight: after a restart none is (BackToPending); while
  // the batch runs the in-flight ones are being sent (Keep).
  enum class InFlight { BackToPending, Keep };
  enum class Completion {
    Recorded,          // written and recorded
    Written,           // written, the store not yet: the next step adopts it; never send it again
    AlreadyAnswered,   // the store already has its line: nothing was written
  };

  Ledger(BatchDb& db, long long batch, util::Fd output, OutputIo io = {}, LedgerHook hook = {});

  // The mutex that guards `db` when other threads use the same connection: held around each of
  // the ledger's uses of it, never while the output is written or synced. Set before the first
  // step; nullptr (the default): the connection is the ledger's alone.
  void share_db(std::mutex* db_mutex) { db_mutex_ = db_mutex; }

  // Checks the output against the store (the header's comment) and records what it finds.
  [[nodiscard]] Result<Reconciled> reconcile(InFlight in_flight);

  // The tokens an answer's usage reported (0 where it said nothing).
  struct Tokens {
    long long prompt = 0;
    long long completion = 0;
  };

  // Writes `answer`'s line and records it (steps 1 and 2). An error means nothing of it is in the
  // output: the request is to be sent again. `tokens`, when given, gets the answer's usage once it
  // is recorded or written.
  [[nodiscard]] Result<Completion> complete(const Answer& answer, Tokens* tokens = nullptr);

  [[nodiscard]] long long output_bytes() const { return output_bytes_; }
  [[nodiscard]] int fd() const { return output_.get(); }

 private:
  [[nodiscard]] Result<void> write_line(const std::string& line, long long offset);
  // Cuts the output back to `offset` after a failed step; when even that fails, the next step
  // reconciles first.
  void undo(long long offset);
  [[nodiscard]] Result<void> cut_to(long long size, long long end);
  // Whether the file is not as the ledger left it: another length (its owner truncated or wrote to
  // it) or O_APPEND set (pwrite would append, away from the offset the store records).
  [[nodiscard]] bool changed_under_us() const;
  [[nodiscard]] Result<void> clear_append();
  // db_'s lock, when it is shared (share_db); an empty lock otherwise.
  [[nodiscard]] std::unique_lock<std::mutex> hold_db() const {
    return db_mutex_ != nullptr ? std::unique_lock<std::mutex>(*db_mutex_) : std::unique_lock<std::mutex>();
  }

  BatchDb& db_;
  std::mutex* db_mutex_ = nullptr;
  long long batch_;
  util::Fd output_;
  OutputIo io_;
  LedgerHook hook_;
  long long output_bytes_ = 0;
  bool dirty_ = true;  // reconcile before the next line: the first, or a step failed halfway
};

}  // namespace tarmac::backfill
