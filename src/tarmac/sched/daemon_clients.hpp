// The scheduler's socket clients (daemon_state.hpp). Private to src/tarmac/sched.
#pragma once

#include <poll.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tarmac/sched/client.hpp"
#include "tarmac/sched/daemon.hpp"
#include "tarmac/sched/daemon_table.hpp"
#include "tarmac/util/log.hpp"

namespace tarmac::sched {

// The socket's clients (docs/security.md): accepting within the caps (ClientLimits), reading a
// request only when the previous answer has been read, answering it (through `answer`), writing
// without ever waiting, telling the clients that follow a job its events, and closing what makes
// no progress. Owns the listener and every connection (and each descriptor a client sent, in a
// util::Fd, so dropping a client on any path closes them). Times on the monotonic clock `clock`.
// A request may be answered later, from another thread (Defer): its Finish is posted here, the
// loop woken through `wake_fd` (the loop's eventfd, duplicated), and deliver_posted() runs it.
class Clients {
 public:
  // The answer to one request of `client`; ignored when the request called `defer`.
  using Answer = std::function<nlohmann::json(Client& client, const nlohmann::json& request, const Defer& defer)>;
  // Whether job `id` (which a client follows) has not ended.
  using Lives = std::function<bool(long long id)>;

  Clients(Listener listener, ClientLimits limits, std::function<long long()> clock, Answer answer, Lives lives,
          util::LogSink log, int wake_fd);

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

  // Runs the Finish of each answer posted since (AnswerLater) and sends it to its client, if that
  // client is still there. The loop's thread, after each wake-up.
  void deliver_posted();

 private:
  // Accepts every pending connection, refusing (with a line that says why) those past the caps.
  void accept();
  // Reads and answers c's requests while its answers are read.
  void serve(Client& c);
  // Sends `line` to c, dropping a client that lets its output pile up.
  void send(Client& c, const std::string& line);
  // Sends c's answer to its request, and closes c once it is read unless c follows a job.
  void send_answer(Client& c, const nlohmann::json& answer);
  // c's request is answered later: c waits, and the AnswerLater posts its Finish.
  AnswerLater later(Client& c);

  // The answers posted by other threads for the loop to deliver; shared with each AnswerLater, so
  // one posted after the scheduler has stopped is dropped harmlessly.
  struct Posted {
    std::mutex mutex;
    std::vector<std::pair<std::uint64_t, Finish>> finishes;  // (client serial, its last step)
    util::Fd wake;                                           // the loop's eventfd, duplicated
  };
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
  std::uint64_t next_serial_ = 1;
  std::shared_ptr<Posted> posted_ = std::make_shared<Posted>();
  long long accept_after_ms_ = 0;  // out of descriptors: the listener rests until then
};

}  // namespace tarmac::sched
