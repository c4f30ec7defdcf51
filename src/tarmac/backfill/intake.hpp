// The reading and storing of submitted batches, off the scheduler's thread (docs/backfill.md
// "Security"): a 200 MiB input takes seconds to parse and store, and the scheduler's one thread
// answers every other request and starts every job meanwhile. The socket's thread checks what is
// quick (the fields, the server, the output) and hands the rest here; a thread of the intake reads
// the sealed input, parses it, checks the quotas and stores the batch in steps on a connection of
// its own (BatchDb::begin_loading), then posts the last step back to the scheduler's thread
// (sched::AnswerLater), which makes the batch queued, starts sending it and answers the client.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "tarmac/backfill/batch.hpp"
#include "tarmac/backfill/batch_db.hpp"
#include "tarmac/backfill/batch_input.hpp"
#include "tarmac/backfill/quota.hpp"
#include "tarmac/sched/daemon.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::backfill {

// The name of account `uid`, or its number when it has none.
[[nodiscard]] std::string account_name(uid_t uid);

// Whether `uid` may queue one more batch (quota.hpp); an error whose cause is its code ("busy").
[[nodiscard]] Result<void> room_for_a_batch(BatchDb& db, uid_t uid, const BatchQuota& quota);
// Whether the file `st` may be a new batch's output: not while another unfinished (or loading)
// batch writes to it (their lines would overwrite each other, and each one's recovery cut the
// other's). An error whose cause is its code ("invalid").
[[nodiscard]] Result<void> output_is_free(BatchDb& db, const struct stat& st);

// A submission the scheduler's thread has checked: its fields, server and output.
struct Submission {
  uid_t uid = 0;
  Batch batch;                 // the request's fields, its server chosen
  bool texts = false;          // a JSON array of texts and a template, else OpenAI Batch JSONL
  std::string template_text;
  util::Fd input;              // the sealed memfd
  util::Fd output;             // as handed over, checked (check_output)
  struct stat output_stat {};  // of `output`
  sched::AnswerLater answer;
};

// What came of a submission: its batch stored, still "loading", with a description of its output
// that is the agent's alone; or the refusal to answer (nothing stored).
struct Intaken {
  uid_t uid = 0;
  Batch batch;  // its id set when stored
  util::Fd own_output;
  std::optional<Error> refusal;  // its cause is the answer's code ("invalid", "busy", "io")
  std::size_t line = 0;          // the input's line that was refused, when one was
  long long took_ms = 0;         // from when the intake took it up to the post
};

struct IntakeOptions {
  std::string db_path;
  InputLimits limits;
  BatchQuota quota;
  util::LogSink log;
  // Requests per transaction while storing, and body bytes: each holds the store's other writers
  // (the scheduler's, the recorder's) for a moment only, and after each the intake rests half as
  // long as it took, so that a writer waiting in SQLite's busy handler finds the store free.
  std::size_t chunk_requests = 500;
  std::size_t chunk_bytes = 2U << 20;
  // Submissions waiting or being read, of one user (not root) and of all: each holds its client's
  // connection and two descriptors of the agent's until it is answered.
  std::size_t max_per_user = 4;
  std::size_t max_total = 64;
};

class Intake {
 public:
  // The scheduler's thread, with what came of a submission; its answer is the client's.
  using Finish = std::function<nlohmann::json(Intaken)>;

  // Opens a connection of its own to the store and starts the thread.
  [[nodiscard]] static Result<std::unique_ptr<Intake>> open(IntakeOptions options, Finish finish);
  // Stops the thread: a submission being stored is removed from the store, and it and those
  // waiting get no answer (their clients' connections end with the agent).
  ~Intake();
  Intake(const Intake&) = delete;
  Intake& operator=(const Intake&) = delete;

  // Whether a submission of `uid` may be queued: an error ("busy") past max_per_user or max_total.
  // Asked on the scheduler's thread before add(); only that thread adds.
  [[nodiscard]] Result<void> room_for(uid_t uid) const;
  // Queues `s` (the scheduler's thread). Users' submissions are taken in turn, each user's in
  // order and one at a time: the next waits until the last one's Finish has run, so that it sees
  // that batch in the store, as queued or refused.
  void add(Submission s);
  // How many submissions wait or are being read (for tests and the log).
  [[nodiscard]] std::size_t pending() const;

 private:
  Intake(IntakeOptions options, BatchDb db, Finish finish);
  void run();
  // Reads, parses, checks and stores `s`; what came of it.
  [[nodiscard]] Intaken take(Submission& s);
  // `s`'s requests stored in steps; false when the intake was stopped meanwhile (nothing kept).
  [[nodiscard]] Result<bool> store(Intaken& out, const std::vector<BatchRequest>& requests);
  void log(util::LogLevel level, const std::string& message) const {
    if (opt_.log) opt_.log(level, message);
  }

  IntakeOptions opt_;
  BatchDb db_;  // the intake's thread's alone
  Finish finish_;
  InputRate input_rate_;  // the intake's thread's alone
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<uid_t, std::deque<Submission>> queued_;  // under mutex_
  std::set<uid_t> busy_;                            // taken up, Finish not yet run; under mutex_
  std::map<uid_t, std::size_t> held_;               // waiting or taken up, per user; under mutex_
  uid_t last_ = 0;                                  // whose turn was last; under mutex_
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace tarmac::backfill
