#include "tarmac/cli/alerts_command.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "cli_test_support.hpp"

namespace tarmac::cli {
namespace {

using detail::AlertsFlags;

constexpr long long kAlertsAsOfMs = 1736154000000;  // 2025-01-06 09:00:00 UTC

alerts::Alert holding_alert(const std::string& summary) {
  alerts::Alert a;
  a.rule = alerts::Rule::Holding;
  a.severity = alerts::Severity::Warning;
  a.gpu = 3;
  a.summary = summary;
  return a;
}

std::string flags_error(const AlertsFlags& flags) {
  const auto r = detail::check_alerts_flags(flags);
  return r.ok() ? std::string() : r.error().message;
}

TEST(AlertsFlags, ExactlyOneModeWithItsOwnFlags) {
  EXPECT_EQ(flags_error({.check = true}), "");
  EXPECT_EQ(flags_error({.check = true, .db = "x.db"}), "");
  EXPECT_EQ(flags_error({.prometheus_rules = true, .output = "rules.yml"}), "");
  EXPECT_EQ(flags_error({.send_test = true}), "");
  EXPECT_TRUE(flags_error({}).starts_with("alerts: give --check (evaluate the rules from the store),")) << flags_error({});
  EXPECT_EQ(flags_error({.check = true, .prometheus_rules = true}),
            "alerts: give one of --check, --prometheus-rules and --send-test");
  EXPECT_EQ(flags_error({.check = true, .send_test = true}),
            "alerts: give one of --check, --prometheus-rules and --send-test");
  EXPECT_EQ(flags_error({.send_test = true, .db = "x.db"}), "alerts: --send-test takes no other flag");
  EXPECT_EQ(flags_error({.check = true, .output = "x"}), "alerts: -o goes with --prometheus-rules");
  EXPECT_EQ(flags_error({.prometheus_rules = true, .db = "x.db"}), "alerts: --db and --state-dir go with --check");
  EXPECT_EQ(flags_error({.prometheus_rules = true, .state_dir = "/var/lib/tarmac"}),
            "alerts: --db and --state-dir go with --check");
}

TEST(AlertsCheckText, NothingRecordedNothingFiring) {
  alerts::CheckResult result;
  EXPECT_EQ(detail::check_text(result, "/srv/t.db"), "no samples recorded in /srv/t.db: nothing to check\n");
  result.as_of_ms = kAlertsAsOfMs;
  EXPECT_EQ(detail::check_text(result, "/srv/t.db"), "no alerts firing (as of 2025-01-06 09:00:00 UTC, /srv/t.db)\n");
}

TEST(AlertsCheckText, OneLinePerFiringAlert) {
  alerts::CheckResult result;
  result.as_of_ms = kAlertsAsOfMs;
  result.firing = {holding_alert("GPU 3: python (bob, pid 7) holds 20 GiB at 0 %")};
  EXPECT_EQ(detail::check_text(result, "t.db"),
            "1 alert firing (as of 2025-01-06 09:00:00 UTC, t.db):\n"
            "  [warning] holding: GPU 3: python (bob, pid 7) holds 20 GiB at 0 %\n");
  result.firing.push_back(holding_alert("two"));
  EXPECT_TRUE(detail::check_text(result, "t.db").starts_with("2 alerts firing")) << detail::check_text(result, "t.db");
}

// A summary names the recorded process by its command line and user: anybody's bytes. The old
// code printed it raw, so `tarmac alerts --check` in a terminal obeyed another user's escapes.
TEST(AlertsCheckText, SummariesQuotingHostileCommandLinesAreShownEscaped) {
  alerts::CheckResult result;
  result.as_of_ms = kAlertsAsOfMs;
  result.firing = {holding_alert("GPU 3: \x1b]0;owned\x07\x1b[2J (mallory\r, pid 7) holds 20 GiB")};
  const std::string text = detail::check_text(result, "t.db");
  EXPECT_FALSE(testing::has_raw_control(text)) << text;
  EXPECT_NE(text.find("GPU 3: \\x1b]0;owned\\x07\\x1b[2J (mallory\\x0d, pid 7)"), std::string::npos) << text;
}

TEST(AlertsCheckJson, NullUntilSomethingWasRecorded) {
  alerts::CheckResult result;
  result.range = {kAlertsAsOfMs - 600000, kAlertsAsOfMs};
  auto j = detail::check_json(result, "t.db");
  EXPECT_EQ(j["db"], "t.db");
  EXPECT_TRUE(j["as_of_ms"].is_null());
  EXPECT_EQ(j["since_ms"], kAlertsAsOfMs - 600000);
  EXPECT_TRUE(j["firing"].is_array() && j["firing"].empty());
  result.as_of_ms = kAlertsAsOfMs;
  result.firing = {holding_alert("x")};
  j = detail::check_json(result, "t.db");
  EXPECT_EQ(j["as_of_ms"], kAlertsAsOfMs);
  ASSERT_EQ(j["firing"].size(), 1U);
  EXPECT_EQ(j["firing"][0]["summary"], "x");
}

TEST(AlertsCommand, BadCombinationsAreUsageErrors) {
  testing::ConfigFixture config;
  const auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "alerts");
    return testing::run_command_line(add_alerts_command, config.global, args);
  };
  EXPECT_EQ(run({}), kExitUsage);
  EXPECT_EQ(run({"--check", "--prometheus-rules"}), kExitUsage);
  EXPECT_EQ(run({"--check", "-o", "x.yml"}), kExitUsage);
  EXPECT_EQ(run({"--prometheus-rules", "--db", "x.db"}), kExitUsage);
  EXPECT_EQ(run({"--check", "--db", "x.db", "--state-dir", "/x"}), kExitUsage);  // CLI11: excludes
  EXPECT_EQ(run({"--check", "--db", config.dir() / "none.db"}), kExitCouldNotLook);
}

}  // namespace
}  // namespace tarmac::cli
