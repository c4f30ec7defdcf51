// The webhook's `text` is what Slack renders: a process name is someone else's text there.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tarmac/alerts/sinks.hpp"

namespace tarmac::alerts {
namespace {

Notice notice_about(const std::string& command, const std::string& user) {
  Notice n;
  n.kind = Notice::Kind::Firing;
  n.ts_ms = 720000;
  n.alert.rule = Rule::Holding;
  n.alert.severity = Severity::Warning;
  n.alert.key = "gpu:3";
  n.alert.gpu = 3;
  n.alert.pid = 1234;
  n.alert.user = user;
  n.alert.command = command;
  n.alert.summary = "GPU 3: " + command + " (" + user + ", pid 1234) holds 20.0 GiB at 0 % for 12m";
  return n;
}

// A process named "<!channel>" pinged the whole channel; "<http://x|docs>" showed a disguised link.
TEST(SlackText, ProcessTextInTheMessageIsShownNotObeyed) {
  const auto body =
      nlohmann::json::parse(notice_body(notice_about("<!channel> <http://evil.example/|open the runbook> a&b", "eve")));
  const std::string text = body.at("text");
  EXPECT_EQ(text.find('<'), std::string::npos) << text;
  EXPECT_EQ(text.find('>'), std::string::npos) << text;
  EXPECT_NE(text.find("&lt;!channel&gt; &lt;http://evil.example/|open the runbook&gt; a&amp;b"), std::string::npos)
      << text;
  // The structured part is data for programs, not Slack markup: kept as the process has it.
  EXPECT_EQ(body.at("alert").at("command"), "<!channel> <http://evil.example/|open the runbook> a&b");
}

TEST(SlackText, InvalidUtf8DoesNotStopTheNotice) {
  std::string body;
  ASSERT_NO_THROW(body = notice_body(notice_about("train\xFF", "bob")));
  EXPECT_NE(nlohmann::json::parse(body).at("text").get<std::string>().find("train\xEF\xBF\xBD"), std::string::npos);
}

}  // namespace
}  // namespace tarmac::alerts
