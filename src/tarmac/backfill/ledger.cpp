// A batch's output and its rows kept in step (ledger.hpp, docs/backfill.md "Exactly once").
#include "tarmac/backfill/ledger.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "tarmac/util/escape.hpp"

namespace tarmac::backfill {

using json = nlohmann::json;

namespace {

// The most of the output past output_bytes that reconcile() reads. A crash leaves at most one line
// there, failed commits a few more; anything past this is cut and its requests sent again.
constexpr long long kMaxTailBytes = 64LL << 20;
// The deepest answer body kept as JSON; a deeper one is kept as a string.
constexpr std::size_t kMaxBodyDepth = 128;

Error io_error(const char* what, int err) {
  return make_error(Error::Code::Io, fmt::format("cannot {} the output: {}", what, std::strerror(err)));
}

// The server's body as JSON when it is a JSON document of bounded depth, else as a string.
json body_value(const std::string& body) {
  if (json_nesting_depth(body) <= kMaxBodyDepth) {
    json parsed = json::parse(body, nullptr, false);
    if (!parsed.is_discarded()) return parsed;
  }
  return json(util::valid_utf8(body));
}

constexpr long long kMostTokens = 1LL << 40;

std::optional<long long> usage_of(const json& body, const char* key) {
  if (!body.is_object()) return std::nullopt;
  const auto usage = body.find("usage");
  if (usage == body.end() || !usage->is_object()) return std::nullopt;
  const auto v = usage->find(key);
  // A server's count is believed up to a trillion tokens: sums of more would overflow.
  if (v == usage->end() || !v->is_number_integer() || v->get<long long>() < 0 || v->get<long long>() > kMostTokens) {
    return std::nullopt;
  }
  return v->get<long long>();
}

// A line of the tail as the ledger would have written it: the request it answers and how.
struct TailLine {
  long long index = 0;
  Answered answered;
};

// The request `text` (one whole line, without its newline) answers, when it is a line this batch's
// ledger wrote; nullopt for anything else.
std::optional<TailLine> read_tail_line(std::string_view text, long long batch) {
  if (json_nesting_depth(text) > kMaxBodyDepth + 4) return std::nullopt;
  const json line = json::parse(text, nullptr, false);
  if (!line.is_object()) return std::nullopt;
  const auto id = line.find("id");
  const auto custom_id = line.find("custom_id");
  const auto error = line.find("error");
  if (id == line.end() || !id->is_string() || custom_id == line.end() || !custom_id->is_string() ||
      error == line.end()) {
    return std::nullopt;
  }
  const auto index = index_from_line_id(id->get_ref<const std::string&>(), batch);
  if (!index || output_line_id(batch, *index) != id->get_ref<const std::string&>()) return std::nullopt;
  TailLine out;
  out.index = *index;
  out.answered.index = *index;
  out.answered.state = error->is_null() ? RequestState::Done : RequestState::Failed;
  if (!error->is_null()) {
    const auto message = error->is_object() ? error->find("message") : error->end();
    out.answered.error = message != error->end() && message->is_string() ? message->get<std::string>() : "failed";
  }
  const auto response = line.find("response");
  if (response != line.end() && response->is_object()) {
    const auto body = response->find("body");
    if (body != response->end()) {
      out.answered.prompt_tokens = usage_of(*body, "prompt_tokens");
      out.answered.completion_tokens = usage_of(*body, "completion_tokens");
    }
  }
  out.answered.ended_ms = 0;  // unknown: the crash took it
  return out;
}

// The output line of `answer`, whose body is `body`.
std::string line_of(long long batch, const Answer& answer, const json& body) {
  const std::string id = output_line_id(batch, answer.index);
  json line = {{"id", id}, {"custom_id", answer.custom_id}};
  line["response"] = answer.status ? json{{"status_code", *answer.status}, {"request_id", id}, {"body", body}}
                                   : json(nullptr);
  line["error"] = answer.error_code.empty() ? json(nullptr)
                                            : json{{"code", answer.error_code}, {"message", answer.error_message}};
  return util::json_text(line);
}

}  // namespace

std::string output_line(long long batch, const Answer& answer) {
  return line_of(batch, answer, body_value(answer.body));
}

Ledger::Ledger(BatchDb& db, long long batch, util::Fd output, OutputIo io, LedgerHook hook)
    : db_(db), batch_(batch), output_(std::move(output)), io_(std::move(io)), hook_(std::move(hook)) {}

Result<void> Ledger::cut_to(long long size, long long end) {
  if (size <= end) return {};
  if (io_.truncate(output_.get(), static_cast<off_t>(end)) != 0) return io_error("cut", errno);
  if (io_.sync(output_.get()) != 0) return io_error("sync", errno);
  return {};
}

Result<Reconciled> Ledger::reconcile(InFlight in_flight) {
  auto db_lock = hold_db();
  TARMAC_TRY_ASSIGN(const auto batch, db_.batch(batch_));
  if (!batch) return make_error(Error::Code::NotFound, fmt::format("no batch {}", batch_));
  if (db_lock) db_lock.unlock();
  struct stat st {};
  if (::fstat(output_.get(), &st) != 0) return io_error("look at", errno);
  const long long size = st.st_size;
  // The rows only when the output is not as long as the store says (a crash, the owner's hand):
  // 50,000 of them take a while, and a batch handed over whole (a new one) needs none.
  std::vector<RequestRow> rows;
  if (size != batch->output_bytes) {
    if (db_mutex_ != nullptr) db_lock.lock();
    TARMAC_TRY_ASSIGN(rows, db_.rows(batch_));
    if (db_lock) db_lock.unlock();
  }
  Commit commit;
  commit.in_flight_to_pending = in_flight == InFlight::BackToPending;
  Reconciled done;
  long long end = batch->output_bytes;
  if (size < batch->output_bytes) {
    // Lines the store accounts for are gone: keep those still whole, send the others again.
    end = 0;
    for (const auto& r : rows) {
      if (r.out_offset < 0) continue;
      if (r.out_offset + r.out_len <= size) {
        end = std::max(end, r.out_offset + r.out_len);
      } else {
        commit.lost.push_back(r.index);
      }
    }
    done.lost = static_cast<long long>(commit.lost.size());
  } else if (size > end) {
    std::string tail(static_cast<std::size_t>(std::min(size - end, kMaxTailBytes)), '\0');
    const ssize_t got = ::pread(output_.get(), tail.data(), tail.size(), static_cast<off_t>(end));
    if (got < 0) return io_error("read", errno);
    tail.resize(static_cast<std::size_t>(got));
    std::set<long long> adopted;
    for (std::size_t from = 0;;) {
      const auto nl = tail.find('\n', from);
      if (nl == std::string::npos) break;  // torn: cut
      const auto line = read_tail_line(std::string_view(tail).substr(from, nl - from), batch_);
      if (!line || line->index >= static_cast<long long>(rows.size())) break;
      const RequestRow& row = rows[static_cast<std::size_t>(line->index)];
      const bool unanswered = row.state == RequestState::Pending || row.state == RequestState::InFlight;
      if (row.index != line->index || !unanswered || adopted.count(line->index) > 0) break;
      Answered a = line->answered;
      a.out_offset = end;
      a.out_len = static_cast<long long>(nl - from + 1);
      commit.answered.push_back(a);
      adopted.insert(line->index);
      end += a.out_len;
      from = nl + 1;
    }
    done.adopted = static_cast<long long>(commit.answered.size());
  }
  // Cut first: a crash between the two leaves adopted lines in place, to be adopted again.
  TARMAC_TRY(cut_to(size, end));
  done.cut_bytes = std::max(0LL, size - end);
  commit.output_bytes = end;
  if (db_mutex_ != nullptr) db_lock.lock();
  TARMAC_TRY(db_.commit(batch_, commit));
  output_bytes_ = end;
  dirty_ = false;
  return done;
}

Result<void> Ledger::write_line(const std::string& line, long long offset) {
  std::size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = io_.pwrite(output_.get(), line.data() + written, line.size() - written,
                                 static_cast<off_t>(offset + static_cast<long long>(written)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error("write", n == 0 ? ENOSPC : errno);
    written += static_cast<std::size_t>(n);
  }
  return {};
}

void Ledger::undo(long long offset) {
  if (io_.truncate(output_.get(), static_cast<off_t>(offset)) != 0) dirty_ = true;
}

bool Ledger::changed_under_us() const {
  struct stat st {};
  const int flags = ::fcntl(output_.get(), F_GETFL);
  return ::fstat(output_.get(), &st) != 0 || st.st_size != output_bytes_ || flags < 0 || (flags & O_APPEND) != 0;
}

Result<void> Ledger::clear_append() {
  const int flags = ::fcntl(output_.get(), F_GETFL);
  if (flags >= 0 && (flags & O_APPEND) != 0 && ::fcntl(output_.get(), F_SETFL, flags & ~O_APPEND) != 0) {
    return io_error("clear O_APPEND on", errno);
  }
  return {};
}

Result<Ledger::Completion> Ledger::complete(const Answer& answer, Tokens* tokens) {
  if (dirty_ || changed_under_us()) {
    TARMAC_TRY(clear_append());
    TARMAC_TRY(reconcile(InFlight::Keep));
  }
  TARMAC_TRY_ASSIGN(const auto state, [&] {
    const auto db_lock = hold_db();
    return db_.state_of(batch_, answer.index);
  }());
  if (!state) return make_error(Error::Code::Invalid, fmt::format("batch {} has no request {}", batch_, answer.index));
  if (*state == RequestState::Done || *state == RequestState::Failed) return Completion::AlreadyAnswered;
  const json body = body_value(answer.body);
  const std::string line = line_of(batch_, answer, body) + "\n";
  const long long offset = output_bytes_;
  if (auto w = write_line(line, offset); !w.ok()) {
    undo(offset);
    return w.take_error();
  }
  if (hook_) hook_(LedgerStep::Written, answer.index);
  if (io_.sync(output_.get()) != 0) {
    const int err = errno;
    undo(offset);
    return io_error("sync", err);
  }
  if (hook_) hook_(LedgerStep::Synced, answer.index);
  Answered a;
  a.index = answer.index;
  a.state = answer.error_code.empty() ? RequestState::Done : RequestState::Failed;
  a.prompt_tokens = usage_of(body, "prompt_tokens");
  a.completion_tokens = usage_of(body, "completion_tokens");
  a.ended_ms = answer.ended_ms;
  a.error = answer.error_message;
  a.out_offset = offset;
  a.out_len = static_cast<long long>(line.size());
  if (tokens != nullptr) *tokens = Tokens{a.prompt_tokens.value_or(0), a.completion_tokens.value_or(0)};
  const bool recorded = [&] {
    const auto db_lock = hold_db();
    return db_.commit(batch_, Commit{{a}, {}, false, offset + a.out_len}).ok();
  }();
  if (!recorded) {
    dirty_ = true;  // the line is there: the next step adopts it
    return Completion::Written;
  }
  if (hook_) hook_(LedgerStep::Committed, answer.index);
  output_bytes_ = offset + a.out_len;
  return Completion::Recorded;
}

}  // namespace tarmac::backfill
