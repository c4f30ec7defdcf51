// The dispatcher's writer (dispatch.hpp, docs/backfill.md "Dispatch"): a batch's answers through
// its Ledger one at a time, in the order they came, counted, and the batch's stints recorded.
#include <chrono>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dispatch_run.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::backfill {

using dispatch_detail::backoff;

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
