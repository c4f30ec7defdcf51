// Submitted batches read, parsed and stored off the scheduler's thread (intake.hpp).
#include "tarmac/backfill/intake.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <vector>

#include "tarmac/backfill/output_file.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/closer.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::backfill {

namespace {

constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;

// An error whose cause is the answer's code.
Error coded(const std::string& code, const Error& e) { return make_error(e.code, e.message, code); }

// The input the CLI handed over: a sealed memfd (it can neither change nor block while the agent
// reads it) of at most max_input_bytes.
Result<std::string> read_input(int fd, const InputLimits& limits) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kRequiredSeals) != kRequiredSeals) {
    return make_error(Error::Code::Invalid, "the input must come as a sealed memfd (tarmac backfill submit makes one)");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return make_error(Error::Code::Invalid, "the input is not a file");
  if (static_cast<std::uint64_t>(st.st_size) > limits.max_input_bytes) {
    return make_error(Error::Code::Invalid, fmt::format("the input is {} bytes, more than the {} a batch may hold",
                                                        st.st_size, limits.max_input_bytes));
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error(Error::Code::Io, fmt::format("cannot read the input: {}", std::strerror(errno)));
    got += static_cast<std::size_t>(n);
  }
  return text;
}

// Whether the bodies of `requests` fit in `uid`'s quota and everyone's (quota.hpp).
Result<void> room_for_requests(BatchDb& db, uid_t uid, const std::vector<BatchRequest>& requests,
                               const BatchQuota& quota) {
  long long bytes = 0;
  for (const auto& r : requests) bytes += static_cast<long long>(r.body.size());
  TARMAC_TRY_ASSIGN(const auto user, db.holding(uid));
  TARMAC_TRY_ASSIGN(const auto all, db.holding(std::nullopt));
  return room_for_bodies(uid, bytes, user, all, quota);
}

}  // namespace

std::string account_name(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) return found->pw_name;
  return std::to_string(uid);
}

Result<void> room_for_a_batch(BatchDb& db, uid_t uid, const BatchQuota& quota) {
  TARMAC_TRY_ASSIGN(const auto held, db.holding(uid));
  return room_for_a_batch(uid, held, quota);
}

Result<void> output_is_free(BatchDb& db, const struct stat& st) {
  TARMAC_TRY_ASSIGN(const auto other, db.unfinished_on(static_cast<long long>(st.st_dev),
                                                       static_cast<long long>(st.st_ino)));
  if (!other) return {};
  return make_error(Error::Code::Invalid,
                    fmt::format("that file is already the output of batch {}, which has not ended: name a new file",
                                *other),
                    std::string("invalid"));
}

Result<std::unique_ptr<Intake>> Intake::open(IntakeOptions options, Finish finish) {
  TARMAC_TRY_ASSIGN(auto db, BatchDb::open(options.db_path));
  auto intake = std::unique_ptr<Intake>(new Intake(std::move(options), std::move(db), std::move(finish)));
  try {
    intake->thread_ = std::thread([raw = intake.get()] { raw->run(); });
  } catch (const std::system_error& e) {
    return make_error(Error::Code::Io, fmt::format("cannot start the thread that reads submitted batches: {}", e.what()));
  }
  return intake;
}

Intake::Intake(IntakeOptions options, BatchDb db, Finish finish)
    : opt_(std::move(options)),
      db_(std::move(db)),
      finish_(std::move(finish)),
      input_rate_(opt_.quota.input_bytes_per_minute) {}

Intake::~Intake() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<void> Intake::room_for(uid_t uid) const {
  std::lock_guard lock(mutex_);
  std::size_t total = 0;
  for (const auto& [holder, n] : held_) total += n;
  const auto mine = held_.find(uid);
  if (uid != 0 && mine != held_.end() && mine->second >= opt_.max_per_user) {
    return make_error(Error::Code::Invalid,
                      fmt::format("you have {} batches being read by the agent, the most one user may: wait for "
                                  "their answers",
                                  mine->second),
                      std::string("busy"));
  }
  if (total >= opt_.max_total) {
    return make_error(Error::Code::Invalid,
                      fmt::format("the agent is reading {} batches, as many as it takes at once; try again soon", total),
                      std::string("busy"));
  }
  return {};
}

void Intake::add(Submission s) {
  {
    std::lock_guard lock(mutex_);
    ++held_[s.uid];
    queued_[s.uid].push_back(std::move(s));
  }
  cv_.notify_all();
}

std::size_t Intake::pending() const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& [uid, held] : held_) n += held;
  return n;
}

void Intake::run() {
  for (;;) {
    Submission s;
    {
      std::unique_lock lock(mutex_);
      // The next user after the last one served whose submission waits and who has none taken up.
      const auto ready = [&](const auto& entry) { return !entry.second.empty() && busy_.count(entry.first) == 0; };
      auto next = queued_.end();
      cv_.wait(lock, [&] {
        if (stop_.load()) return true;
        next = std::find_if(queued_.upper_bound(last_), queued_.end(), ready);
        if (next == queued_.end()) next = std::find_if(queued_.begin(), queued_.end(), ready);
        return next != queued_.end();
      });
      if (stop_.load()) return;
      s = std::move(next->second.front());
      next->second.pop_front();
      if (next->second.empty()) queued_.erase(next);
      busy_.insert(s.uid);
      last_ = s.uid;
    }
    std::shared_ptr<Intaken> result;
    try {
      result = std::make_shared<Intaken>(take(s));
    } catch (const std::exception& e) {  // out of memory, with 200 MiB to parse
      result = std::make_shared<Intaken>();
      result->uid = s.uid;
      result->refusal = make_error(Error::Code::Io, fmt::format("the agent could not read the batch: {}", e.what()),
                                   std::string("io"));
    }
    // The user's descriptors, closed off this thread: a close can wait on the sender (its FUSE
    // mount's flush, a socket it set to linger), and other users' batches wait behind this one.
    util::close_in_background(std::move(s.input));
    util::close_in_background(std::move(s.output));
    // Stopped: what take() stored was dropped, or (stopped after its last step) stays `loading`,
    // removed when the agent starts again; the client gets no answer.
    if (stop_.load()) return;
    // The scheduler's thread makes the batch queued (or drops it) and answers; only then may this
    // user's next submission be taken up.
    s.answer([this, result] {
      {
        std::lock_guard lock(mutex_);
        busy_.erase(result->uid);
        if (--held_[result->uid] == 0) held_.erase(result->uid);
      }
      cv_.notify_all();
      return finish_(std::move(*result));
    });
  }
}

Intaken Intake::take(Submission& s) {
  const long long t0 = util::monotonic_ms();
  Intaken out;
  out.uid = s.uid;
  out.batch = std::move(s.batch);
  const auto refuse = [&](const Error& e) {
    out.refusal = e;
    out.took_ms = util::monotonic_ms() - t0;
    return std::move(out);
  };
  out.batch.user = account_name(s.uid);
  std::vector<BatchRequest> requests;
  {
    auto input = read_input(s.input.get(), opt_.limits);
    if (!input.ok()) return refuse(coded("invalid", input.error()));
    log(util::LogLevel::Info, fmt::format("backfill: reading a batch of {} ({})", out.batch.user,
                                          util::format_bytes(input->size())));
    if (auto rate = input_rate_.take(s.uid, input->size(), util::monotonic_ms()); !rate.ok()) return refuse(rate.error());
    auto parsed = s.texts ? parse_texts(*input, s.template_text, out.batch.model, opt_.limits)
                          : parse_jsonl(*input, out.batch.model, opt_.limits);
    if (!parsed.ok()) {
      out.line = problem_line(parsed.error());
      return refuse(coded("invalid", parsed.error()));  // nothing is stored
    }
    requests = std::move(*parsed);
  }  // the input's copy freed before the bodies are stored
  // Checked again here, where batches are stored one at a time: two submissions checked at once on
  // the scheduler's thread could each have fitted alone.
  if (auto room = room_for_a_batch(db_, s.uid, opt_.quota); !room.ok()) return refuse(room.error());
  if (auto room = room_for_requests(db_, s.uid, requests, opt_.quota); !room.ok()) return refuse(room.error());
  if (auto free = output_is_free(db_, s.output_stat); !free.ok()) return refuse(free.error());
  Batch& batch = out.batch;
  batch.uid = s.uid;
  batch.output_dev = static_cast<long long>(s.output_stat.st_dev);
  batch.output_ino = static_cast<long long>(s.output_stat.st_ino);
  batch.output_btime_ns = birth_time_ns(s.output.get());
  auto own = private_description(s.output.get());
  if (!own.ok()) return refuse(own.error());
  out.own_output = std::move(*own);
  batch.submitted_ms = util::wall_ms();
  batch.state = BatchState::Queued;  // once loaded
  batch.reason = fmt::format("queued for server {}", batch.server);
  auto stored = store(out, requests);
  if (!stored.ok()) {
    return refuse(make_error(Error::Code::Io, fmt::format("cannot record the batch in the store: {}",
                                                          stored.error().message),
                             std::string("io")));
  }
  out.took_ms = util::monotonic_ms() - t0;
  return out;
}

Result<bool> Intake::store(Intaken& out, const std::vector<BatchRequest>& requests) {
  TARMAC_TRY(db_.begin_loading(out.batch, requests));
  const long long id = out.batch.id;
  const auto drop = [&] {
    if (auto r = db_.drop_loading(id); !r.ok()) {
      log(util::LogLevel::Warning, fmt::format("backfill: cannot remove the batch being stored: {} (the agent removes "
                                               "it when it starts again)",
                                               r.error().message));
    }
  };
  for (std::size_t from = 0; from < requests.size();) {
    if (stop_.load()) {
      drop();
      return false;
    }
    std::size_t to = from;
    std::size_t bytes = 0;
    while (to < requests.size() && to - from < opt_.chunk_requests && bytes < opt_.chunk_bytes) {
      bytes += requests[to].body.size();
      ++to;
    }
    const long long began = util::monotonic_ms();
    if (auto r = db_.load(id, requests, from, to); !r.ok()) {
      drop();
      return r.error();
    }
    from = to;
    if (from < requests.size()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::max(1LL, (util::monotonic_ms() - began) / 2)));
    }
  }
  return true;
}

}  // namespace tarmac::backfill
