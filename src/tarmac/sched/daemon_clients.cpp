// The scheduler's socket clients (daemon_clients.hpp, docs/security.md): accepting within the caps,
// reading a request only when the previous answer has been read, writing without ever waiting, and
// closing what makes no progress.
#include "tarmac/sched/daemon_clients.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <limits>

#include "tarmac/sched/daemon_common.hpp"
#include "tarmac/util/closer.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::sched {

using detail::failure;
using nlohmann::json;

namespace {
constexpr long long kAcceptPauseMs = 100;  // out of descriptors: accept again after this
}  // namespace

Clients::Clients(Listener listener, ClientLimits limits, std::function<long long()> clock, Answer answer, Lives lives,
                 util::LogSink log, int wake_fd)
    : listener_(std::move(listener)), limits_(limits), clock_(std::move(clock)), answer_(std::move(answer)),
      lives_(std::move(lives)), log_(std::move(log)) {
  posted_->wake = util::Fd(wake_fd >= 0 ? ::fcntl(wake_fd, F_DUPFD_CLOEXEC, 0) : -1);
}

Clients::Polled Clients::add_to_poll(std::vector<pollfd>& fds, long long now_ms) const {
  Polled out;
  out.listener = fds.size();
  fds.push_back({now_ms >= accept_after_ms_ ? listener_.fd() : -1, POLLIN, 0});
  for (const auto& c : clients_) {
    // One that waits for an answer given later is read from no more: only its hanging up is seen.
    const short events = c->has_output() ? POLLOUT : c->awaiting() ? 0 : POLLIN;
    fds.push_back({c->conn().fd(), events, 0});
    out.clients.push_back(c.get());
  }
  return out;
}

void Clients::serve_ready(const std::vector<pollfd>& fds, const Polled& polled) {
  for (std::size_t i = 0; i < polled.clients.size(); ++i) {
    const short revents = fds[polled.listener + 1 + i].revents;
    if (revents == 0) continue;
    Client& c = *polled.clients[i];
    if (c.awaiting() && !c.has_output()) {
      if ((revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) c.drop();  // hung up: its answer has no one to go to
      continue;
    }
    if (c.has_output()) c.flush(clock_());
    serve(c);  // its answer was read: the next request, if any is buffered or arrives
  }
}

void Clients::accept_ready(const std::vector<pollfd>& fds, const Polled& polled) {
  if (fds[polled.listener].revents != 0) accept();
}

void Clients::accept() {
  const long long now = clock_();
  for (;;) {
    Connection conn = listener_.accept();
    if (conn.fd() < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The connection stays in the backlog; polling the listener now would only spin.
        accept_after_ms_ = now + kAcceptPauseMs;
        log(util::LogLevel::Warning, fmt::format("scheduler: cannot accept a connection: {}", std::strerror(errno)));
      }
      return;
    }
    auto peer = conn.peer();
    if (!peer.ok()) continue;  // closed
    const std::size_t mine = static_cast<std::size_t>(
        std::count_if(clients_.begin(), clients_.end(), [&](const auto& c) { return c->uid() == peer->uid; }));
    const Admission admission = admit(peer->uid, mine, clients_.size(), limits_);
    if (admission != Admission::Admit) {
      // One line that says why, written only if the socket takes it now; then closed.
      const std::string why =
          admission == Admission::UserCap
              ? fmt::format("{} already has {} connections open to the agent, the per-user cap "
                            "(scheduler.user_connection_cap); each attached `tarmac run` holds one (--detach does not)",
                            detail::user_name(peer->uid), mine)
              : fmt::format("the agent serves {} connections, as many as it takes; try again soon", clients_.size());
      conn.queue_line(util::json_text(failure("busy", why)));
      (void)conn.flush();
      continue;
    }
    clients_.push_back(std::make_unique<Client>(std::move(conn), std::move(*peer), now, next_serial_++));
    serve(*clients_.back());  // a request often arrives with the connection
  }
}

void Clients::send(Client& c, const std::string& line) { c.push(line, limits_.max_output, clock_()); }

void Clients::serve(Client& c) {
  while (c.reading()) {
    std::string line;
    if (!c.conn().take_line(line)) {
      if (c.conn().fill(c.fds) != Connection::Fill::Open) {
        c.drop();  // hung up, or a line or descriptors past the limits
        return;
      }
      if (!c.conn().take_line(line)) return;  // the rest of the line later
    }
    c.requested(clock_());
    const json req = json::parse(line, nullptr, false);
    const json answer = req.is_object() ? answer_(c, req, [this, &c] { return later(c); })
                                        : failure("invalid", "a request must be one JSON object");
    // Descriptors came with this request; what it did not take is closed, off this thread: a close
    // can wait on the sender (a file of its FUSE mount, a socket it set to linger).
    util::close_in_background(c.fds);
    if (c.awaiting()) return;  // answered later (deliver_posted)
    send_answer(c, answer);
  }
}

void Clients::send_answer(Client& c, const json& answer) {
  send(c, util::json_text(answer));
  if (c.watching == 0 || !lives_(c.watching)) c.close_when_written();
}

AnswerLater Clients::later(Client& c) {
  c.await();
  return [posted = posted_, serial = c.serial()](Finish finish) {
    {
      std::lock_guard lock(posted->mutex);
      posted->finishes.emplace_back(serial, std::move(finish));
    }
    const std::uint64_t one = 1;
    (void)!::write(posted->wake.get(), &one, sizeof one);
  };
}

void Clients::deliver_posted() {
  std::vector<std::pair<std::uint64_t, Finish>> ready;
  {
    std::lock_guard lock(posted_->mutex);
    ready.swap(posted_->finishes);
  }
  for (auto& [serial, finish] : ready) {
    json answer;
    try {
      answer = finish();  // whether or not its client is still there: it may have work to end
    } catch (const std::exception& e) {
      log(util::LogLevel::Error, fmt::format("scheduler: a request's last step failed: {}", e.what()));
      answer = failure("io", "the agent could not finish the request; see its log");
    }
    const auto it = std::find_if(clients_.begin(), clients_.end(), [serial = serial](const auto& c) {
      return c->serial() == serial;
    });
    if (it == clients_.end() || !(*it)->awaiting() || (*it)->finished()) continue;  // it hung up
    (*it)->answered();
    send_answer(**it, answer);
  }
}

bool Clients::follows(long long id) const {
  return std::any_of(clients_.begin(), clients_.end(),
                     [id](const auto& c) { return c->watching == id && !c->finished(); });
}

void Clients::tell_followers(const Job& job, JobEvent event) {
  const std::string line = util::json_text(json{{"event", to_string(event)}, {"job", to_json(job)}});
  for (auto& c : clients_) {
    if (c->watching != job.id) continue;
    send(*c, line);
    if (has_ended(job.state)) c->close_when_written();
  }
}

void Clients::close_idle() {
  const long long now = clock_();
  for (auto& c : clients_) {
    if (now >= c->deadline_ms(limits_.idle_timeout_ms)) c->drop();
  }
  std::erase_if(clients_, [](const auto& c) { return c->finished(); });
}

long long Clients::next_deadline(long long now_ms) const {
  long long next = std::numeric_limits<long long>::max();
  for (const auto& c : clients_) next = std::min(next, c->deadline_ms(limits_.idle_timeout_ms));
  if (accept_after_ms_ > now_ms) next = std::min(next, accept_after_ms_);
  return next;
}

}  // namespace tarmac::sched
