// The scheduler's socket clients (daemon_state.hpp, docs/security.md): accepting within the caps,
// reading a request only when the previous answer has been read, writing without ever waiting, and
// closing what makes no progress. Every descriptor a client sent lives in a util::Fd, so dropping a
// client on any path closes them.
#include <algorithm>
#include <cerrno>
#include <limits>

#include "tarmac/sched/daemon_state.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::sched {

using namespace detail;

ClientLimits Daemon::State::client_limits() const {
  ClientLimits l;
  l.idle_timeout_ms = opt.config.connection_idle_timeout_ms;
  l.user_connection_cap = opt.config.user_connection_cap;
  return l;
}

void Daemon::State::accept_clients() {
  const ClientLimits limits = client_limits();
  const long long now = clock();
  for (;;) {
    Connection conn = listener.accept();
    if (conn.fd() < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The connection stays in the backlog; polling the listener now would only spin.
        accept_after_ms = now + kAcceptPauseMs;
        log(util::LogLevel::Warning, fmt::format("scheduler: cannot accept a connection: {}", std::strerror(errno)));
      }
      return;
    }
    auto peer = conn.peer();
    if (!peer.ok()) continue;  // closed
    const std::size_t mine = static_cast<std::size_t>(
        std::count_if(clients.begin(), clients.end(), [&](const auto& c) { return c->uid() == peer->uid; }));
    const Admission admission = admit(peer->uid, mine, clients.size(), limits);
    if (admission != Admission::Admit) {
      // One line that says why, written only if the socket takes it now; then closed.
      const std::string why =
          admission == Admission::UserCap
              ? fmt::format("{} already has {} connections open to the agent, the per-user cap "
                            "(scheduler.user_connection_cap); each attached `tarmac run` holds one (--detach does not)",
                            user_name(peer->uid), mine)
              : fmt::format("the agent serves {} connections, as many as it takes; try again soon", clients.size());
      conn.queue_line(util::json_text(failure("busy", why)));
      (void)conn.flush();
      continue;
    }
    clients.push_back(std::make_unique<Client>(std::move(conn), std::move(*peer), now));
    serve_client(*clients.back());  // a request often arrives with the connection
  }
}

void Daemon::State::send(Client& c, const std::string& line) {
  c.push(line, client_limits().max_output, clock());
}

void Daemon::State::serve_client(Client& c) {
  while (c.reading()) {
    std::string line;
    if (!c.conn().take_line(line)) {
      if (c.conn().fill(c.fds) != Connection::Fill::Open) {
        c.drop();  // hung up, or a line or descriptors past the limits
        return;
      }
      if (!c.conn().take_line(line)) return;  // the rest of the line later
    }
    c.requested(clock());
    const json req = json::parse(line, nullptr, false);
    const json answer = req.is_object() ? handle(c, req) : failure("invalid", "a request must be one JSON object");
    send(c, util::json_text(answer));
    if (c.watching == 0 || !jobs.contains(c.watching)) c.close_when_written();
    c.fds.clear();  // descriptors came with this request; what it did not take is closed
  }
}

void Daemon::State::close_clients() {
  const long long now = clock();
  const long long timeout = client_limits().idle_timeout_ms;
  for (auto& c : clients) {
    if (now >= c->deadline_ms(timeout)) c->drop();
  }
  std::erase_if(clients, [](const auto& c) { return c->finished(); });
}

long long Daemon::State::next_client_deadline() const {
  const long long timeout = client_limits().idle_timeout_ms;
  long long next = std::numeric_limits<long long>::max();
  for (const auto& c : clients) next = std::min(next, c->deadline_ms(timeout));
  return next;
}

}  // namespace tarmac::sched
