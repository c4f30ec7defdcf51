// A one-thread HTTP server on 127.0.0.1:0 for the HTTP client's and the webhook's tests: answers
// each request with a fixed status (or a whole raw answer) and keeps the requests it got.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tarmac::testing {

// A listening TCP socket on 127.0.0.1 and `port`, or a port the kernel chose when it is 0 (set in
// `port`).
inline int listen_on_loopback(int backlog, unsigned& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::listen(fd, backlog);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return fd;
}

class HttpServer {
 public:
  // status: the answer's status line after "HTTP/1.1 "; silent: accept and never answer.
  explicit HttpServer(std::string status = "200 OK", bool silent = false)
      : HttpServer(silent, "HTTP/1.1 " + status + "\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok") {}
  // Answers every request with `answer` as it is (status line, headers and body).
  static std::unique_ptr<HttpServer> answering(std::string answer) {
    return std::unique_ptr<HttpServer>(new HttpServer(false, std::move(answer)));
  }
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  [[nodiscard]] unsigned port() const { return port_; }
  [[nodiscard]] std::string url(const std::string& path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  [[nodiscard]] std::vector<std::string> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  HttpServer(bool silent, std::string answer) : answer_(std::move(answer)), silent_(silent) {
    fd_ = listen_on_loopback(8, port_);
    thread_ = std::thread([this] { serve(); });
  }

  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string got;
      char buf[4096];
      for (;;) {
        const auto head_end = got.find("\r\n\r\n");
        if (head_end != std::string::npos) {
          const auto cl = got.find("Content-Length: ");
          const std::size_t length = cl == std::string::npos ? 0 : std::stoul(got.substr(cl + 16));
          if (got.size() >= head_end + 4 + length) break;
        }
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 2000) <= 0) break;
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, static_cast<std::size_t>(n));
      }
      {
        std::lock_guard lock(mutex_);
        requests_.push_back(got);
      }
      if (silent_) {
        while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      } else {
        (void)::send(c, answer_.data(), answer_.size(), MSG_NOSIGNAL);
      }
      ::close(c);
    }
  }

  std::string answer_;
  bool silent_;
  int fd_ = -1;
  unsigned port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::vector<std::string> requests_;
  std::thread thread_;
};

inline std::string body_of(const std::string& request);

// A fake OpenAI-compatible LLM server for the dispatcher's tests: each connection on a thread of its
// own (so requests in flight at once can be counted), each request answered by `handler` from its
// number (0, 1, ... in arrival order) and its text. A reply can hang: the connection is then held
// until the client closes it, which the server sees and counts (a closed connection is how
// llama-server and Ollama learn that a generation is cancelled).
class FakeLlm {
 public:
  struct Reply {
    std::string status = "200 OK";
    std::string body;
    bool hang = false;  // answer nothing; wait for the client to close the connection
    bool hold = false;  // answer `body`, then hold the connection as if more were to come, until the client closes it
  };
  using Handler = std::function<Reply(int number, const std::string& request)>;

  // On `port` (0: one the kernel chooses). `keep_alive`: a connection answers request after request
  // (as llama-server, Ollama and vLLM do) until the client closes it; else one request and closed.
  explicit FakeLlm(Handler handler, unsigned port = 0, bool keep_alive = false)
      : handler_(std::move(handler)), port_(port), keep_alive_(keep_alive) {
    fd_ = listen_on_loopback(128, port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  FakeLlm(const FakeLlm&) = delete;
  FakeLlm& operator=(const FakeLlm&) = delete;
  ~FakeLlm() {
    stop_ = true;
    acceptor_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      threads.swap(connections_);
    }
    for (auto& t : threads) t.join();
    ::close(fd_);
  }

  [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  [[nodiscard]] int requests() const { return requests_; }
  [[nodiscard]] int connections() const { return connections_made_; }
  [[nodiscard]] int connections_ended() const { return connections_ended_; }  // by either end
  [[nodiscard]] int max_in_flight() const { return max_in_flight_; }
  [[nodiscard]] int in_flight() const { return in_flight_; }
  [[nodiscard]] int hanging() const { return hanging_; }
  [[nodiscard]] int closed_by_client() const { return closed_by_client_; }
  [[nodiscard]] std::vector<std::string> bodies() const {
    std::lock_guard lock(mutex_);
    return bodies_;
  }
  // Waits (polling every 5 ms, up to `limit_ms`) until `done()`; returns its last value.
  template <typename F>
  static bool wait_for(F done, int limit_ms = 10000) {
    for (int waited = 0; waited < limit_ms; waited += 5) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return done();
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++connections_made_;
      std::lock_guard lock(mutex_);
      connections_.emplace_back([this, c] { serve(c); });
    }
  }

  // The whole request: headers, then Content-Length bytes of body; empty when the client went away.
  std::string read_request(int c) {
    std::string got;
    char buf[8192];
    for (;;) {
      const auto head_end = got.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const auto cl = got.find("Content-Length: ");
        const std::size_t length = cl == std::string::npos ? 0 : std::stoul(got.substr(cl + 16));
        if (got.size() >= head_end + 4 + length) return got;
      }
      pollfd q{c, POLLIN, 0};
      if (::poll(&q, 1, 100) <= 0) {
        if (stop_) return "";
        continue;
      }
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return "";
      got.append(buf, static_cast<std::size_t>(n));
    }
  }

  void serve(int c) {
    while (serve_one(c) && keep_alive_) {
    }
    ::close(c);
    ++connections_ended_;
  }

  // One request on `c`; false when the connection is done with (closed by the client, or held).
  bool serve_one(int c) {
    const std::string request = read_request(c);
    if (request.empty()) return false;
    const int number = requests_++;
    {
      std::lock_guard lock(mutex_);
      bodies_.push_back(body_of(request));
    }
    const int now = ++in_flight_;
    for (int seen = max_in_flight_; now > seen && !max_in_flight_.compare_exchange_weak(seen, now);) {
    }
    const Reply reply = handler_(number, request);
    if (reply.hold) {
      // One byte more announced than sent: the client waits for it, as for a chunked body whose
      // last chunk never comes.
      const std::string answer = "HTTP/1.1 " + reply.status + "\r\nContent-Type: text/event-stream\r\nContent-Length: " +
                                 std::to_string(reply.body.size() + 1) + "\r\n\r\n" + reply.body;
      (void)::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
    }
    if (reply.hang || reply.hold) {
      ++hanging_;
      // Held until the client closes (recv answers 0) or the server stops.
      for (;;) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 20) > 0) {
          char b[256];
          if (::recv(c, b, sizeof b, 0) <= 0) {
            ++closed_by_client_;
            break;
          }
        }
        if (stop_) break;
      }
      --hanging_;
      --in_flight_;
      return false;
    }
    --in_flight_;  // before the answer goes: the client may send its next request at once
    const std::string answer = "HTTP/1.1 " + reply.status + "\r\nContent-Type: application/json\r\nContent-Length: " +
                               std::to_string(reply.body.size()) + "\r\nConnection: " +
                               (keep_alive_ ? "keep-alive" : "close") + "\r\n\r\n" + reply.body;
    return ::send(c, answer.data(), answer.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(answer.size());
  }

  Handler handler_;
  int fd_ = -1;
  unsigned port_ = 0;
  bool keep_alive_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0}, in_flight_{0}, max_in_flight_{0}, hanging_{0}, closed_by_client_{0},
      connections_made_{0}, connections_ended_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> bodies_;
  std::vector<std::thread> connections_;
  std::thread acceptor_;
};

// The body of an HTTP request.
inline std::string body_of(const std::string& request) {
  const auto at = request.find("\r\n\r\n");
  return at == std::string::npos ? "" : request.substr(at + 4);
}

}  // namespace tarmac::testing
