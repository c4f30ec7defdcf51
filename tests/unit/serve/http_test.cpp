#include "tarmac/serve/http.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "count.hpp"

namespace tarmac::serve {
namespace {

int status_of(std::string_view head) {
  auto r = parse_head(head, ServerLimits{});
  return r.ok() ? 200 : refusal_status(r.error());
}

TEST(ParseHead, ReadsPathQueryAndKeepAlive) {
  auto r = parse_head("GET /api/v1/history?gpu=0%2C1&since=1h&step= HTTP/1.1\r\nHost: x\r\n\r\n", {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->request.method, "GET");
  EXPECT_EQ(r->request.path, "/api/v1/history");
  EXPECT_EQ(r->request.query.at("gpu"), "0,1");
  EXPECT_EQ(r->request.query.at("since"), "1h");
  EXPECT_EQ(r->request.query.at("step"), "");
  EXPECT_TRUE(r->keep_alive);
}

TEST(ParseHead, ConnectionHeadersAndVersions) {
  EXPECT_FALSE(parse_head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", {})->keep_alive);
  EXPECT_FALSE(parse_head("GET / HTTP/1.0\r\n\r\n", {})->keep_alive);
  EXPECT_TRUE(parse_head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", {})->keep_alive);
  EXPECT_EQ(parse_head("HEAD /metrics HTTP/1.1\n\n", {})->request.method, "HEAD");  // bare LF
}

TEST(ParseHead, RefusesWhatItCannotServe) {
  EXPECT_EQ(status_of("POST /metrics HTTP/1.1\r\n\r\n"), 405);
  EXPECT_EQ(status_of("DELETE / HTTP/1.1\r\n\r\n"), 405);
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / FTP/1.0\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET /\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET  / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET metrics HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("G{T / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nno colon here\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n"), 413);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), 411);
  EXPECT_EQ(status_of("GET /%zz HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET /a%00b HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET /?a=%4 HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET /" + std::string(5000, 'a') + " HTTP/1.1\r\n\r\n"), 414);
  EXPECT_EQ(status_of(""), 400);
}

// A client on a real socket.
class Client {
 public:
  explicit Client(unsigned port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() { close(fd_); }
  bool connected() const { return connected_; }
  void send_text(const std::string& s) const { (void)!::send(fd_, s.data(), s.size(), MSG_NOSIGNAL); }
  // Everything until the server closes (or 5 s pass).
  std::string read_all() const {
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
  }
  // Reads until `count` responses' bodies ("\r\n\r\n" + Content-Length) are in.
  std::string read_responses(int count) const {
    std::string out;
    char buf[4096];
    int complete = 0;
    std::size_t scan = 0;
    while (complete < count) {
      const auto head_end = out.find("\r\n\r\n", scan);
      if (head_end != std::string::npos) {
        const auto cl = out.find("Content-Length: ", scan);
        const std::size_t len = std::stoul(out.substr(cl + 16));
        if (out.size() >= head_end + 4 + len) {
          scan = head_end + 4 + len;
          ++complete;
          continue;
        }
      }
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerLimits limits;
    limits.head_timeout_ms = 300;
    limits.max_connections = 4;
    server_ = std::make_unique<HttpServer>(
        [](const Request& r) {
          if (r.path == "/boom") throw std::runtime_error("kaput");
          if (r.path != "/hello") return text_response(404, "no");
          return text_response(200, "hello " + (r.query.count("name") ? r.query.at("name") : std::string("you")));
        },
        limits);
    ASSERT_TRUE(server_->start("127.0.0.1", 0).ok());
  }
  std::unique_ptr<HttpServer> server_;
};

TEST_F(ServerTest, AnswersAndKeepsTheConnectionForPipelinedRequests) {
  Client c(server_->port());
  ASSERT_TRUE(c.connected());
  c.send_text("GET /hello?name=a+b HTTP/1.1\r\nHost: localhost\r\n\r\nGET /nope HTTP/1.1\r\n\r\n");
  const auto first = c.read_responses(2);  // the connection stays open after them
  EXPECT_NE(first.find("hello a b\n"), std::string::npos) << first;
  EXPECT_NE(first.find("HTTP/1.1 404 Not Found"), std::string::npos) << first;
  c.send_text("HEAD /hello HTTP/1.1\r\n\r\nGET /hello HTTP/1.1\r\nConnection: close\r\n\r\n");
  const auto rest = c.read_all();  // both answers, then the server closes
  EXPECT_EQ(count(rest, "HTTP/1.1 200 OK"), 2) << rest;
  EXPECT_EQ(count(rest, "hello you"), 1) << rest;  // HEAD sends no body
  EXPECT_NE(rest.find("Connection: close"), std::string::npos);
}

TEST_F(ServerTest, MalformedOversizedAndSlowRequestsGet4xxAndTheServerGoesOn) {
  {
    Client c(server_->port());
    c.send_text("BLAH\r\n\r\n");
    EXPECT_NE(c.read_all().find("HTTP/1.1 400"), std::string::npos);
  }
  {
    Client c(server_->port());
    c.send_text("GET / HTTP/1.1\r\nX: " + std::string(20000, 'x'));
    EXPECT_NE(c.read_all().find("HTTP/1.1 431"), std::string::npos);
  }
  {
    Client c(server_->port());
    c.send_text("POST /hello HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
    const auto out = c.read_all();
    EXPECT_NE(out.find("HTTP/1.1 405"), std::string::npos);
    EXPECT_NE(out.find("Allow: GET, HEAD"), std::string::npos);
  }
  {
    Client c(server_->port());
    c.send_text("GET /hello HTTP/1.1\r\n");  // and nothing more: 408 after the head timeout
    EXPECT_NE(c.read_all().find("HTTP/1.1 408"), std::string::npos);
  }
  {
    Client c(server_->port());
    c.send_text("GET /boom HTTP/1.1\r\nConnection: close\r\n\r\n");
    EXPECT_NE(c.read_all().find("HTTP/1.1 500"), std::string::npos);
  }
  {
    // A body on a GET is skipped, and the next request on the connection is served.
    Client c(server_->port());
    c.send_text("GET /hello HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /hello?name=z HTTP/1.1\r\nConnection: close\r\n\r\n");
    const auto out = c.read_all();
    EXPECT_EQ(count(out, "HTTP/1.1 200 OK"), 2) << out;
    EXPECT_NE(out.find("hello z"), std::string::npos) << out;
  }
  EXPECT_GE(server_->stats().rejected.load(), 4);
  Client ok(server_->port());
  ok.send_text("GET /hello HTTP/1.0\r\n\r\n");
  EXPECT_NE(ok.read_all().find("hello you"), std::string::npos);
}

TEST_F(ServerTest, TooManyConnectionsGet503) {
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<Client>(server_->port()));
    // An answered keep-alive request: the server has accepted the connection and holds it open,
    // idle (the idle timeout is a minute; a partial head would meet the 300 ms head timeout).
    held.back()->send_text("GET /hello HTTP/1.1\r\n\r\n");
    ASSERT_NE(held.back()->read_responses(1).find("HTTP/1.1 200 OK"), std::string::npos);
  }
  Client extra(server_->port());
  EXPECT_NE(extra.read_all().find("HTTP/1.1 503"), std::string::npos);
  // The held connections were kept: each is still served.
  held.front()->send_text("GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_NE(held.front()->read_all().find("hello you"), std::string::npos);
}

// Takes every descriptor this process may still open (and gives them back): a state an agent
// reaches when a local user holds hundreds of connections open.
class NoDescriptorsLeft {
 public:
  NoDescriptorsLeft() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit lower = saved_;
    lower.rlim_cur = std::min<rlim_t>(saved_.rlim_cur, 256);
    setrlimit(RLIMIT_NOFILE, &lower);
    for (int fd = dup(0); fd >= 0; fd = dup(0)) taken_.push_back(fd);
  }
  ~NoDescriptorsLeft() { give_back(); }
  void give_back() {
    for (const int fd : taken_) close(fd);
    taken_.clear();
    setrlimit(RLIMIT_NOFILE, &saved_);
  }

 private:
  rlimit saved_{};
  std::vector<int> taken_;
};

// A socket made before the descriptors ran out, connected after: it waits in the listener's backlog.
int waiting_connection() { return socket(AF_INET, SOCK_STREAM, 0); }

bool connect_to(int fd, unsigned port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

// Waits (up to a bound that only catches a hang) for `done`.
bool eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return done();
}

TEST(HttpServer, OutOfDescriptorsItPausesAcceptingInsteadOfSpinning) {
  ServerLimits limits;
  limits.accept_pause_ms = 600'000;  // once paused, it stays paused for the whole test
  HttpServer server([](const Request&) { return text_response(200, "up"); }, limits);
  ASSERT_TRUE(server.start("127.0.0.1", 0).ok());
  Client served(server.port());  // accepted and answered before the descriptors run out
  served.send_text("GET / HTTP/1.1\r\n\r\n");
  ASSERT_NE(served.read_responses(1).find("200 OK"), std::string::npos);
  const int waiting = waiting_connection();
  {
    NoDescriptorsLeft none;
    ASSERT_TRUE(connect_to(waiting, server.port()));
    ASSERT_TRUE(eventually([&] { return server.stats().accept_failures.load() >= 1; }));
    // The server goes on serving the connection it has; the loop turns at least twice for it
    // (the request, the answer), and a listener polled again would have failed at every turn.
    served.send_text("GET / HTTP/1.1\r\n\r\n");
    EXPECT_NE(served.read_responses(1).find("200 OK"), std::string::npos);
    EXPECT_EQ(server.stats().accept_failures.load(), 1) << "the server retried accept while it could not";
  }
  close(waiting);
}

TEST(HttpServer, AcceptingResumesAfterThePause) {
  ServerLimits limits;
  limits.accept_pause_ms = 20;
  HttpServer server([](const Request&) { return text_response(200, "up"); }, limits);
  ASSERT_TRUE(server.start("127.0.0.1", 0).ok());
  const int waiting = waiting_connection();
  NoDescriptorsLeft none;
  ASSERT_TRUE(connect_to(waiting, server.port()));
  ASSERT_TRUE(eventually([&] { return server.stats().accept_failures.load() >= 1; }));
  none.give_back();
  const std::string request = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(send(waiting, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  timeval tv{10, 0};
  setsockopt(waiting, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256] = {};
  ASSERT_GT(recv(waiting, buf, sizeof buf - 1, 0), 0);
  EXPECT_NE(std::string(buf).find("200 OK"), std::string::npos);
  close(waiting);
}

TEST(HttpServer, ABusyPortIsAClearError) {
  HttpServer a([](const Request&) { return text_response(200, "a"); });
  ASSERT_TRUE(a.start("127.0.0.1", 0).ok());
  HttpServer b([](const Request&) { return text_response(200, "b"); });
  auto r = b.start("127.0.0.1", a.port());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("cannot listen on 127.0.0.1:"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("in use"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace tarmac::serve
