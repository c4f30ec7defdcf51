#include "tarmac/cli/jobs_command.hpp"

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

constexpr long long kJobsNowMs = 1736154000000;

TEST(AskAgent, SendsOneLineAndReadsTheAnswer) {
  TempDir dir;
  FakeAgent agent(dir / "agent.sock", R"({"ok": true, "jobs": []})");
  auto answer = ask_agent(dir / "agent.sock", json{{"op", "jobs"}, {"all", true}});
  ASSERT_TRUE(answer.ok()) << answer.error().message;
  EXPECT_EQ(answer->body["ok"], true);
  EXPECT_EQ(json::parse(agent.request()), (json{{"op", "jobs"}, {"all", true}}));
}

TEST(AskAgent, AnAnswerThatIsNotJsonIsAnError) {
  TempDir dir;
  FakeAgent agent(dir / "agent.sock", "\x1b[2J not json");
  const auto answer = ask_agent(dir / "agent.sock", json{{"op", "jobs"}});
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.error().message, "the agent's answer is not JSON");
}

TEST(AskAgent, NoAgentIsAnErrorNamingTheSocket) {
  TempDir dir;
  const auto answer = ask_agent(dir / "nobody.sock", json{{"op", "jobs"}});
  ASSERT_FALSE(answer.ok());
  EXPECT_NE(answer.error().message.find(dir / "nobody.sock"), std::string::npos) << answer.error().message;
}

TEST(AgentSocket, TheEnvironmentThenTheConfiguration) {
  testing::ConfigFixture config("[scheduler]\nsocket = \"/srv/tarmac/agent.sock\"\n");
  {
    ScopedEnv env("TARMAC_SOCKET", std::nullopt);
    EXPECT_EQ(agent_socket(config.global), "/srv/tarmac/agent.sock");
  }
  ScopedEnv env("TARMAC_SOCKET", "/tmp/mine.sock");
  EXPECT_EQ(agent_socket(config.global), "/tmp/mine.sock");
}

TEST(ExitCodeFor, BusyIoAndTheRest) {
  EXPECT_EQ(exit_code_for(json{{"code", "busy"}}), kExitProblems);
  EXPECT_EQ(exit_code_for(json{{"code", "io"}}), kExitCouldNotLook);
  EXPECT_EQ(exit_code_for(json{{"code", "invalid"}}), kExitUsage);
  EXPECT_EQ(exit_code_for(json{{"code", 7}}), kExitUsage);
  EXPECT_EQ(exit_code_for(json::object()), kExitUsage);
}

TEST(JobExitStatus, TheExitCodeElseOne) {
  EXPECT_EQ(job_exit_status(json{{"exit_code", 0}}), 0);
  EXPECT_EQ(job_exit_status(json{{"exit_code", 137}}), 137);
  EXPECT_EQ(job_exit_status(json{{"exit_code", nullptr}}), kExitProblems);
  EXPECT_EQ(job_exit_status(json{{"exit_code", "0"}}), kExitProblems);
  EXPECT_EQ(job_exit_status(json::object()), kExitProblems);
}

// A refusal lists each GPU and who holds it, over several lines: the lines stay lines (the old
// code showed "\x0a" between them) and each is escaped.
TEST(FailureText, LinesKeptEachEscaped) {
  EXPECT_EQ(failure_text(json{{"error", "no 2 free GPUs: 0 free of 1\n  GPU 0: leased: by m\x1b]0;x\x07"}}),
            "no 2 free GPUs: 0 free of 1\n  GPU 0: leased: by m\\x1b]0;x\\x07");
  EXPECT_EQ(failure_text(json{{"error", 5}}), "");
  EXPECT_EQ(failure_text(json::object()), "");
}

TEST(ParseId, WholePositiveNumbersOnly) {
  EXPECT_EQ(detail::parse_id("42"), 42);
  for (const char* bad : {"", "0", "-3", "4x", " 4", "+4", "0x10", "99999999999999999999"}) {
    EXPECT_EQ(detail::parse_id(bad), std::nullopt) << bad;
  }
}

TEST(JobText, GpusAndCommandSkipWhatIsNotTheirType) {
  EXPECT_EQ(detail::gpu_list(json{{"gpus", {0, 2, 5}}}), "0,2,5");
  EXPECT_EQ(detail::gpu_list(json{{"gpus", {0, "x", -1, 3}}}), "0,3");
  EXPECT_EQ(detail::gpu_list(json{{"gpus", "0,1"}}), "");
  EXPECT_EQ(detail::command_text(json{{"argv", {"python", "train.py", "--lr", "0.1"}}}), "python train.py --lr 0.1");
  EXPECT_EQ(detail::command_text(json{{"argv", {"python", 3, nullptr}}}), "python");
  EXPECT_EQ(detail::command_text(json::object()), "");
}

TEST(JobTime, RanWaitedAndLeases) {
  const long long now = kJobsNowMs;
  EXPECT_EQ(detail::time_text(json{{"submitted_unix_ms", now - 12000}}, now), "waited 12s");
  EXPECT_EQ(detail::time_text(json{{"submitted_unix_ms", now - 5000}, {"started_unix_ms", now - 120000}}, now),
            "ran 2m");
  EXPECT_EQ(detail::time_text(json{{"started_unix_ms", now - 120000}, {"ended_unix_ms", now - 60000}}, now), "ran 1m");
  EXPECT_EQ(detail::time_text(json{{"kind", "lease"}, {"expires_unix_ms", now + 3600000}}, now), "ends in 1h");
  EXPECT_EQ(detail::time_text(json{{"kind", "lease"}, {"expires_unix_ms", now - 1}}, now), "");
  // A clock that went back, or a submission in the future, is not a negative wait.
  EXPECT_EQ(detail::time_text(json{{"submitted_unix_ms", now + 5000}}, now), "waited 0s");
  EXPECT_EQ(detail::time_text(json{{"submitted_unix_ms", "yesterday"}}, now), "waited 0s");
}

TEST(PrintJobs, NoneSaysSo) {
  EXPECT_EQ(printed([](std::FILE* out) { detail::print_jobs(out, json::array(), kJobsNowMs, false); }),
            "no jobs or leases\n");
}

TEST(PrintJobs, OneRowPerJob) {
  const json jobs = json::parse(R"([
    {"id": 7, "user": "alice", "kind": "job", "state": "running", "gpus": [0, 1], "name": "bert",
     "argv": ["python", "train.py"], "started_unix_ms": 1736153880000},
    {"id": 8, "user": "bob", "kind": "job", "state": "done", "gpus": [2], "argv": ["./eval.sh"],
     "started_unix_ms": 1736153000000, "ended_unix_ms": 1736153060000, "exit_code": 3, "backfill": true}
  ])");
  EXPECT_EQ(printed([&](std::FILE* out) { detail::print_jobs(out, jobs, kJobsNowMs, false); }),
            "ID  USER   KIND  STATE    GPUS  TIME    EXIT  NAME / COMMAND\n"
            " 7  alice  job   running  0,1   ran 2m        bert: python train.py\n"
            " 8  bob    job   done     2     ran 1m     3  [backfill] ./eval.sh\n");
}

// Names, commands and users are the submitters' own words.
TEST(PrintJobs, HostileNamesAreShownEscapedAndOddFieldsDoNotThrow) {
  const json jobs = json::array({json{{"id", "seven"},
                                      {"user", "m\x1b[31mallory"},
                                      {"state", 3},
                                      {"name", "\x1b]0;owned\x07"},
                                      {"argv", {"rm\r-rf"}},
                                      {"backfill", "yes"},
                                      {"exit_code", 1.5}}});
  std::string text;
  ASSERT_NO_THROW(text = printed([&](std::FILE* out) { detail::print_jobs(out, jobs, kJobsNowMs, false); }));
  EXPECT_FALSE(testing::has_raw_control(text)) << text;
  EXPECT_NE(text.find("\\x1b]0;owned\\x07: rm\\x0d-rf"), std::string::npos) << text;
  EXPECT_NE(text.find("m\\x1b[31mallory"), std::string::npos) << text;
}

TEST(LeaseText, TheLeaseAndTheLineToExport) {
  const json job = json::parse(R"({"id": 12, "gpus": [1, 3], "uuids": ["GPU-b", "GPU-d"],
                                   "expires_unix_ms": 1736161200000})");
  EXPECT_EQ(detail::lease_text(job, kJobsNowMs),
            "lease 12: GPU 1,3 (GPU-b,GPU-d) for 2h\n"
            "export CUDA_VISIBLE_DEVICES=1,3 CUDA_DEVICE_ORDER=PCI_BUS_ID TARMAC_JOB_ID=12\n");
  EXPECT_EQ(detail::lease_text(json::object(), kJobsNowMs),
            "lease 0: GPU  () for 0s\nexport CUDA_VISIBLE_DEVICES= CUDA_DEVICE_ORDER=PCI_BUS_ID TARMAC_JOB_ID=0\n");
  // A MIG device: CUDA takes it by its UUID only, and PCI order does not order MIG devices.
  const json mig = json::parse(R"({"id": 13, "gpus": [4], "uuids": ["MIG-1d2e"], "expires_unix_ms": 1736161200000})");
  EXPECT_EQ(detail::lease_text(mig, kJobsNowMs),
            "lease 13: a MIG device of GPU 4 for 2h\nexport CUDA_VISIBLE_DEVICES=MIG-1d2e TARMAC_JOB_ID=13\n");
}

class JobsCommands : public testing::AgentSocketTest {
 protected:
  std::pair<int, std::string> run(std::vector<std::string> args) { return run_cli(add_jobs_commands, std::move(args)); }
};

TEST_F(JobsCommands, BadIdsAndDurationsAreUsageErrorsWithoutAnAgent) {
  EXPECT_EQ(run({"cancel", "x7"}), (std::pair{kExitUsage, std::string("tarmac cancel: 'x7' is not a job id (a number; "
                                                                         "see tarmac jobs)\n")}));
  EXPECT_EQ(run({"extend", "0", "1h"}).first, kExitUsage);
  EXPECT_EQ(run({"extend", "3", "forever"}).second, "tarmac extend: 'forever' is not a duration (like 30m, 2h)\n");
  EXPECT_EQ(run({"reserve", "--for", "0"}).first, kExitUsage);
  EXPECT_EQ(run({"reserve", "-n", "0", "--for", "1h"}).second, "tarmac reserve: -n must be at least 1\n");
}

TEST_F(JobsCommands, NoAgentCouldNotLook) {
  const auto [code, err] = run({"jobs"});
  EXPECT_EQ(code, kExitCouldNotLook);
  EXPECT_NE(err.find("is `tarmac agent` running?"), std::string::npos) << err;
}

TEST_F(JobsCommands, ARefusalIsPrintedLineByLineEscapedWithItsExitCode) {
  FakeAgent agent(socket_path(),
                  json{{"ok", false}, {"code", "busy"}, {"error", "no 2 free GPUs: 0 free of 1\n  GPU 0: leased: by "
                                                                  "m\x1b]0;x\x07, job j"}}
                      .dump());
  const auto [code, err] = run({"reserve", "-n", "2", "--for", "1m"});
  EXPECT_EQ(code, kExitProblems);
  EXPECT_EQ(err, "tarmac reserve: no 2 free GPUs: 0 free of 1\n  GPU 0: leased: by m\\x1b]0;x\\x07, job j\n");
  const json request = json::parse(agent.request());
  EXPECT_EQ(request["op"], "reserve");
  EXPECT_EQ(request["n"], 2);
  EXPECT_EQ(request["for_ms"], 60000);
}

}  // namespace
}  // namespace tarmac::cli
