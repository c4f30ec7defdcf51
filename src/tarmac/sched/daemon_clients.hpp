// The scheduler's socket clients (daemon_state.hpp). Private to src/tarmac/sched.
#pragma once

#include <poll.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tarmac/sched/client.hpp"
#include "tarmac/sched/daemon_table.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::sched {

// The socket's clients (docs/security.md): accepting within the caps (ClientLimits), reading a
// request only when the previous answer has been read, answering it (through `answer`), writing
// without ever waiting, telling the clients that follow a job its events, and closing what makes
// no progress. Owns the listener and every connection (and each descriptor a client sent, in a
// util::Fd, so dropping a client on any path closes them). Times on the monotonic clock `clock`.
class Clients {
 public:
  // The answer to one request of `client`.
  using Answer = std::function<nlohmann::json(Client& client, const nlohmann::json& request)>;
  // Whether job `id` (which a client follows) has not ended.
  using Lives = std::function<bool(long long id)>;

  Clients(Listener listener, ClientLimits limits, std::function<long long()> clock, Answer answer, Lives lives,
          util::LogSink log)
      : listener_(std::move(listener)), limits_(limits), clock_(std::move(clock)), answer_(std::move(answer)),
        lives_(std::move(lives)), log_(std::move(log)) {}

  // Where the loop's poll looks for the clients: the listener (unless it rests) and each connection.
  struct Polled {
    std::size_t listener = 0;  // index of the listener's entry in the poll set
    std::vector<Client*> clients;
  };
  // Adds the listener and each client (its next request or, while its answer waits, its reading;
  // never both) to `fds`, at `now_ms`.
  [[nodiscard]] Polled add_to_poll(std::vector<pollfd>& fds, long long now_ms) const;
  // Serves the polled clients that are ready (after poll).
  void serve_ready(const std::vector<pollfd>& fds, const Polled& polled);
  // Accepts the new connections when the listener is ready (after poll).
  void accept_ready(const std::vector<pollfd>& fds, const Polled& polled);
  // Drops the clients that made no progress for the idle timeout; closes the finished ones.
  void close_idle();
  // When (after `now_ms`) the next client is due to be dropped, or the resting listener to be
  // polled again; LLONG_MAX for none.
  [[nodiscard]] long long next_deadline(long long now_ms) const;

  // Whether a client that is not being closed follows job `id`.
  [[nodiscard]] bool follows(long long id) const;

  // Tells the clients that follow `job` about `event`; they are closed once it has ended.
  void tell_followers(const Job& job, JobEvent event);

 private:
  // Accepts every pending connection, refusing (with a line that says why) those past the caps.
  void accept();
  // Reads and answers c's requests while its answers are read.
  void serve(Client& c);
  // Sends `line` to c, dropping a client that lets its output pile up.
  void send(Client& c, const std::string& line);
  void log(util::LogLevel level, const std::string& message) const {
    if (log_) log_(level, message);
  }

  Listener listener_;
  ClientLimits limits_;
  std::function<long long()> clock_;
  Answer answer_;
  Lives lives_;
  util::LogSink log_;
  std::vector<std::unique_ptr<Client>> clients_;
  long long accept_after_ms_ = 0;  // out of descriptors: the listener rests until then
};

}  // namespace tarmac::sched
