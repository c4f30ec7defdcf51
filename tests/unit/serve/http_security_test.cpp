// The HTTP server against hostile clients: pipelined requests nobody reads (memory), and pages
// that reach a loopback listener through DNS rebinding (Host). docs/security.md.
#include "tarmac/serve/http.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <string>

#include "count.hpp"
#include "tarmac/util/fd.hpp"

namespace tarmac::serve {
namespace {

using Steady = std::chrono::steady_clock;

util::Fd connect_to(unsigned port, int receive_buffer = 0) {
  util::Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  // A small receive window, set before connecting, so that the server's unread answers pile up
  // in its own buffer rather than in the kernel's.
  if (receive_buffer > 0) setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

void send_all(int fd, const std::string& text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    sent += static_cast<std::size_t>(n);
  }
}

// Reads until the server closes the connection.
std::string read_to_end(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string pipelined(int n, const std::string& path) {
  std::string out;
  for (int i = 0; i < n; ++i) out += "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  return out;
}

TEST(LoopbackHost, AcceptsOnlyTheNamesOfLoopback) {
  for (const char* ok : {"localhost", "LocalHost", "localhost:9478", "127.0.0.1", "127.0.0.1:9478", "[::1]",
                         "[::1]:9478", "localhost:1"}) {
    EXPECT_TRUE(is_loopback_host(ok)) << ok;
  }
  for (const char* bad : {"evil.example", "evil.example:9478", "localhost.evil.example", "127.0.0.1.nip.io",
                          "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:99999", "localhost:9478:1", "[::1", "::1",
                          "[::2]", "0.0.0.0", "10.0.0.1", "localhost@evil", ""}) {
    EXPECT_FALSE(is_loopback_host(bad)) << bad;
  }
}

TEST(ParseHeadHost, KeepsTheHostAndRefusesTwo) {
  auto r = parse_head("GET / HTTP/1.1\r\nHost: localhost:9478\r\n\r\n", {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->request.host, "localhost:9478");
  auto two = parse_head("GET / HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n", {});
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(refusal_status(two.error()), 400);
}

class HostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<HttpServer>([](const Request&) { return text_response(200, "secret"); });
    ASSERT_TRUE(server_->start("127.0.0.1", 0).ok());
  }
  std::string ask(const std::string& host_line) {
    util::Fd fd = connect_to(server_->port());
    send_all(fd.get(), "GET /api/v1/processes HTTP/1.1\r\n" + host_line + "Connection: close\r\n\r\n");
    return read_to_end(fd.get());
  }
  std::unique_ptr<HttpServer> server_;
};

// A page from evil.example whose name was rebound to 127.0.0.1 sends Host: evil.example.
TEST_F(HostTest, RefusesAForeignHostOnALoopbackListener) {
  const std::string port = std::to_string(server_->port());
  const std::string refused = ask("Host: evil.example:" + port + "\r\n");
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 421 ")) << refused;
  EXPECT_EQ(refused.find("secret"), std::string::npos);
  EXPECT_TRUE(ask("Host: 127.0.0.1:" + port + "\r\n").starts_with("HTTP/1.1 200 "));
  EXPECT_TRUE(ask("Host: localhost:" + port + "\r\n").starts_with("HTTP/1.1 200 "));
  EXPECT_TRUE(ask("").starts_with("HTTP/1.1 200 "));  // no Host (HTTP/1.0 clients): not a browser
}

// A listener on every address is reached by name on purpose (Prometheus on another machine):
// there, Host says nothing about who asks, and the firewall decides (docs/metrics.md).
TEST(HostOnWildcard, IsNotChecked) {
  HttpServer server([](const Request&) { return text_response(200, "ok"); });
  ASSERT_TRUE(server.start("0.0.0.0", 0).ok());
  util::Fd fd = connect_to(server.port());
  send_all(fd.get(), "GET / HTTP/1.1\r\nHost: node7.cluster:9478\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(read_to_end(fd.get()).starts_with("HTTP/1.1 200 "));
}

constexpr std::size_t kBody = 256 * 1024;

class AbuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerLimits limits;
    limits.write_timeout_ms = 500;
    server_ = std::make_unique<HttpServer>(
        [this](const Request& r) {
          ++answered_;
          return text_response(200, r.path + "\n" + std::string(kBody, 'x'));
        },
        limits);
    ASSERT_TRUE(server_->start("127.0.0.1", 0).ok());
  }
  std::atomic<int> answered_{0};
  std::unique_ptr<HttpServer> server_;
};

// 2,000 pipelined requests for a 256 KiB answer, never read: before, the server answered every
// request it read (some 360 per 16 KiB read: 90 MB) into one buffer and kept it forever. Now it
// answers a few (what the kernel's socket buffers take, plus one past the limit), stops reading,
// and closes the connection once the client has taken nothing for the write timeout.
TEST_F(AbuseTest, AClientThatNeverReadsGetsFewAnswersAndIsClosed) {
  util::Fd fd = connect_to(server_->port(), 4096);
  send_all(fd.get(), pipelined(2000, "/x"));
  // The event: the server closes (a reset, since its socket still holds unread requests).
  pollfd p{fd.get(), POLLIN | POLLRDHUP, 0};
  const auto give_up = Steady::now() + std::chrono::seconds(30);  // only against a hang
  bool closed = false;
  while (!closed && Steady::now() < give_up) {
    ASSERT_GE(poll(&p, 1, 1000), 0);
    closed = (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) != 0;
  }
  EXPECT_TRUE(closed) << "the connection of a client that reads nothing was never closed";
  // What fits the output limit, plus the answer that crossed it, plus what the kernel took.
  EXPECT_LE(answered_.load(), 40) << "answers were made for a client that read none of them";
}

// The held-back requests are not lost: a client that reads slowly gets every answer, in order.
TEST_F(AbuseTest, HeldBackRequestsAreAnsweredInOrderOnceTheClientReads) {
  util::Fd fd = connect_to(server_->port());
  std::string requests;
  for (int i = 0; i < 50; ++i) requests += "GET /r" + std::to_string(i) + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  requests += "GET /last HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  send_all(fd.get(), requests);
  const std::string answers = read_to_end(fd.get());
  EXPECT_EQ(count(answers, "HTTP/1.1 200 OK"), 51);
  std::size_t at = 0;
  for (int i = 0; i < 50; ++i) {
    at = answers.find("\r\n\r\n/r" + std::to_string(i) + "\n", at);
    ASSERT_NE(at, std::string::npos) << "answer " << i << " missing or out of order";
  }
  EXPECT_NE(answers.find("\r\n\r\n/last\n", at), std::string::npos);
  EXPECT_EQ(answered_.load(), 51);
}

}  // namespace
}  // namespace tarmac::serve
