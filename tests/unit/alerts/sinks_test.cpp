#include "tarmac/alerts/sinks.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "http_server.hpp"

namespace tarmac::alerts {
namespace {

using tarmac::testing::body_of;
using tarmac::testing::HttpServer;

Notice holding_notice() {
  Notice n;
  n.kind = Notice::Kind::Firing;
  n.ts_ms = 720000;
  n.alert.rule = Rule::Holding;
  n.alert.severity = Severity::Warning;
  n.alert.key = "gpu:3";
  n.alert.gpu = 3;
  n.alert.gpus = {3};
  n.alert.uuid = "GPU-5b2e";
  n.alert.pid = 1234;
  n.alert.user = "bob";
  n.alert.summary = "GPU 3 (GPU-5b2e): python (bob, pid 1234) holds 20.0 GiB at 0 % for 12m";
  return n;
}

// holding_notice() about `command` run by `user`, the summary saying so as the Evaluator would.
Notice notice_about(const std::string& command, const std::string& user) {
  Notice n = holding_notice();
  n.alert.command = command;
  n.alert.user = user;
  n.alert.summary = "GPU 3: " + command + " (" + user + ", pid 1234) holds 20.0 GiB at 0 % for 12m";
  return n;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(WebhookUrl, TakesHttpAndHttpsAndRefusesJunk) {
  for (const char* good : {"http://127.0.0.1:8080/hooks/a?x=1", "http://relay.local", "http://[::1]:9000/x",
                           "https://hooks.slack.com/services/T/B/X"}) {
    EXPECT_TRUE(check_webhook_url(good).ok()) << good;
  }
  for (const char* bad : {"hooks.slack.com/x", "http://", "https://", "ftp://host/", "http://user@host/",
                          "http://a b/", "https://host/\r\nX-Injected: 1", "file:///etc/shadow", "http://:80/"}) {
    EXPECT_FALSE(check_webhook_url(bad).ok()) << bad;
  }
}

TEST(WebhookUrl, TheLogShowsTheOriginNeverThePathThatHoldsTheSecret) {
  EXPECT_EQ(webhook_origin("https://hooks.slack.com/services/T0/B0/s3cr3t"), "https://hooks.slack.com/…");
  EXPECT_EQ(webhook_origin("http://127.0.0.1:9000"), "http://127.0.0.1:9000");
  EXPECT_EQ(webhook_origin("http://127.0.0.1:9000?token=s3cr3t"), "http://127.0.0.1:9000/…");
}

TEST(Webhook, PostsJsonWithSlackText) {
  HttpServer server;
  auto sent = post_json(server.url(), notice_body(holding_notice()));
  ASSERT_TRUE(sent.ok()) << sent.error().message;
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].starts_with("POST /hook HTTP/1.1\r\n")) << requests[0];
  EXPECT_NE(requests[0].find("Content-Type: application/json\r\n"), std::string::npos);
  const auto body = nlohmann::json::parse(body_of(requests[0]));
  EXPECT_EQ(body["text"], "FIRING [warning] holding: GPU 3 (GPU-5b2e): python (bob, pid 1234) holds 20.0 GiB at 0 % for 12m");
  EXPECT_EQ(body["status"], "firing");
  EXPECT_EQ(body["alert"]["rule"], "holding");
  EXPECT_EQ(body["alert"]["gpu"], 3);
  EXPECT_EQ(body["alert"]["pid"], 1234);
  EXPECT_EQ(body["alert"]["user"], "bob");
}

TEST(Webhook, FailsOnErrorStatusRefusalAndSilence) {
  HttpServer broken("500 Internal Server Error");
  auto sent = post_json(broken.url(), "{}");
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.error().message.find("500"), std::string::npos) << sent.error().message;

  unsigned closed_port = 0;
  {
    HttpServer gone;
    closed_port = gone.port();
  }
  sent = post_json("http://127.0.0.1:" + std::to_string(closed_port) + "/", "{}");
  EXPECT_FALSE(sent.ok());

  HttpServer silent("200 OK", true);
  sent = post_json(silent.url(), "{}", 300);
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.error().message.find("timed out"), std::string::npos) << sent.error().message;
}

TEST(Command, SplitsOnWhitespaceWithoutAShell) {
  EXPECT_EQ(command_argv("  /usr/bin/logger -t tarmac\t'a b' "),
            (std::vector<std::string>{"/usr/bin/logger", "-t", "tarmac", "'a", "b'"}));
  EXPECT_TRUE(command_argv("   ").empty());
}

TEST(Command, GetsTheJsonOnStdinAndTheEnvironment) {
  const auto dir = std::filesystem::temp_directory_path() / ("tarmac-alert-cmd-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "out").string();
  const Notice n = holding_notice();
  auto ran = run_command({"/bin/sh", "-c", "cat > \"$0\"; env | grep ^TARMAC_ALERT_ | sort > \"$0.env\"", out},
                         notice_body(n), notice_env(n));
  ASSERT_TRUE(ran.ok()) << ran.error().message;
  EXPECT_EQ(nlohmann::json::parse(slurp(out))["alert"]["rule"], "holding");
  const std::string env = slurp(out + ".env");
  EXPECT_NE(env.find("TARMAC_ALERT_STATUS=firing\n"), std::string::npos) << env;
  EXPECT_NE(env.find("TARMAC_ALERT_RULE=holding\n"), std::string::npos);
  EXPECT_NE(env.find("TARMAC_ALERT_GPU=3\n"), std::string::npos);
  EXPECT_NE(env.find("TARMAC_ALERT_PID=1234\n"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Command, FailuresAreErrors) {
  EXPECT_FALSE(run_command({"/nonexistent/tarmac-hook"}, "", {}).ok());
  auto failed = run_command({"/bin/false"}, "", {});
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.error().message.find("exited with 1"), std::string::npos);
  // Does not read its stdin (a big one), and takes too long: killed, and no SIGPIPE kills us.
  auto slow = run_command({"/bin/sleep", "5"}, std::string(1 << 20, 'x'), {}, 200);
  ASSERT_FALSE(slow.ok());
  EXPECT_NE(slow.error().message.find("killed"), std::string::npos) << slow.error().message;
}

// A command found but not runnable: the log says which step failed and why, where the old child
// died silently with 127 (or, for a script without "#!", was run by /bin/sh after all).
TEST(Command, SaysWhyItCannotStart) {
  const auto dir = std::filesystem::temp_directory_path() / ("tarmac-alert-nostart-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string script = (dir / "hook").string();
  std::ofstream(script) << "echo no interpreter line\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  auto ran = run_command({script}, "", {});
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.error().message, "cannot run " + script + ": exec: Exec format error");
  std::filesystem::remove_all(dir);
}

// The webhook's `text` is what Slack renders: a process name is someone else's text there.
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
