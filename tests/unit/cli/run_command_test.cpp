#include "tarmac/cli/run_command.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "cli_test_support.hpp"

namespace tarmac::cli {
namespace {

using nlohmann::json;
using testing::FakeAgent;
using testing::printed;
using testing::ScopedEnv;
using testing::TempDir;

std::string limits_error(const std::string& time, const std::string& grace, const std::string& wait) {
  const auto r = detail::parse_limits(time, grace, wait);
  return r.ok() ? std::string() : r.error().message;
}

TEST(RunLimits, DurationsAsTyped) {
  const auto none = detail::parse_limits("", "10s", "");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->job.time_ms, std::nullopt);
  EXPECT_EQ(none->job.grace_ms, 10000);
  EXPECT_EQ(none->wait_ms, std::nullopt);
  const auto all = detail::parse_limits("2h", "0", "0");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->job.time_ms, 2 * 3600 * 1000);
  EXPECT_EQ(all->job.grace_ms, 0);  // no grace: SIGKILL right after SIGTERM
  EXPECT_EQ(all->wait_ms, 0);       // give up at once when the GPUs are not free
}

TEST(RunLimits, BadDurationsNameTheFlag) {
  EXPECT_EQ(limits_error("0", "10s", ""), "--time: '0' is not a duration (like 30s, 10m, 2h)");
  EXPECT_EQ(limits_error("soon", "10s", ""), "--time: 'soon' is not a duration (like 30s, 10m, 2h)");
  EXPECT_EQ(limits_error("", "-1s", ""), "--grace: '-1s' is not a duration (like 30s, 10m, 2h)");
  EXPECT_EQ(limits_error("", "10s", "1y"), "--wait: '1y' is not a duration (like 30s, 10m, 2h)");
  EXPECT_EQ(limits_error("", "", ""), "--grace: '' is not a duration (like 30s, 10m, 2h)");
}

TEST(FirstNonUtf8, NamesWhatAndShowsTheBytes) {
  EXPECT_EQ(detail::first_non_utf8({"python", "caf\xC3\xA9"}, {"LANG=C.UTF-8"}, "/home/a"), std::nullopt);
  EXPECT_EQ(detail::first_non_utf8({"py\xff"}, {}, "/")->first, "the command");
  EXPECT_EQ(detail::first_non_utf8({"python", "x", "\xfe"}, {}, "/")->first, "argument 2");
  const auto env = detail::first_non_utf8({"python"}, {"OK=1", "NAME\x1b[2J=\xff"}, "/");
  ASSERT_TRUE(env);
  EXPECT_EQ(env->first, "the environment variable NAME\\x1b[2J");  // the name is shown escaped too
  EXPECT_EQ(env->second, "NAME\x1b[2J=\xff");
  EXPECT_EQ(detail::first_non_utf8({"python"}, {}, "/home/\xff")->first, "the working directory");
}

TEST(RefusalText, TheAgentsWordsOrItsLine) {
  EXPECT_EQ(detail::refusal_text(json{{"ok", false}, {"error", "-n 9 asks for more GPUs than there are (8)"}}, ""),
            "-n 9 asks for more GPUs than there are (8)");
  EXPECT_EQ(detail::refusal_text(json{{"ok", false}}, ""), "refused");
  EXPECT_EQ(detail::refusal_text(json{{"ok", false}, {"error", 3}}, ""), "refused");
  EXPECT_EQ(detail::refusal_text(json(), "\x1b[2Jnot json"), "\\x1b[2Jnot json");
  EXPECT_EQ(detail::refusal_text(json{{"error", "a\nb\x07"}}, ""), "a\nb\\x07");
}

TEST(EndedStatus, ExitCodesAndWords) {
  const auto ended = [](const json& job) {
    int code = -1;
    const std::string words = printed([&](std::FILE* err) { code = detail::ended_status(job, 5, err); });
    return std::pair{code, words};
  };
  EXPECT_EQ(ended(json{{"state", "done"}, {"exit_code", 0}, {"started_unix_ms", 1}}), (std::pair{0, std::string()}));
  EXPECT_EQ(ended(json{{"state", "failed"}, {"exit_code", 42}, {"started_unix_ms", 1}}).first, 42);
  EXPECT_EQ(ended(json{{"state", "cancelled"}, {"started_unix_ms", nullptr}}),
            (std::pair{kExitProblems, std::string("tarmac: job 5 was cancelled before it started\n")}));
  // Cancelled while running: its status, as any ended job.
  EXPECT_EQ(ended(json{{"state", "cancelled"}, {"started_unix_ms", 1}, {"exit_code", 143}}).first, 143);
  EXPECT_EQ(ended(json{{"state", "lost"}, {"reason", "the wrapper \x1b]0;x\x07 died"}}),
            (std::pair{kExitCouldNotLook, std::string("tarmac: job 5 was lost: the wrapper \\x1b]0;x\\x07 died\n")}));
  EXPECT_EQ(ended(json{{"state", 7}}).first, kExitProblems);  // no exit code: 1, and nothing thrown
}

class RunCommand : public testing::AgentSocketTest {
 protected:
  std::pair<int, std::string> run(std::vector<std::string> args) {
    args.insert(args.begin(), "run");
    return run_cli(add_run_command, std::move(args));
  }
};

TEST_F(RunCommand, BadFlagsAreUsageErrors) {
  EXPECT_EQ(run({"-n", "0", "--", "true"}), (std::pair{kExitUsage, std::string("tarmac run: -n must be at least 1\n")}));
  EXPECT_EQ(run({"--time", "0", "--", "true"}).second,
            "tarmac run: --time: '0' is not a duration (like 30s, 10m, 2h)\n");
  EXPECT_EQ(run({}), (std::pair{kExitUsage, std::string("tarmac run: no command: tarmac run [OPTIONS] -- CMD [ARGS...]\n")}));
}

TEST_F(RunCommand, ACommandThatIsNotThereIs127) {
  EXPECT_EQ(run({"--", "tarmac-no-such-command-anywhere"}),
            (std::pair{127, std::string("tarmac: tarmac-no-such-command-anywhere: command not found\n")}));
}

TEST_F(RunCommand, TheAgentsRefusalWithItsExitCode) {
  FakeAgent agent(socket_path(),
                  json{{"ok", false}, {"code", "invalid"}, {"error", "-n 9 asks for more GPUs than there are (8)"}}.dump());
  EXPECT_EQ(run({"-n", "9", "--", "true"}),
            (std::pair{kExitUsage, std::string("tarmac run: -n 9 asks for more GPUs than there are (8)\n")}));
  const json request = json::parse(agent.request());
  EXPECT_EQ(request["op"], "submit");
  EXPECT_EQ(request["n"], 9);
  EXPECT_EQ(request["argv"], json::array({"true"}));
  EXPECT_TRUE(request["path"].get<std::string>().starts_with("/"));
}

// Whatever answers on the socket is not trusted to speak JSON or to be polite.
TEST_F(RunCommand, AnAnswerThatIsNotJsonIsShownEscaped) {
  FakeAgent agent(socket_path(), "\x1b]0;owned\x07 go away");
  EXPECT_EQ(run({"--", "true"}),
            (std::pair{kExitCouldNotLook, std::string("tarmac run: \\x1b]0;owned\\x07 go away\n")}));
}

}  // namespace
}  // namespace tarmac::cli
