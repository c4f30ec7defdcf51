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
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tarmac::testing {

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
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 8);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
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

// The body of an HTTP request.
inline std::string body_of(const std::string& request) {
  const auto at = request.find("\r\n\r\n");
  return at == std::string::npos ? "" : request.substr(at + 4);
}

}  // namespace tarmac::testing
