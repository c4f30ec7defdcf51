// The dispatcher's senders (dispatch.hpp, docs/backfill.md "Dispatch"): each takes a pending
// request at a time, inside its batch's window and one of its server's slots, sends it through the
// server's protocol, and hands the answer to the batch's writer (dispatch_write.cpp).
#include <chrono>
#include <ctime>
#include <fmt/format.h>
#include <string>

#include "dispatch_run.hpp"
#include "tarmac/backfill/ollama.hpp"
#include "tarmac/backfill/openai.hpp"
#include "tarmac/host/tcp_owner.hpp"
#include "tarmac/util/clock.hpp"

namespace tarmac::backfill {

namespace dispatch_detail {

int local_minute_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  return tm.tm_hour * 60 + tm.tm_min;
}

}  // namespace dispatch_detail

namespace {

using dispatch_detail::backoff;
using dispatch_detail::kKeptThroughWaitMs;

int minute_of(std::string_view hh_mm) {
  return ((hh_mm[0] - '0') * 10 + (hh_mm[1] - '0')) * 60 + (hh_mm[3] - '0') * 10 + (hh_mm[4] - '0');
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


}  // namespace tarmac::backfill
