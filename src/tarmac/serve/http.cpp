#include "tarmac/serve/http.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <list>
#include <span>
#include <vector>

#include "tarmac/serve/auth.hpp"
#include "tarmac/serve/tls.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::serve {

namespace {

using Steady = std::chrono::steady_clock;

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 401: return "Unauthorized";
    case 421: return "Misdirected Request";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string serialize(const Response& r, bool head_only, bool keep_alive) {
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n"
      "X-Content-Type-Options: nosniff\r\nConnection: {}\r\n{}\r\n",
      r.status, reason(r.status), r.content_type, r.body.size(), keep_alive ? "keep-alive" : "close",
      r.extra_headers);
  if (!head_only) out += r.body;
  return out;
}

}  // namespace

Response text_response(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  if (r.body.empty() || r.body.back() != '\n') r.body += '\n';
  return r;
}

namespace {

// Whether the listener's own address is loopback (127.0.0.0/8, ::1, or 127/8 mapped into IPv6).
bool is_loopback_address(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&a)->sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

struct HttpServer::Connection {
  util::Fd fd;
  std::string peer;                 // the client's address, for BasicAuth's ration
  std::unique_ptr<TlsSession> tls;  // with TLS on: declared after fd, so it is freed before fd closes
  bool handshaking = false;         // TLS: the handshake is not complete (no request is read)
  bool wants_write = false;         // TLS: a read or the handshake waits for the socket to take output
  bool write_wants_read = false;    // TLS: a write waits for the peer's bytes
  std::string in;
  std::string out;
  std::size_t skip_body = 0;
  bool close_after = false;
  bool peer_gone = false;  // EOF or an error: close at once
  bool draining = false;   // answered and shut down for writing: reading what the client still sends
  Steady::time_point drain_until;
  Steady::time_point head_started;  // when the first byte of the pending head arrived
  Steady::time_point last_active;
  Steady::time_point last_written;  // when the client last took output, or had none pending
};

HttpServer::HttpServer(Handler handler, ServerLimits limits, ServerSecurity security)
    : handler_(std::move(handler)), limits_(limits), security_(std::move(security)) {}

HttpServer::~HttpServer() { stop(); }

Result<void> HttpServer::start(const std::string& host, unsigned port) {
  TARMAC_TRY(bind(host, port));
  return serve();
}

Result<void> HttpServer::bind(const std::string& host, unsigned port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return make_error(Error::Code::Invalid, fmt::format("cannot listen on {}:{}: {}", host, port, gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    util::Fd fd(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd) continue;
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && listen(fd.get(), 128) == 0) {
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
      port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      loopback_only_ = is_loopback_address(bound);
      listen_fd_ = std::move(fd);
      break;
    }
    why = std::strerror(errno);
  }
  freeaddrinfo(found);
  if (!listen_fd_) return make_error(Error::Code::Invalid, fmt::format("cannot listen on {}:{}: {}", host, port, why));
  return {};
}

Result<void> HttpServer::serve() {
  if (!listen_fd_ || thread_.joinable()) return make_error(Error::Code::Internal, "serve() without bind()");
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    listen_fd_.reset();
    return make_error(Error::Code::Invalid, fmt::format("cannot start the HTTP server: {}", std::strerror(errno)));
  }
  wake_read_.reset(wake[0]);
  wake_write_.reset(wake[1]);
  thread_ = std::thread([this] { run(); });
  return {};
}

void HttpServer::stop() {
  if (thread_.joinable()) {
    const char b = 'x';
    (void)!write(wake_write_.get(), &b, 1);
    thread_.join();
  }
  listen_fd_.reset();
  wake_read_.reset();
  wake_write_.reset();
}

void HttpServer::serve_input(Connection& c) {
  // Answers wait in c.out until the client reads them: past the limit the rest of its pipelined
  // requests stay unparsed (and the socket unread), and this is called again once it has drained.
  while (!c.close_after && c.out.size() < limits_.max_output_bytes) {
    if (c.skip_body > 0) {
      const std::size_t n = std::min(c.skip_body, c.in.size());
      c.in.erase(0, n);
      c.skip_body -= n;
      if (c.skip_body > 0) return;
    }
    if (c.in.empty()) return;
    auto end = c.in.find("\r\n\r\n");
    std::size_t head_len = end == std::string::npos ? 0 : end + 4;
    if (end == std::string::npos) {
      if (auto lf = c.in.find("\n\n"); lf != std::string::npos) head_len = lf + 2;
    }
    if (head_len == 0) {
      if (c.in.size() > limits_.max_head_bytes) {
        ++stats_.rejected;
        c.out += serialize(text_response(431, "request head too large"), false, false);
        c.close_after = true;
      }
      return;
    }
    if (head_len > limits_.max_head_bytes) {
      ++stats_.rejected;
      c.out += serialize(text_response(431, "request head too large"), false, false);
      c.close_after = true;
      return;
    }
    ++stats_.requests;
    auto parsed = parse_head(std::string_view(c.in).substr(0, head_len), limits_);
    c.in.erase(0, head_len);
    c.head_started = Steady::now();
    if (!parsed.ok()) {
      ++stats_.rejected;
      Response r = text_response(refusal_status(parsed.error()), parsed.error().message);
      if (r.status == 405) r.extra_headers = "Allow: GET, HEAD\r\n";
      c.out += serialize(r, false, false);
      c.close_after = true;
      return;
    }
    c.skip_body = parsed->body_bytes;
    if (!admitted(c, parsed->request, parsed->keep_alive)) {
      if (c.close_after) return;
      continue;
    }
    Response response;
    try {
      response = handler_(parsed->request);
    } catch (const std::exception& e) {
      response = text_response(500, fmt::format("internal error: {}", e.what()));
    }
    c.out += serialize(response, parsed->request.method == "HEAD", parsed->keep_alive);
    if (!parsed->keep_alive) c.close_after = true;
  }
}

bool HttpServer::admitted(Connection& c, const Request& request, bool keep_alive) {
  if (loopback_only_ && !request.host.empty() && !is_loopback_host(request.host)) {
    ++stats_.rejected;
    c.out += serialize(text_response(421, "this agent listens on loopback and answers only Host: localhost, "
                                          "127.0.0.1 or [::1] (docs/metrics.md)"),
                       false, false);
    c.close_after = true;
    return false;
  }
  if (!security_.auth) return true;
  switch (security_.auth->check(request.authorization, c.peer, Steady::now())) {
    case BasicAuth::Verdict::Allowed: return true;
    case BasicAuth::Verdict::Denied: {
      ++stats_.rejected;
      ++stats_.auth_failures;
      Response r = text_response(401, "a user name and password are needed (basic_auth_users in the agent's "
                                      "http.web_config_file)");
      r.extra_headers = "WWW-Authenticate: Basic realm=\"tarmac\", charset=\"UTF-8\"\r\n";
      c.out += serialize(r, request.method == "HEAD", keep_alive);
      if (!keep_alive) c.close_after = true;
      return false;
    }
    case BasicAuth::Verdict::Busy: {
      ++stats_.rejected;
      Response r = text_response(429, "too many new passwords to check this second; try again");
      r.extra_headers = "Retry-After: 1\r\n";
      c.out += serialize(r, request.method == "HEAD", false);
      c.close_after = true;
      return false;
    }
  }
  return false;
}

long HttpServer::receive(Connection& c, char* buf, std::size_t n) {
  if (!c.tls || c.draining) {
    const ssize_t got = recv(c.fd.get(), buf, n, 0);
    if (got >= 0) return got;
    return errno == EAGAIN || errno == EINTR ? -1 : -2;
  }
  std::size_t got = 0;
  c.wants_write = false;
  switch (c.tls->read(buf, n, got)) {
    case TlsSession::Io::Ok: return static_cast<long>(got);
    case TlsSession::Io::WantRead: return -1;
    case TlsSession::Io::WantWrite: c.wants_write = true; return -1;
    case TlsSession::Io::Closed: return 0;
    case TlsSession::Io::Failed: return -2;
  }
  return -2;
}

long HttpServer::transmit(Connection& c, const char* buf, std::size_t n) {
  if (!c.tls) {
    const ssize_t sent = send(c.fd.get(), buf, n, MSG_NOSIGNAL);
    if (sent >= 0) return sent;
    return errno == EAGAIN || errno == EINTR ? -1 : -2;
  }
  std::size_t sent = 0;
  c.write_wants_read = false;
  switch (c.tls->write(buf, n, sent)) {
    case TlsSession::Io::Ok: return static_cast<long>(sent);
    case TlsSession::Io::WantWrite: return -1;
    case TlsSession::Io::WantRead: c.write_wants_read = true; return -1;
    case TlsSession::Io::Closed:
    case TlsSession::Io::Failed: return -2;
  }
  return -2;
}

void HttpServer::handshake(Connection& c, Steady::time_point now) {
  c.wants_write = false;
  switch (c.tls->handshake()) {
    case TlsSession::Io::Ok:
      c.handshaking = false;
      c.head_started = c.last_active = now;
      return;
    case TlsSession::Io::WantRead: return;
    case TlsSession::Io::WantWrite: c.wants_write = true; return;
    case TlsSession::Io::Closed:
    case TlsSession::Io::Failed:
      ++stats_.tls_failures;
      c.close_after = c.peer_gone = true;
      return;
  }
}

namespace {

// What a connection waits for: the handshake's next step, its answers leaving, or a request.
short poll_events(bool handshaking, bool wants_write, bool write_wants_read, bool has_output, bool draining) {
  if (draining) return POLLIN;
  if (handshaking) return wants_write ? POLLOUT : POLLIN;
  // A connection with answers pending is not read: what it sends waits in the kernel.
  if (has_output) return write_wants_read ? POLLIN : POLLOUT;
  return wants_write ? POLLOUT : POLLIN;
}

}  // namespace

void HttpServer::run() {
  // OpenSSL writes with write(2), not send(MSG_NOSIGNAL): a peer gone mid-answer must give EPIPE
  // here, not kill the agent. Blocked in this thread alone; no child is started from it.
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);
  std::list<Connection> conns;
  std::vector<pollfd> fds;
  std::vector<Connection*> by_index;
  for (;;) {
    fds.clear();
    by_index.clear();
    const auto before = Steady::now();
    const bool accepting = before >= accept_resumes_;
    fds.push_back({wake_read_.get(), POLLIN, 0});
    fds.push_back({listen_fd_.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
    for (auto& c : conns) {
      fds.push_back({c.fd.get(), poll_events(c.handshaking, c.wants_write, c.write_wants_read, !c.out.empty(),
                                             c.draining),
                     0});
      by_index.push_back(&c);
    }
    const auto paused_ms = std::chrono::ceil<std::chrono::milliseconds>(accept_resumes_ - before).count();
    const int n = poll(fds.data(), fds.size(), accepting ? 1000 : static_cast<int>(std::min<long long>(paused_ms, 1000)));
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;
    const auto now = Steady::now();
    if (fds[1].revents & POLLIN) accept_connections(conns, now);
    for (std::size_t i = 0; i < by_index.size(); ++i) on_ready(*by_index[i], fds[i + 2].revents, now);
    for (auto it = conns.begin(); it != conns.end();) {
      it = finished(*it, now) ? conns.erase(it) : std::next(it);
    }
  }
}

void HttpServer::accept_connections(std::list<Connection>& conns, Steady::time_point now) {
  for (;;) {
    sockaddr_storage from{};
    socklen_t from_len = sizeof from;
    util::Fd fd(accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        ++stats_.accept_failures;
        accept_resumes_ = now + std::chrono::milliseconds(limits_.accept_pause_ms);
      }
      break;
    }
    if (conns.size() >= limits_.max_connections) {
      ++stats_.rejected;
      if (security_.tls) continue;  // no handshake is spent on a connection that cannot be served
      const std::string busy = serialize(text_response(503, "too many connections"), false, false);
      (void)!send(fd.get(), busy.data(), busy.size(), MSG_NOSIGNAL);
      continue;
    }
    const int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Connection c;
    if (security_.tls) {
      c.tls = security_.tls->accept(fd.get());
      if (!c.tls) {
        ++stats_.tls_failures;
        continue;
      }
      c.handshaking = true;
    }
    c.fd = std::move(fd);
    char host[NI_MAXHOST] = "";
    if (getnameinfo(reinterpret_cast<sockaddr*>(&from), from_len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0) {
      c.peer = host;
    }
    c.head_started = c.last_active = c.last_written = now;
    conns.push_back(std::move(c));
  }
}

void HttpServer::on_ready(Connection& c, short events, Steady::time_point now) {
  const auto gone = [&c] {
    c.close_after = c.peer_gone = true;
    c.out.clear();
  };
  if (events & (POLLERR | POLLNVAL)) {
    gone();
    return;
  }
  if (c.handshaking && !c.draining) {
    if ((events & (POLLIN | POLLOUT | POLLHUP)) == 0) return;
    handshake(c, now);
    if (c.handshaking || c.peer_gone) return;
    events |= POLLIN;  // the request may have come with the handshake's last bytes
  }
  const bool readable = (events & (POLLIN | POLLHUP)) != 0 || (c.wants_write && (events & POLLOUT) != 0);
  if (readable && (c.out.empty() || c.draining)) {
    char buf[16384];
    // TLS may hold decrypted bytes the socket no longer shows: read them before polling again.
    for (bool more = true; more;) {
      const long got = receive(c, buf, sizeof buf);
      if (got <= 0) {
        if (got == 0 || got == -2) gone();
        return;
      }
      if (c.draining) return;  // the rest of a refused request: read and dropped
      if (c.in.empty() && c.skip_body == 0) c.head_started = now;
      c.in.append(buf, static_cast<std::size_t>(got));
      c.last_active = now;
      serve_input(c);
      more = c.tls && c.tls->pending() > 0 && c.out.empty() && !c.close_after;
    }
  }
  if (!c.out.empty()) {
    const long sent = transmit(c, c.out.data(), c.out.size());
    if (sent > 0) {
      c.out.erase(0, static_cast<std::size_t>(sent));
      c.last_active = c.last_written = now;
      if (c.out.size() < limits_.max_output_bytes && !c.draining) serve_input(c);  // requests held back
    } else if (sent == -2) {
      gone();
    }
  }
}

bool HttpServer::finished(Connection& c, Steady::time_point now) {
  const auto since = [&](Steady::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count();
  };
  if (c.handshaking && !c.peer_gone) {
    // A handshake that does not finish holds a connection slot for nothing.
    if (since(c.head_started) <= limits_.head_timeout_ms) return false;
    ++stats_.tls_failures;
    return true;
  }
  if (c.out.empty() && !c.close_after && !c.in.empty() && since(c.head_started) > limits_.head_timeout_ms) {
    ++stats_.rejected;
    const std::string late = serialize(text_response(408, "the request head took too long"), false, false);
    if (c.tls) {
      c.out = late;  // sent through the session like any answer
    } else {
      (void)!send(c.fd.get(), late.data(), late.size(), MSG_NOSIGNAL);
    }
    c.close_after = true;
  }
  const bool idle = c.out.empty() && c.in.empty() && since(c.last_active) > limits_.idle_timeout_ms;
  if (c.out.empty()) c.last_written = now;
  // Answers nobody takes: a client that stopped reading is dropped, and its memory with it.
  const bool stuck = !c.out.empty() && since(c.last_written) > limits_.write_timeout_ms;
  if (c.close_after && c.out.empty() && !c.peer_gone && !c.draining) {
    // A lingering close: closing with unread input would reset the connection and could
    // destroy the answer before the client reads it. Stop writing, drain for a moment.
    if (c.tls) c.tls->close_notify();
    shutdown(c.fd.get(), SHUT_WR);
    c.draining = true;
    c.drain_until = now + std::chrono::seconds(2);
  }
  return (c.close_after && c.out.empty() && (c.peer_gone || now >= c.drain_until)) || idle || stuck;
}

}  // namespace tarmac::serve
