// One connection to the agent's socket as the daemon holds it (docs/scheduler.md "The socket",
// docs/security.md): who is at the other end, what it sent (descriptors included), what it has yet
// to read, and the clock that ends a connection that makes no progress. Also the admission rule
// that keeps one user from taking every connection. Private to src/tarmac/sched.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tarmac/sched/wire.hpp"
#include "tarmac/util/fd.hpp"

namespace tarmac::sched {

struct ClientLimits {
  long long idle_timeout_ms = 30000;   // no request, or no output read, for this long: dropped
  unsigned user_connection_cap = 64;   // connections one user (not root) may hold; 0: no cap
  std::size_t max_clients = 1024;      // connections in all
  std::size_t root_reserve = 32;       // of those, kept for root
  std::size_t max_output = 1 << 20;    // unread output past one answer: dropped
};

class Client {
 public:
  // `serial`: this client's number among the agent's, never reused (an answer given later finds it).
  Client(Connection conn, Peer peer, long long now_ms, std::uint64_t serial = 0);
  // The descriptors it sent that no request took are closed off this thread (util/closer.hpp).
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  [[nodiscard]] Connection& conn() { return conn_; }
  [[nodiscard]] const Peer& peer() const { return peer_; }
  [[nodiscard]] uid_t uid() const { return peer_.uid; }
  [[nodiscard]] std::uint64_t serial() const { return serial_; }

  // Descriptors that came with the request being answered; what it does not take is closed after it.
  std::vector<util::Fd> fds;
  long long watching = 0;  // the job whose events it gets; 0 for none

  // Queues `line` and writes what the peer takes now. A peer whose unread output would pass
  // `max_output` (beyond an answer queued into an empty buffer) is dropped instead.
  void push(const std::string& line, std::size_t max_output, long long now_ms);
  // Writes what the peer takes now (on POLLOUT).
  void flush(long long now_ms);
  // A complete request was read: the idle clock starts again.
  void requested(long long now_ms) { last_request_ms_ = now_ms; }

  // Its request is answered later (sched::Defer): until answered() nothing more is read from it,
  // and it is not dropped for making no progress (only when it hangs up).
  void await() { awaiting_ = true; }
  void answered() { awaiting_ = false; }
  [[nodiscard]] bool awaiting() const { return awaiting_; }

  // Close once the output is written (the answer to a one-shot request).
  void close_when_written() { closing_ = true; }
  // Close now, whatever is unread (the peer hung up, broke the protocol or passed a limit).
  void drop() { gone_ = true; }

  [[nodiscard]] bool has_output() const { return conn_.pending_output() > 0; }
  // Whether requests may be read: not while an answer waits to be read or to be given, nor once it
  // is closing.
  [[nodiscard]] bool reading() const { return !gone_ && !closing_ && !awaiting_ && !has_output(); }
  // Whether it is to be closed now.
  [[nodiscard]] bool finished() const { return gone_ || (closing_ && !has_output()); }
  // When it is dropped for making no progress: output unread for `idle_timeout_ms`, or (not
  // following a job) no request for as long. LLONG_MAX when never (it follows a job, or waits for
  // an answer given later, its output read).
  [[nodiscard]] long long deadline_ms(long long idle_timeout_ms) const;

 private:
  Connection conn_;
  Peer peer_;
  std::uint64_t serial_ = 0;
  bool closing_ = false;
  bool gone_ = false;
  bool awaiting_ = false;
  long long last_request_ms_ = 0;  // accepted, or its last complete request (monotonic)
  long long last_write_ms_ = 0;    // its output last moved, or became pending (monotonic)
};

enum class Admission { Admit, UserCap, Full };

// Whether a new connection of `uid` is served, with `user_open` of that user's and `total_open` in
// all already open. Root is never held to the per-user cap and has `root_reserve` connections that
// no one else may take, so an administrator always gets through.
[[nodiscard]] Admission admit(uid_t uid, std::size_t user_open, std::size_t total_open, const ClientLimits& limits);

}  // namespace tarmac::sched
