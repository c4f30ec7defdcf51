// A lease (reserve) that backfill holds the GPUs for (sched/daemon_requests.cpp, the pass in
// daemon_pass.cpp), in-process with two fake GPUs and a stand-in for the job wrapper: the backfill
// jobs are preempted and the lease is given once they end, its client hearing "started"; no backfill
// starts while it waits; a reserve that names no wait, or that would not fit even without backfill,
// is refused at once; a lease not given within its wait, or whose client goes away, is withdrawn.
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <gtest/gtest.h>

#include "daemon_fixture.hpp"

namespace tarmac::sched {
namespace {

using testing::eventually;
using testing::json;

class DaemonLeases : public testing::DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    options_.config.backfill_idle_ms = 60'000;
  }

  // Starts the agent with both GPUs idle for long enough for backfill.
  void start_idle() {
    start();
    testing::FakeGpus gpus(2);
    const auto snap = gpus.snapshot({});
    daemon_->observe(*snap, {{0, gpu::Activity::Idle}, {1, gpu::Activity::Idle}});
    now_ += 60'001;
  }
  // A backfill job of `n` GPUs, running (its wrapper ready for SIGTERM); its id.
  long long running_backfill(unsigned n) {
    const long long id = submit(n, json{{"backfill", true}});
    EXPECT_TRUE(reaches(id, "running")) << job(id).dump();
    EXPECT_TRUE(wrapper_ready(id));
    return id;
  }
  // Backfill job `id` does not end on SIGTERM (a server slow to yield).
  void slow_to_yield(long long id) { std::ofstream(job_file(id, "hold")) << "hold"; }

  // A reserve of `n` GPUs for an hour on its own connection, which stays open while the lease waits.
  struct Reserve {
    Connection conn;
    json answer;
    // The next event the agent sends about the lease (null when none within the bound).
    json next() {
      auto line = conn.read_line(20000);
      return line.ok() ? json::parse(*line, nullptr, false) : json();
    }
  };
  Reserve reserve(unsigned n, long long wait_ms) {
    Reserve r;
    auto c = Connection::connect(options_.socket_path);
    EXPECT_TRUE(c.ok());
    if (!c.ok()) return r;
    r.conn = std::move(*c);
    json req = {{"op", "reserve"}, {"n", n}, {"for_ms", 3'600'000}};
    if (wait_ms > 0) req["wait_ms"] = wait_ms;
    EXPECT_TRUE(r.conn.send_line(req.dump()).ok());
    r.answer = r.next();
    return r;
  }
  // The job or lease that GPU `gpu`'s lease file names (its fourth field); "" when there is none.
  std::string leased_to(unsigned gpu) const {
    std::ifstream in(lease_file(gpu));
    std::string field;
    for (int i = 0; i < 4 && in >> field; ++i) {
    }
    return in ? field : "";
  }
};

TEST_F(DaemonLeases, AReserveThatBackfillHoldsTheGpusForPreemptsItAndIsGivenTheLease) {
  start_idle();
  const long long backfill = running_backfill(2);
  Reserve r = reserve(1, 30'000);
  ASSERT_TRUE(r.answer.value("ok", false)) << "refused although backfill could yield: " << r.answer.dump();
  const json waiting = r.answer["job"];
  EXPECT_EQ(waiting["kind"], "lease");
  EXPECT_EQ(waiting["state"], "queued");
  EXPECT_EQ(waiting["reason"], fmt::format("waiting for backfill job {} to yield GPU 0", backfill));
  // The backfill job's wrapper gets SIGTERM and ends; then the lease is given and its client told.
  const json started = r.next();
  EXPECT_EQ(started.value("event", ""), "started") << started.dump();
  const json lease = started.value("job", json::object());
  EXPECT_EQ(lease["id"], waiting["id"]);
  EXPECT_EQ(lease["state"], "active");
  EXPECT_EQ(lease["gpus"], json::array({0}));
  EXPECT_EQ(leased_to(0), std::to_string(lease["id"].get<long long>()));
  const json requeued = job(backfill);
  EXPECT_EQ(requeued["state"], "queued") << requeued.dump();
  EXPECT_EQ(requeued["requeues"], 1);
  EXPECT_EQ(state_of(lease["id"]), "active");
}

TEST_F(DaemonLeases, WaitingLeasesCountAgainstThePerUserGpuCap) {
  // One user (the test's) holds two GPUs with a backfill job slow to yield, under a cap of three: one
  // lease may wait for it; a second would be a fourth GPU.
  options_.config.user_gpu_cap = 3;
  start_idle();
  const long long backfill = running_backfill(2);
  slow_to_yield(backfill);
  Reserve r = reserve(1, 30'000);
  ASSERT_TRUE(r.answer.value("ok", false)) << r.answer.dump();
  EXPECT_EQ(r.answer["job"]["state"], "queued");
  const json again = reserve(1, 30'000).answer;
  EXPECT_EQ(again.value("code", ""), "busy") << again.dump();
  EXPECT_NE(again.value("error", "").find("holds 2 GPUs and waits for 1 more of the per-user cap of 3"),
            std::string::npos)
      << again.dump();
  end_wrapper(backfill, "exit 0");
}

TEST_F(DaemonLeases, AReserveThatNamesNoWaitIsRefusedAtOnceAndBackfillKeepsItsGpus) {
  start_idle();
  const long long backfill = running_backfill(2);
  const json answer = reserve(1, 0).answer;
  EXPECT_EQ(answer.value("code", ""), "busy") << answer.dump();
  EXPECT_NE(answer.value("error", "").find("backfill could yield GPU 0: reserve --wait D takes it back"),
            std::string::npos)
      << answer.dump();
  EXPECT_EQ(state_of(backfill), "running");
  EXPECT_EQ(job(backfill)["requeues"], 0);
}

TEST_F(DaemonLeases, AReserveThatWouldNotFitEvenWithoutBackfillIsRefusedAtOnce) {
  start_idle();
  const long long normal = submit(1);
  ASSERT_TRUE(reaches(normal, "running"));
  const long long backfill = running_backfill(1);
  EXPECT_EQ(job(backfill)["gpus"], json::array({1}));
  const json answer = reserve(2, 30'000).answer;
  EXPECT_EQ(answer.value("code", ""), "busy") << answer.dump();
  EXPECT_EQ(state_of(backfill), "running") << "preempted for a lease that could not be had";
  const json jobs = ask(json{{"op", "jobs"}, {"all", true}})["jobs"];
  EXPECT_EQ(jobs.size(), 2u) << "a lease that could not be given is recorded: " << jobs.dump();
}

TEST_F(DaemonLeases, NoBackfillStartsWhileALeaseWaitsForBackfillToYield) {
  start_idle();
  const long long first = running_backfill(1);
  const long long second = running_backfill(1);
  slow_to_yield(second);
  Reserve r = reserve(2, 30'000);
  ASSERT_TRUE(r.answer.value("ok", false)) << r.answer.dump();
  EXPECT_EQ(r.answer["job"]["reason"],
            fmt::format("waiting for backfill jobs {},{} to yield GPUs 0,1", first, second));
  // The first yields at once and waits in the queue again: its GPU stays free for the lease, which
  // waits for the second.
  ASSERT_TRUE(eventually([&] { return job(first)["requeues"] == 1; })) << job(first).dump();
  EXPECT_EQ(state_of(second), "stopping");
  end_wrapper(second, "exit 0");
  const json started = r.next();
  ASSERT_EQ(started.value("event", ""), "started") << started.dump();
  EXPECT_EQ(started["job"]["gpus"], json::array({0, 1}));
  const json requeued = job(first);
  EXPECT_EQ(requeued["state"], "queued");
  EXPECT_EQ(requeued["requeues"], 1) << "it started again while the lease waited: " << requeued.dump();
}

TEST_F(DaemonLeases, ALeaseNotGivenWithinItsWaitIsWithdrawnAndItsClientTold) {
  start_idle();
  const long long backfill = running_backfill(2);
  slow_to_yield(backfill);
  Reserve r = reserve(1, 30'000);
  ASSERT_TRUE(r.answer.value("ok", false)) << r.answer.dump();
  ASSERT_TRUE(reaches(backfill, "stopping"));
  now_ += 30'001;  // only the agent's clock moves
  const json ended = r.next();
  EXPECT_EQ(ended.value("event", ""), "ended") << ended.dump();
  EXPECT_EQ(ended["job"]["state"], "cancelled");
  EXPECT_EQ(ended["job"]["reason"],
            fmt::format("not given within 30s: still waiting for backfill job {} to yield GPU 0", backfill));
  EXPECT_FALSE(r.conn.read_line(20000).ok()) << "the agent closes: there is nothing more to wait for";
}

TEST_F(DaemonLeases, ALeaseWhoseClientGoesAwayIsWithdrawn) {
  start_idle();
  const long long backfill = running_backfill(2);
  slow_to_yield(backfill);
  long long id = 0;
  {
    Reserve r = reserve(1, 30'000);
    ASSERT_TRUE(r.answer.value("ok", false)) << r.answer.dump();
    id = r.answer["job"]["id"];
    ASSERT_TRUE(reaches(backfill, "stopping"));
  }  // the client hangs up
  ASSERT_TRUE(reaches(id, "cancelled")) << job(id).dump();
  EXPECT_EQ(job(id)["reason"], "withdrawn before it was given: nobody waits for it any more");
}

TEST_F(DaemonLeases, AWaitingLeaseCanBeCancelledButNotExtended) {
  start_idle();
  slow_to_yield(running_backfill(2));
  Reserve r = reserve(1, 30'000);
  ASSERT_TRUE(r.answer.value("ok", false)) << r.answer.dump();
  const long long id = r.answer["job"]["id"];
  const json refused = ask(json{{"op", "extend"}, {"id", id}, {"by_ms", 60'000}});
  EXPECT_EQ(refused.value("code", ""), "invalid") << refused.dump();
  const json cancelled = ask(json{{"op", "cancel"}, {"id", id}});
  EXPECT_EQ(cancelled["job"]["state"], "cancelled") << cancelled.dump();
  EXPECT_EQ(cancelled["job"]["reason"], "cancelled before it was given");
  const json ended = r.next();
  EXPECT_EQ(ended.value("event", ""), "ended") << ended.dump();
}

}  // namespace
}  // namespace tarmac::sched
