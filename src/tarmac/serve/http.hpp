// A small HTTP/1.1 server for the agent's endpoints (docs/metrics.md): one thread, poll(2) over
// non-blocking sockets, keep-alive, GET and HEAD only. Every request is bounded (head size, body
// size, time to send the head, connections), and anything malformed gets a 4xx answer and a
// closed connection: a bad client never stops the agent or its other clients.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "tarmac/util/fd.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::serve {

struct Request {
  std::string method;  // "GET" or "HEAD"
  std::string path;    // "/api/v1/history", percent-decoded
  std::map<std::string, std::string> query;  // decoded; a repeated name keeps the last value
  std::string host;    // the Host header as sent; empty when there was none
  std::string authorization;  // the Authorization header as sent; empty when there was none
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::string extra_headers;  // "Name: value\r\n" lines
};

[[nodiscard]] Response text_response(int status, std::string body);

using Handler = std::function<Response(const Request&)>;

struct ServerLimits {
  std::size_t max_head_bytes = 8192;    // request line and headers: 431 beyond
  std::size_t max_target_bytes = 2048;  // the request target: 414 beyond
  std::size_t max_connections = 256;    // 503 to the next one
  int head_timeout_ms = 10'000;         // the head must arrive within this: 408
  int idle_timeout_ms = 60'000;         // a keep-alive connection with nothing to do is closed
  // Answers waiting for a client that does not read: past this many bytes no further request of
  // the connection is read or answered, so pipelined requests cannot grow the agent's memory.
  std::size_t max_output_bytes = 64 * 1024;
  int write_timeout_ms = 10'000;  // pending answers the client takes nothing of for this long: closed
  // Out of descriptors (EMFILE, ENFILE) or kernel memory, the connection waits in the backlog and the
  // listener stays readable: polling it again at once would only spin. It is left alone this long.
  int accept_pause_ms = 100;
};

// What the server counted, for tarmac_agent_http_* metrics.
struct ServerStats {
  std::atomic<long long> requests{0};
  std::atomic<long long> rejected{0};  // 4xx and 5xx answers the server gave itself
  std::atomic<long long> accept_failures{0};  // accepts that failed for want of descriptors or memory
  std::atomic<long long> tls_failures{0};     // TLS handshakes that failed or timed out
  std::atomic<long long> auth_failures{0};    // requests refused with 401
};

class BasicAuth;
class TlsContext;

// Who may talk to the server, and how (web.config.file, docs/fleet.md): with `tls`, every connection
// is TLS; with `auth`, every request must carry a right password (401 otherwise, 429 while too many
// new passwords are being checked). Both unset: plain HTTP to anyone who reaches the port.
struct ServerSecurity {
  std::shared_ptr<const TlsContext> tls;
  std::shared_ptr<BasicAuth> auth;  // used by the server's thread alone
};

// Parses the head of one request ("GET /x?a=1 HTTP/1.1\r\nHost: ...\r\n\r\n"), for tests and the
// server. Fails with the status to answer (400, 405, 411, 413, 414, 505) as the Error's cause
// (refusal_status reads it).
struct ParsedHead {
  Request request;
  bool keep_alive = true;
  std::size_t body_bytes = 0;  // Content-Length, to skip
};
[[nodiscard]] Result<ParsedHead> parse_head(std::string_view head, const ServerLimits& limits);

// Why parse_head refused a head, in HTTP's terms: the cause of its Error.
struct Refusal {
  int status = 400;
};

// The status to answer a head parse_head refused; 400 for an error that carries no Refusal.
[[nodiscard]] int refusal_status(const Error& error);

// Whether a Host header names this machine's loopback: localhost, 127.0.0.1 or [::1], with an
// optional port. On a loopback listener every other Host is refused (421): a page in a browser on
// this machine whose name was rebound to 127.0.0.1 (DNS rebinding) sends its own name there.
[[nodiscard]] bool is_loopback_host(std::string_view host);

class HttpServer {
 public:
  HttpServer(Handler handler, ServerLimits limits = {}, ServerSecurity security = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0 picks a free one) and starts serving on a thread of its own.
  [[nodiscard]] Result<void> start(const std::string& host, unsigned port);
  // The two halves of start(), for a caller that decides from the address bound (loopback_only)
  // how to serve before the first connection is answered.
  [[nodiscard]] Result<void> bind(const std::string& host, unsigned port);
  [[nodiscard]] Result<void> serve();
  // The port bound (useful after port 0).
  [[nodiscard]] unsigned port() const { return port_; }
  // Whether the address bound is loopback (after start).
  [[nodiscard]] bool loopback_only() const { return loopback_only_; }
  const ServerStats& stats() const { return stats_; }
  void stop();

 private:
  struct Connection;
  using TimePoint = std::chrono::steady_clock::time_point;
  // The server's thread: poll, accept, read and write what is ready, close what is finished.
  void run();
  void accept_connections(std::list<Connection>& conns, TimePoint now);  // 503 beyond the limit
  void on_ready(Connection& c, short events, TimePoint now);  // reads and answers, writes what is pending
  // Applies the timeouts and the lingering close; true when the connection is to be closed now.
  [[nodiscard]] bool finished(Connection& c, TimePoint now);
  void serve_input(Connection& c);
  // Whether the request may be answered; otherwise its refusal is queued on `c`.
  [[nodiscard]] bool admitted(Connection& c, const Request& request, bool keep_alive);
  // The socket's bytes, through TLS when it is on: > 0 bytes, 0 at the end, -1 when there is
  // nothing now, -2 on an error.
  [[nodiscard]] long receive(Connection& c, char* buf, std::size_t n);
  [[nodiscard]] long transmit(Connection& c, const char* buf, std::size_t n);
  void handshake(Connection& c, std::chrono::steady_clock::time_point now);

  Handler handler_;
  ServerLimits limits_;
  ServerSecurity security_;
  ServerStats stats_;
  util::Fd listen_fd_;
  util::Fd wake_read_;
  util::Fd wake_write_;
  bool loopback_only_ = false;  // bound to a loopback address: Host must name it too
  unsigned port_ = 0;
  std::thread thread_;
  TimePoint accept_resumes_{};  // the listener is not polled before this (ServerLimits::accept_pause_ms)
};

}  // namespace tarmac::serve
