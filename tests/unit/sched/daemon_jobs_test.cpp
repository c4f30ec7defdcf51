// The agent's scheduler starting, watching and ending jobs (sched/daemon_jobs.cpp, the pass in
// daemon_pass.cpp, the wrappers' runtime in daemon_wrappers.cpp), in-process with two fake GPUs and a
// stand-in for the job wrapper: a job starts on a free GPU, under its lease, and ends as its wrapper
// says; jobs wait for GPUs and for the per-user cap; cancelling and preemption stop a wrapper
// through its pidfd; backfill waits for GPUs idle long enough on the monotonic clock; an attached
// job's output is the submitter's; a restarted agent re-attaches or records what ran meanwhile.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mutex>

#include "daemon_fixture.hpp"
#include "tarmac/store/sqlite.hpp"

namespace tarmac::sched {
namespace {

using testing::eventually;
using testing::FakeGpus;
using testing::json;

class DaemonJobs : public testing::DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    options_.config.backfill_idle_ms = 60'000;
  }

  // The sampler's word that every GPU has been idle since now (the agent's clock).
  void all_gpus_idle() {
    FakeGpus gpus(2);
    const auto snap = gpus.snapshot({});
    daemon_->observe(*snap, {{0, gpu::Activity::Idle}, {1, gpu::Activity::Idle}});
  }
};

TEST_F(DaemonJobs, AJobStartsOnAFreeGpuUnderItsLeaseAndEndsWithItsWrappersExitCode) {
  start();
  const long long id = submit(1);
  ASSERT_TRUE(reaches(id, "running")) << job(id).dump();
  const json running = job(id);
  EXPECT_EQ(running["gpus"], json::array({0}));
  EXPECT_TRUE(std::filesystem::exists(lease_file(0))) << "a running job's GPU is leased in the lock directory";
  EXPECT_TRUE(eventually([&] { return daemon_->given_gpus() == std::set<std::string>{FakeGpus::uuid(0)}; }))
      << "the sampler is not told which GPU is given";
  end_wrapper(id, "exit 3");
  ASSERT_TRUE(reaches(id, "done")) << job(id).dump();
  EXPECT_EQ(job(id)["exit_code"], 3);
  EXPECT_TRUE(eventually([&] { return !std::filesystem::exists(lease_file(0)); })) << "its lease outlived it";
  EXPECT_FALSE(std::filesystem::exists(job_file(id, "json"))) << "the files of its run are removed";
  EXPECT_FALSE(std::filesystem::exists(job_file(id, "env")));
}

TEST_F(DaemonJobs, AWrapperThatEndsWithoutAResultLeavesTheJobLost) {
  start();
  const long long id = submit(1);
  ASSERT_TRUE(reaches(id, "running"));
  end_wrapper(id, "vanish");
  ASSERT_TRUE(reaches(id, "lost")) << job(id).dump();
  EXPECT_NE(job(id)["reason"].get<std::string>().find("without writing a result"), std::string::npos);
}

// The wrapper starts with its stop signals (SIGHUP, SIGINT, SIGTERM, SIGCHLD) blocked, so that a
// cancel that comes before it has set up its handling waits for it rather than ending it unrecorded
// (a "lost" job, seen under a loaded sanitizer run). awk keeps the mask it was given (sh clears it).
TEST_F(DaemonJobs, TheWrapperStartsWithItsStopSignalsBlocked) {
  std::ofstream(options_.shim_exe) << "#!/usr/bin/awk -f\n"
                                      "BEGIN { while ((getline line < \"/proc/self/status\") > 0)\n"
                                      "  if (line ~ /^SigBlk:/) print line > (ARGV[2] \".mask\") }\n";
  start();
  const long long id = submit(1);
  ASSERT_TRUE(reaches(id, "lost")) << job(id).dump();
  std::ifstream in(job_file(id, "json") + ".mask");
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << "the wrapper wrote no mask";
  const unsigned long long mask = std::stoull(line.substr(line.find(':') + 1), nullptr, 16);
  for (const int sig : {SIGHUP, SIGINT, SIGTERM, SIGCHLD}) EXPECT_NE(mask & (1ULL << (sig - 1)), 0U) << sig << " in " << line;
}

// A wrapper that cannot be started: the log names the step and its errno (the old posix_spawn
// gave only the errno), the job waits in the queue, and its lease and files are not left behind.
TEST_F(DaemonJobs, AWrapperThatCannotStartIsLoggedWithWhyAndTheJobWaits) {
  std::mutex logged_mutex;
  std::vector<std::string> logged;
  options_.log = [&](util::LogLevel, const std::string& line) {
    std::lock_guard lock(logged_mutex);
    logged.push_back(line);
  };
  options_.shim_exe = dir_ + "/no-such-wrapper";
  start();
  const long long id = submit(1);
  const std::string expected = fmt::format("scheduler: cannot start job {}: cannot run {}: exec: No such file or directory",
                                           id, options_.shim_exe);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(logged_mutex);
    return std::find(logged.begin(), logged.end(), expected) != logged.end();
  }));
  EXPECT_EQ(state_of(id), "queued");
  EXPECT_FALSE(std::filesystem::exists(lease_file(0)));
  EXPECT_FALSE(std::filesystem::exists(job_file(id, "lock")));
  stop();  // before `logged` goes
}

TEST_F(DaemonJobs, JobsBeyondTheFreeGpusWaitAndTheNextStartsWhenOneEnds) {
  start();
  const long long a = submit(1);
  const long long b = submit(1);
  const long long c = submit(1);
  ASSERT_TRUE(reaches(a, "running"));
  ASSERT_TRUE(reaches(b, "running"));
  EXPECT_EQ(state_of(c), "queued");
  EXPECT_TRUE(eventually([&] { return job(c)["reason"] == "waiting for 1 free GPU (0 free)"; })) << job(c).dump();
  end_wrapper(a, "exit 0");
  ASSERT_TRUE(reaches(c, "running")) << job(c).dump();
  EXPECT_EQ(job(c)["gpus"], job(a)["gpus"]) << "it takes the GPU the ended job gave back";
  end_wrapper(b, "exit 0");
  end_wrapper(c, "exit 0");
  EXPECT_TRUE(reaches(c, "done"));
}

TEST_F(DaemonJobs, ThePerUserCapHoldsAUsersSecondJobBack) {
  options_.config.user_gpu_cap = 1;
  start();
  const long long a = submit(1);
  const long long b = submit(1);
  ASSERT_TRUE(reaches(a, "running"));
  EXPECT_TRUE(eventually([&] { return job(b)["reason"].get<std::string>().find("per-user cap of 1") != std::string::npos; }))
      << job(b).dump();
  EXPECT_EQ(state_of(b), "queued") << "a GPU is free, but its user holds the cap";
  end_wrapper(a, "exit 0");
  EXPECT_TRUE(reaches(b, "running"));
  end_wrapper(b, "exit 0");
}

TEST_F(DaemonJobs, CancellingARunningJobStopsItsWrapperAndRecordsItCancelled) {
  start();
  const long long id = submit(1);
  ASSERT_TRUE(reaches(id, "running"));
  ASSERT_TRUE(wrapper_ready(id));
  const json answer = ask(json{{"op", "cancel"}, {"id", id}});
  ASSERT_TRUE(answer.value("ok", false)) << answer.dump();
  EXPECT_EQ(answer["job"]["state"], "stopping");
  ASSERT_TRUE(reaches(id, "cancelled")) << job(id).dump();
  EXPECT_EQ(job(id)["exit_code"], 143) << "the wrapper got SIGTERM";
  EXPECT_NE(job(id)["reason"].get<std::string>().find("cancelled by "), std::string::npos);
}

TEST_F(DaemonJobs, BackfillWaitsForGpusIdleLongEnoughOnTheAgentsMonotonicClock) {
  start();
  all_gpus_idle();
  const long long id = submit(1, json{{"backfill", true}});
  EXPECT_TRUE(eventually([&] { return job(id)["reason"] == "waiting for 1 GPU idle for 1m"; })) << job(id).dump();
  // Only the agent's clock moves: a scheduler that timed idleness on the wall clock waits a minute.
  now_ += 60'001;
  ASSERT_TRUE(reaches(id, "running")) << job(id).dump();
  end_wrapper(id, "exit 0");
  EXPECT_TRUE(reaches(id, "done"));
}

TEST_F(DaemonJobs, ANormalJobPreemptsBackfillWhichIsQueuedAgainAndStartsAfterIt) {
  start();
  all_gpus_idle();
  now_ += 60'001;
  const long long backfill = submit(2, json{{"backfill", true}});
  ASSERT_TRUE(reaches(backfill, "running"));
  ASSERT_TRUE(wrapper_ready(backfill));
  const long long normal = submit(2);
  // The backfill job's wrapper gets SIGTERM, ends, and the job waits in the queue again.
  ASSERT_TRUE(reaches(normal, "running")) << job(normal).dump() << job(backfill).dump();
  const json requeued = job(backfill);
  EXPECT_EQ(requeued["state"], "queued");
  EXPECT_EQ(requeued["requeues"], 1);
  EXPECT_EQ(requeued["reason"].get<std::string>().rfind("waiting for 2 GPUs idle", 0), 0u) << requeued.dump();
  end_wrapper(normal, "exit 0");
  ASSERT_TRUE(reaches(backfill, "running")) << "it runs again once the GPUs are free";
  end_wrapper(backfill, "exit 0");
  EXPECT_TRUE(reaches(backfill, "done"));
}

TEST_F(DaemonJobs, AnAttachedJobWritesToItsSubmittersOutputAndTheAgentKeepsNoCopy) {
  start();
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  auto c = Connection::connect(options_.socket_path);
  ASSERT_TRUE(c.ok());
  const json req = {{"op", "submit"}, {"argv", {"/bin/true"}}, {"n", 1}, {"cwd", "/"}};
  ASSERT_TRUE(c->send_line(req.dump(), {out[1], out[1]}).ok());
  ::close(out[1]);
  auto answer = c->read_line(20000);
  ASSERT_TRUE(answer.ok());
  const long long id = json::parse(*answer)["job"]["id"];
  auto started = c->read_line(20000);
  ASSERT_TRUE(started.ok()) << "the submitter follows its job";
  EXPECT_EQ(json::parse(*started)["event"], "started");
  end_wrapper(id, "exit 0");
  auto ended = c->read_line(20000);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(json::parse(*ended)["event"], "ended");
  // The output ends (EOF) once the wrapper has gone: nobody else holds the pipe, the agent included.
  std::string text;
  char buf[256];
  for (;;) {
    pollfd p{.fd = out[0], .events = POLLIN, .revents = 0};
    ASSERT_EQ(::poll(&p, 1, 20000), 1) << "the pipe stays open: the agent kept the submitter's descriptor";
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  EXPECT_EQ(text, "hello\n");
}

TEST_F(DaemonJobs, ARestartedAgentReattachesARunningJobAndRecordsOneThatEndedMeanwhile) {
  start();
  const long long stays = submit(1);
  const long long ends = submit(1);
  ASSERT_TRUE(reaches(stays, "running"));
  ASSERT_TRUE(reaches(ends, "running"));
  stop();
  end_wrapper(ends, "exit 5");
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(job_file(ends, "exit")); }));
  start();
  EXPECT_TRUE(reaches(ends, "done")) << job(ends).dump();
  EXPECT_EQ(job(ends)["exit_code"], 5);
  EXPECT_EQ(state_of(stays), "running") << "its wrapper still holds its lock";
  end_wrapper(stays, "exit 7");
  ASSERT_TRUE(reaches(stays, "done")) << "the re-attached wrapper is watched";
  EXPECT_EQ(job(stays)["exit_code"], 7);
}

// The agent killed between its wrapper's start and the job's row saying so (start_job's last step):
// the row says queued with no GPUs while the wrapper runs the job on the GPU its spec names. The
// restarted agent took the job back without its GPUs and leases, so their GPU looked free and was
// given out again (integration.sched_agent's kill -9 test, once under load).
TEST_F(DaemonJobs, ARestartedAgentTakesBackTheGpusOfAJobItDiedStarting) {
  start();
  const long long id = submit(1);
  ASSERT_TRUE(reaches(id, "running"));
  const auto gpu = job(id)["gpus"][0].get<unsigned>();
  stop();
  {
    auto raw = store::Database::open(options_.db_path, store::Database::Mode::ReadWrite);
    ASSERT_TRUE(raw.ok()) << raw.error().message;
    ASSERT_TRUE(raw->exec(fmt::format("UPDATE sched_job SET state = 'queued', gpus = '', uuids = '', started_unix_ms = "
                                      "NULL, shim_pid = NULL, shim_start = NULL WHERE id = {}",
                                      id))
                    .ok());
  }
  std::filesystem::remove(lease_file(gpu));
  start();
  ASSERT_TRUE(reaches(id, "running")) << job(id).dump();
  EXPECT_EQ(job(id)["gpus"], json::array({gpu})) << job(id).dump();
  EXPECT_TRUE(std::filesystem::exists(lease_file(gpu))) << "its GPU is leased again";
  end_wrapper(id, "exit 0");
  ASSERT_TRUE(reaches(id, "done"));
}

// A part of the agent runs a job of its own (backfill's managed server) through AgentJobs on the
// scheduler's tick: as the account it names (root refused), marked the agent's, a backfill job
// like any; and when a normal job preempts it, the part is told before the job's SIGTERM (the
// stand-in wrapper writes its exit on SIGTERM: none yet when the part is told).
TEST_F(DaemonJobs, AnAgentsJobIsQueuedOnItsTickAndItsPartIsToldBeforeItsPreemption) {
  std::mutex m;
  long long agent_job = 0;
  std::string root_refused;
  bool cancel_now = false;
  std::vector<std::pair<long long, long long>> told;  // (preempted, for)
  bool signalled_before_told = false;
  options_.agent_tick = [&](AgentJobs& jobs) {
    std::lock_guard lock(m);
    if (agent_job == 0) {
      Job as_root;
      as_root.path = "/bin/true";
      as_root.argv = {"/bin/true"};
      auto refused = jobs.submit(as_root);
      root_refused = refused.ok() ? "" : refused.error().message;
      Job server;
      server.uid = 65534;
      server.gid = 65534;
      server.path = "/bin/true";
      server.argv = {"/bin/true", "--port", "1"};
      server.request.n = 2;
      server.backfill = true;
      server.name = "backfill-server-x";
      auto id = jobs.submit(server);
      agent_job = id.ok() ? *id : -1;
    }
    if (cancel_now && jobs.find(agent_job) != nullptr) jobs.cancel(agent_job, "its batches are done");
  };
  options_.before_preempt = [&](const Job& job, const Job& for_job) {
    std::lock_guard lock(m);
    told.emplace_back(job.id, for_job.id);
    signalled_before_told = std::filesystem::exists(job_file(job.id, "exit"));
  };
  start();
  all_gpus_idle();
  now_ += 60'001;
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(m);
    return agent_job != 0;
  }));
  const long long id = agent_job;
  ASSERT_GT(id, 0);
  EXPECT_NE(root_refused.find("no job of its own as root"), std::string::npos) << root_refused;
  ASSERT_TRUE(reaches(id, "running")) << job(id).dump();
  EXPECT_EQ(job(id)["agent"], true);
  EXPECT_EQ(job(id)["uid"], 65534);
  EXPECT_EQ(job(id)["detach"], true);
  ASSERT_TRUE(wrapper_ready(id));
  const long long normal = submit(2);
  ASSERT_TRUE(reaches(normal, "running")) << job(normal).dump() << job(id).dump();
  {
    std::lock_guard lock(m);
    EXPECT_EQ(told, (std::vector<std::pair<long long, long long>>{{id, normal}}));
    EXPECT_FALSE(signalled_before_told) << "the part is told before the job's SIGTERM";
  }
  EXPECT_EQ(job(id)["state"], "queued");
  EXPECT_EQ(job(id)["requeues"], 1);
  {
    std::lock_guard lock(m);
    cancel_now = true;
  }
  EXPECT_TRUE(reaches(id, "cancelled")) << job(id).dump();
  end_wrapper(normal, "exit 0");
  EXPECT_TRUE(reaches(normal, "done"));
}

}  // namespace
}  // namespace tarmac::sched
