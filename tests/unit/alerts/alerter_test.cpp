#include "tarmac/alerts/alerter.hpp"

#include <gtest/gtest.h>

#include <mutex>

#include "http_server.hpp"
#include "test_support.hpp"

namespace tarmac::alerts {
namespace {

using namespace tarmac::alerts::testing;  // NOLINT: the alert tests' snapshots
using tarmac::testing::body_of;
using tarmac::testing::HttpServer;

struct Log {
  std::mutex mutex;
  std::vector<std::string> lines;
  util::LogSink sink() {
    return [this](util::LogLevel, const std::string& line) {
      std::lock_guard lock(mutex);
      lines.push_back(line);
    };
  }
  std::size_t count(const std::string& part) {
    std::lock_guard lock(mutex);
    std::size_t n = 0;
    for (const auto& l : lines) n += l.find(part) != std::string::npos ? 1 : 0;
    return n;
  }
};

TEST(Alerter, SendsFiringAndResolvedToTheWebhookOnce) {
  HttpServer server;
  Log log;
  AlertConfig config;
  config.webhook = server.url();
  {
    Alerter alerter(config, gpu::ActivityThresholds{}, log.sink());
    auto c = classes(zombie());
    c[3] = gpu::Activity::Holding;
    for (long long t = 0; t < 60000; t += 1000) alerter.observe(zombie(), c, t);
    ASSERT_EQ(alerter.firing().size(), 1u);
    EXPECT_EQ(alerter.firing()[0].rule, Rule::Holding);
    const auto fine = balanced();
    alerter.observe(fine, classes(fine), 61000);
    EXPECT_TRUE(alerter.firing().empty());
  }  // the destructor sends what is queued
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  const auto first = nlohmann::json::parse(body_of(requests[0]));
  const auto second = nlohmann::json::parse(body_of(requests[1]));
  EXPECT_EQ(first["status"], "firing");
  EXPECT_TRUE(first["text"].get<std::string>().starts_with("FIRING [warning] holding: GPU 3")) << first["text"];
  EXPECT_EQ(second["status"], "resolved");
  EXPECT_EQ(second["alert"]["gpu"], 3);
  EXPECT_EQ(log.count("alert FIRING [warning] holding: GPU 3"), 1u);
  EXPECT_EQ(log.count("alert RESOLVED [warning] holding: GPU 3"), 1u);
}

TEST(Alerter, AFailingWebhookIsLoggedOncePerStreak) {
  unsigned closed_port = 0;
  {
    HttpServer gone;
    closed_port = gone.port();
  }
  Log log;
  AlertConfig config;
  config.webhook = "http://127.0.0.1:" + std::to_string(closed_port) + "/hook";
  config.thermal_for_ms = 0;
  {
    Alerter alerter(config, gpu::ActivityThresholds{}, log.sink());
    auto hot = balanced();
    for (auto& d : hot.devices) d.sample.temp_c = 90;
    const auto fine = balanced();
    for (long long t = 0; t < 6; ++t) {  // fires and resolves three times: six failed posts
      alerter.observe(t % 2 == 0 ? hot : fine, classes(hot), t * 1000);
    }
  }
  EXPECT_EQ(log.count("alert FIRING [critical] thermal: GPU 0"), 3u);
  EXPECT_EQ(log.count("alert webhook"), 1u);
}

TEST(Alerter, WithoutSinksItOnlyLogs) {
  Log log;
  AlertConfig config;
  config.fault_for_ms = 0;
  Alerter alerter(config, gpu::ActivityThresholds{}, log.sink());
  auto s = balanced();
  s.devices[2].lost = "GPU is lost";
  alerter.observe(s, classes(s), 0);
  ASSERT_EQ(alerter.firing().size(), 1u);
  EXPECT_EQ(alerter.firing()[0].rule, Rule::Fault);
  EXPECT_EQ(log.count("alert FIRING [critical] fault: GPU 2"), 1u);
}

}  // namespace
}  // namespace tarmac::alerts
