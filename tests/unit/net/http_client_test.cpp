#include "tarmac/net/http_client.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "http_server.hpp"
#include "tarmac/util/clock.hpp"

namespace tarmac::net {
namespace {

using tarmac::testing::HttpServer;

std::string answer(const std::string& body, const std::string& status = "200 OK") {
  return "HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

TEST(CheckUrl, HttpAndHttpsOnlyWithAHostAndNoCredentials) {
  EXPECT_TRUE(check_url("http://127.0.0.1:8080/v1/chat/completions").ok());
  EXPECT_TRUE(check_url("https://hooks.slack.com/services/T/B/X").ok());
  EXPECT_TRUE(check_url("http://[::1]:11434").ok());
  const auto credentials = check_url("https://user:pass@example.com/");
  ASSERT_FALSE(credentials.ok());
  EXPECT_NE(credentials.error().message.find("credentials"), std::string::npos) << credentials.error().message;
  for (const char* bad : {"", "file:///etc/passwd", "gopher://h/", "dict://h/", "ftp://h/", "http://", "https:///x",
                          "http://h/a b", "http://h/\r\nHost: evil", "http://h/\x7f", "HTTP//h"}) {
    EXPECT_FALSE(check_url(bad).ok()) << bad;
  }
}

TEST(CheckUrl, LoopbackUrlsAreTheOnesThisMachineCanName) {
  for (const char* url : {"http://127.0.0.1:8080", "http://127.1.2.3/x", "http://[::1]:11434/", "http://localhost:1",
                          "https://localhost"}) {
    EXPECT_TRUE(is_loopback_url(url)) << url;
  }
  for (const char* url : {"http://10.0.0.1:8080", "http://128.0.0.1", "http://localhost.evil.com", "http://[::2]",
                          "http://127.0.0.1.nip.io", "ftp://127.0.0.1", "http://u@127.0.0.1", ""}) {
    EXPECT_FALSE(is_loopback_url(url)) << url;
  }
}

TEST(CheckUrl, ALoopbackUrlsPortIsTheOneNamedOrItsSchemes) {
  EXPECT_EQ(loopback_port("http://127.0.0.1:11434"), 11434u);
  EXPECT_EQ(loopback_port("http://[::1]:8080/v1"), 8080u);
  EXPECT_EQ(loopback_port("http://localhost/"), 80u);
  EXPECT_EQ(loopback_port("https://localhost?x"), 443u);
  for (const char* url : {"http://10.0.0.1:8080", "http://127.0.0.1:0", "http://127.0.0.1:65536",
                          "http://127.0.0.1:99999999999", "http://127.0.0.1:80x", "http://127.0.0.1:", "http://[::1"}) {
    EXPECT_EQ(loopback_port(url), std::nullopt) << url;
  }
}

TEST(Perform, ACheckedConnectionSendsOnlyWhenTheCheckSaysSo) {
  const auto server = HttpServer::answering(answer("yes"));
  Request request;
  request.url = server->url("/v1/x");
  Connection seen;
  request.check_connection = [&](const Connection& c) {
    seen = c;
    return false;
  };
  const auto refused = perform(request);
  ASSERT_FALSE(refused.ok());
  ASSERT_NE(refused.error().cause_as<Failure>(), nullptr);
  EXPECT_EQ(*refused.error().cause_as<Failure>(), Failure::Untrusted) << refused.error().message;
  const auto posts = [&] {
    int n = 0;
    for (const auto& r : server->requests()) n += r.find("POST") != std::string::npos ? 1 : 0;
    return n;
  };
  EXPECT_EQ(posts(), 0) << "nothing was sent on the connection";
  EXPECT_EQ(seen.peer_ip, "127.0.0.1");
  EXPECT_EQ(request.url, server->url("/v1/x"));
  EXPECT_NE(seen.local_port, 0U);
  EXPECT_NE(seen.peer_port, 0U);
  request.check_connection = [](const Connection&) { return true; };
  const auto sent = perform(request);
  ASSERT_TRUE(sent.ok()) << sent.error().message;
  EXPECT_EQ(sent->body, "yes");
  EXPECT_EQ(posts(), 1);
}

TEST(Session, KeepsOneConnectionAndChecksItBeforeEachRequest) {
  tarmac::testing::FakeLlm server([](int n, const std::string&) { return tarmac::testing::FakeLlm::Reply{"200 OK", std::to_string(n)}; },
                                  0, /*keep_alive=*/true);
  Cancel cancel;
  Session session;
  int checks = 0;
  Request request;
  request.url = server.url() + "/v1/x";
  request.cancel = &cancel;
  request.session = &session;
  request.check_connection = [&](const Connection&) { return ++checks > 0; };
  for (int i = 0; i < 3; ++i) {
    const auto r = perform(request);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->body, std::to_string(i));
  }
  EXPECT_EQ(server.connections(), 1) << "one connection for the three";
  EXPECT_EQ(checks, 3) << "the kept connection is checked again before each request";
  // A request unlike the last (no check now) starts afresh; one refused by its check sends nothing.
  request.check_connection = nullptr;
  ASSERT_TRUE(perform(request).ok());
  EXPECT_EQ(server.connections(), 2);
  request.check_connection = [](const Connection&) { return false; };
  const auto refused = perform(request);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(*refused.error().cause_as<Failure>(), Failure::Untrusted);
  EXPECT_EQ(server.requests(), 4);
  // Without a session, each request has a connection of its own.
  Request plain;
  plain.url = server.url() + "/v1/x";
  ASSERT_TRUE(perform(plain).ok());
  ASSERT_TRUE(perform(plain).ok());
  EXPECT_EQ(server.connections(), 5);
}

TEST(Session, ACancelShutsDownTheKeptConnection) {
  std::atomic<bool> hang{false};
  tarmac::testing::FakeLlm server([&](int, const std::string&) { return tarmac::testing::FakeLlm::Reply{"200 OK", "ok", hang.load()}; },
                                  0, /*keep_alive=*/true);
  Cancel cancel;
  Session session;
  Request request;
  request.url = server.url() + "/v1/x";
  request.cancel = &cancel;
  request.session = &session;
  request.timeout_ms = 60000;
  ASSERT_TRUE(perform(request).ok());
  hang = true;
  std::thread stopper([&] {
    ASSERT_TRUE(tarmac::testing::FakeLlm::wait_for([&] { return server.hanging() == 1; }));
    cancel.set();
  });
  const long long t0 = util::monotonic_ms();
  const auto r = perform(request);
  stopper.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(*r.error().cause_as<Failure>(), Failure::Cancelled);
  EXPECT_LT(util::monotonic_ms() - t0, 10000);
  EXPECT_TRUE(tarmac::testing::FakeLlm::wait_for([&] { return server.closed_by_client() == 1; }))
      << "the server saw the connection closed: it stops generating";
  EXPECT_EQ(server.connections(), 1);
}

TEST(Perform, PostsTheBodyAndHeadersAndReadsTheAnswer) {
  const auto server = HttpServer::answering(answer(R"({"ok":true})", "201 Created"));
  Request request;
  request.url = server->url("/v1/x?y=1");
  request.headers = {"Content-Type: application/json", "Authorization: Bearer t"};
  request.body = std::string(4000, 'a');  // over 1 KiB: no "Expect: 100-continue" wait
  const auto response = perform(request);
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_EQ(response->status, 201);
  EXPECT_EQ(response->body, R"({"ok":true})");
  const auto got = server->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].starts_with("POST /v1/x?y=1 HTTP/1.1\r\n")) << got[0];
  EXPECT_NE(got[0].find("Authorization: Bearer t\r\n"), std::string::npos);
  EXPECT_EQ(got[0].find("Expect:"), std::string::npos) << got[0];
  EXPECT_TRUE(got[0].ends_with(std::string(4000, 'a')));
}

TEST(Perform, AnErrorStatusIsAnAnswerNotAnError) {
  const auto server = HttpServer::answering(answer("no", "503 Service Unavailable"));
  Request request;
  request.method = "GET";
  request.url = server->url("/health");
  const auto response = perform(request);
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_EQ(response->status, 503);
}

TEST(Perform, StreamsTheBodyInPiecesAndStopsWhenAsked) {
  std::string body;
  for (int i = 0; i < 2000; ++i) body += "data: {\"n\":" + std::to_string(i) + "}\n\n";
  const auto server = HttpServer::answering(answer(body));
  Request request;
  request.method = "GET";
  request.url = server->url("/stream");
  std::string seen;
  request.on_data = [&](std::string_view piece) {
    seen.append(piece);
    return true;
  };
  auto response = perform(request);
  ASSERT_TRUE(response.ok()) << response.error().message;
  EXPECT_EQ(seen, body);
  EXPECT_TRUE(response->body.empty()) << "on_data took it";

  std::size_t pieces = 0;
  request.on_data = [&](std::string_view) { return ++pieces < 1; };
  response = perform(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().message, "stopped while reading the answer");
  EXPECT_EQ(pieces, 1u);
}

TEST(Perform, AnAnswerOverTheBoundIsAnError) {
  const auto server = HttpServer::answering(answer(std::string(100'000, 'x')));
  Request request;
  request.url = server->url();
  request.max_body_bytes = 10'000;
  const auto response = perform(request);
  ASSERT_FALSE(response.ok());
  EXPECT_NE(response.error().message.find("larger than 10000 bytes"), std::string::npos) << response.error().message;
}

TEST(Perform, ASilentServerTimesOutAndACancelEndsItAtOnce) {
  HttpServer silent("200 OK", true);
  Request request;
  request.url = silent.url();
  request.timeout_ms = 300;
  auto response = perform(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().message, "timed out after 300 ms");

  HttpServer hanging("200 OK", true);
  Cancel cancel;
  request.url = hanging.url();
  request.timeout_ms = 60'000;
  request.cancel = &cancel;
  std::atomic<long long> set_at{0};
  std::thread canceller([&] {
    // Waits for the request to reach the server, then cancels: an event, not a clock.
    while (hanging.requests().empty()) std::this_thread::yield();
    set_at = util::monotonic_ms();
    cancel.set();
  });
  response = perform(request);
  const long long ended_at = util::monotonic_ms();
  canceller.join();
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().message, "cancelled");
  // The connection is shut down, not left for libcurl's next look at the flag (about a second).
  EXPECT_LT(ended_at - set_at, 800);
  // Set before the request: it ends before it is sent.
  response = perform(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().message, "cancelled");
}

TEST(Perform, RefusesBadInputBeforeSendingAnything) {
  Request request;
  request.url = "http://127.0.0.1:1/";
  request.method = "DELETE";
  EXPECT_EQ(perform(request).error().code, Error::Code::Invalid);
  request.method = "POST";
  request.headers = {"X-Evil: a\r\nHost: b"};
  EXPECT_EQ(perform(request).error().code, Error::Code::Invalid);
  request.headers = {"no colon"};
  EXPECT_EQ(perform(request).error().code, Error::Code::Invalid);
}

TEST(Perform, RefusedConnectionIsAnIoError) {
  unsigned port = 0;
  {
    HttpServer gone;
    port = gone.port();
  }
  Request request;
  request.url = "http://127.0.0.1:" + std::to_string(port) + "/";
  const auto response = perform(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.error().code, Error::Code::Io);
}

}  // namespace
}  // namespace tarmac::net
