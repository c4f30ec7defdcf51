// The agent's socket requests (sched/daemon_requests.cpp), in-process with two fake GPUs: what a
// submission must be before it is queued, the per-user queue cap, the owner's rights (another user
// may not cancel, release or extend), reservations and their lease files, waiting on an ended job,
// and idle leases warned about and reclaimed by the agent's monotonic clock, not the wall clock.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>

#include "tarmac/sched/jobdb.hpp"
#include "tarmac/util/clock.hpp"

#include "daemon_fixture.hpp"

namespace tarmac::sched {
namespace {

using testing::eventually;
using testing::FakeGpus;
using testing::json;

class DaemonRequests : public testing::DaemonTest {
 protected:
  // The answer's failure code ("" when it succeeded) and words.
  static std::string code(const json& answer) { return answer.value("ok", false) ? "" : answer.value("code", "?"); }
  static std::string words(const json& answer) { return answer.value("error", ""); }

  // The fields of GPU `gpu`'s lease file: pid starttime expires_unix_ms job_id user.
  std::vector<std::string> lease_fields(unsigned gpu) const {
    std::ifstream in(lease_file(gpu));
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  }

  // A job (or lease) of other_uid() in the store before the agent starts; its id.
  long long stored(JobKind kind) {
    std::filesystem::create_directories(options_.state_dir);
    auto db = JobDb::open(options_.db_path);
    EXPECT_TRUE(db.ok());
    Job j;
    j.kind = kind;
    j.uid = other_uid();
    j.user = "someone";
    j.argv = {"/bin/true"};
    j.path = "/bin/true";
    j.detach = true;
    j.submitted_ms = 1;
    j.request.min_free_bytes = 1ULL << 50;  // more than any GPU has: it never starts
    j.state = kind == JobKind::Lease ? JobState::Active : JobState::Queued;
    if (kind == JobKind::Lease) j.expires_ms = util::wall_ms() + 3600 * 1000;
    EXPECT_TRUE(db->insert(j).ok());
    return j.id;
  }
};

TEST_F(DaemonRequests, AnUnknownOrMalformedRequestIsRefused) {
  start();
  EXPECT_EQ(code(ask(json{{"op", "format-disk"}})), "invalid");
  auto line = ask_line("[1, 2]");
  ASSERT_TRUE(line.ok());
  EXPECT_EQ(code(json::parse(*line)), "invalid");
  EXPECT_EQ(words(json::parse(*line)), "a request must be one JSON object");
}

TEST_F(DaemonRequests, ASubmissionIsCheckedBeforeAnythingIsQueued) {
  options_.config.max_grace_ms = 60'000;
  start();
  const json base = {{"op", "submit"}, {"argv", {"/bin/true"}}, {"n", 1}, {"detach", true}};
  const auto refused = [&](const json& change) {
    json req = base;
    req.update(change);
    return ask(req);
  };
  struct Case {
    json change;
    const char* words;
  };
  const Case cases[] = {
      {json{{"argv", json::array()}}, "no command: argv must be a non-empty list of strings"},
      {json{{"argv", {"/bin/true", 7}}}, "no command: argv must be a non-empty list of strings"},
      {json{{"argv", {"true"}}}, "the command's path 'true' must be absolute"},
      {json{{"n", 0}}, "-n must be at least 1"},
      {json{{"n", 3}}, "-n 3 asks for more GPUs than there are (2)"},
      {json{{"time_ms", 0}}, "--time must be more than 0"},
      {json{{"grace_ms", -1}}, "--grace must not be negative"},
      {json{{"grace_ms", 120'000}}, "--grace 2m is longer than this agent allows, 1m (scheduler.max_grace)"},
      {json{{"detach", false}}, "an attached job needs the caller's stdout and stderr (or --detach)"},
  };
  for (const auto& c : cases) {
    const json answer = refused(c.change);
    EXPECT_EQ(code(answer), "invalid") << c.change.dump() << ": " << answer.dump();
    EXPECT_EQ(words(answer), c.words) << c.change.dump();
  }
  EXPECT_EQ(ask(json{{"op", "jobs"}, {"all", true}})["jobs"], json::array()) << "a refused submission left a job";
}

TEST_F(DaemonRequests, AUsersQueuedJobsStopAtTheCap) {
  options_.config.user_queued_cap = 2;
  start();
  const json never_starts = {{"op", "submit"},   {"argv", {"/bin/true"}}, {"n", 1},
                             {"detach", true},   {"cwd", "/"},            {"min_free", 1ULL << 50}};
  EXPECT_TRUE(ask_as_user(never_starts).value("ok", false));
  EXPECT_TRUE(ask_as_user(never_starts).value("ok", false));
  const json third = ask_as_user(never_starts);
  EXPECT_EQ(code(third), "busy") << third.dump();
  EXPECT_NE(words(third).find("already has 2 jobs waiting in the queue"), std::string::npos) << third.dump();
}

TEST_F(DaemonRequests, AnotherUserMayNotCancelReleaseOrExtend) {
  const long long queued = stored(JobKind::Job);
  const long long lease = stored(JobKind::Lease);
  start();
  const json cancel = ask_as_user(json{{"op", "cancel"}, {"id", queued}});
  EXPECT_EQ(code(cancel), "denied") << cancel.dump();
  EXPECT_NE(words(cancel).find("only its owner or root may cancel it"), std::string::npos) << cancel.dump();
  EXPECT_EQ(code(ask_as_user(json{{"op", "release"}, {"id", lease}})), "denied");
  EXPECT_EQ(code(ask_as_user(json{{"op", "extend"}, {"id", lease}, {"by_ms", 1000}})), "denied");
  EXPECT_EQ(state_of(queued), "queued");
  EXPECT_EQ(state_of(lease), "active");
  EXPECT_EQ(job(lease)["expires_unix_ms"], job(lease)["expires_unix_ms"]);
}

TEST_F(DaemonRequests, AReservationLeasesFreeGpusUntilReleased) {
  start();
  const json first = ask(json{{"op", "reserve"}, {"n", 1}, {"for_ms", 3'600'000}});
  ASSERT_TRUE(first.value("ok", false)) << first.dump();
  const long long id = first["job"]["id"];
  EXPECT_EQ(first["job"]["state"], "active");
  EXPECT_EQ(first["job"]["gpus"], json::array({0}));
  const auto fields = lease_fields(0);
  ASSERT_EQ(fields.size(), 5u) << "no lease file for GPU 0";
  EXPECT_EQ(fields[0], "0") << "a lease has no owner process";
  EXPECT_EQ(fields[2], std::to_string(first["job"]["expires_unix_ms"].get<long long>()));
  EXPECT_EQ(fields[3], std::to_string(id));
  const json both = ask(json{{"op", "reserve"}, {"n", 2}, {"for_ms", 60'000}});
  EXPECT_EQ(code(both), "busy") << "GPU 0 is leased: " << both.dump();
  EXPECT_NE(words(both).find("no 2 free GPUs: 1 free of 2"), std::string::npos) << both.dump();
  const json released = ask(json{{"op", "release"}, {"id", id}});
  EXPECT_EQ(released["job"]["state"], "released") << released.dump();
  EXPECT_FALSE(std::filesystem::exists(lease_file(0)));
  EXPECT_TRUE(ask(json{{"op", "reserve"}, {"n", 2}, {"for_ms", 60'000}}).value("ok", false));
}

TEST_F(DaemonRequests, ExtendingALeaseMovesItsExpiryInItsFiles) {
  start();
  const json lease = ask(json{{"op", "reserve"}, {"n", 1}, {"for_ms", 60'000}});
  ASSERT_TRUE(lease.value("ok", false));
  const long long id = lease["job"]["id"];
  const long long expires = lease["job"]["expires_unix_ms"];
  EXPECT_EQ(code(ask(json{{"op", "extend"}, {"id", id}, {"by_ms", 0}})), "invalid");
  const json extended = ask(json{{"op", "extend"}, {"id", id}, {"by_ms", 3'600'000}});
  ASSERT_TRUE(extended.value("ok", false)) << extended.dump();
  const long long later = extended["job"]["expires_unix_ms"];
  EXPECT_GE(later, expires + 3'600'000);
  EXPECT_EQ(lease_fields(0).at(2), std::to_string(later));
}

TEST_F(DaemonRequests, LeaseRequestsOnAJobOrAnEndedLeaseAreRefused) {
  start();
  const long long job_id = submit(1, json{{"min_free", 1ULL << 50}});
  const json not_lease = ask(json{{"op", "release"}, {"id", job_id}});
  EXPECT_EQ(code(not_lease), "invalid");
  EXPECT_EQ(words(not_lease), std::to_string(job_id) + " is a job, not a lease");
  const json lease = ask(json{{"op", "reserve"}, {"n", 1}, {"for_ms", 60'000}});
  const long long id = lease["job"]["id"];
  ASSERT_TRUE(ask(json{{"op", "release"}, {"id", id}}).value("ok", false));
  const json again = ask(json{{"op", "release"}, {"id", id}});
  EXPECT_EQ(code(again), "ended");
  EXPECT_EQ(words(again), "lease " + std::to_string(id) + " has already ended (released)");
  EXPECT_EQ(code(ask(json{{"op", "cancel"}, {"id", 999}})), "invalid");
}

TEST_F(DaemonRequests, CancellingAQueuedJobEndsItAndWaitingOnItAnswersAtOnce) {
  start();
  const long long id = submit(1, json{{"min_free", 1ULL << 50}});
  const json cancelled = ask(json{{"op", "cancel"}, {"id", id}});
  EXPECT_EQ(cancelled["job"]["state"], "cancelled") << cancelled.dump();
  EXPECT_EQ(cancelled["job"]["reason"], "cancelled before it started");
  auto c = Connection::connect(options_.socket_path);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->send_line(json{{"op", "wait"}, {"id", id}}.dump()).ok());
  auto answer = c->read_line(20000);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(json::parse(*answer)["job"]["state"], "cancelled");
  EXPECT_FALSE(c->read_line(20000).ok()) << "the agent closes: there is nothing more to wait for";
}

TEST_F(DaemonRequests, AnIdleLeaseIsWarnedAboutThenReclaimedByTheAgentsMonotonicClock) {
  options_.config.lease_idle_limit_ms = 60'000;
  options_.config.lease_idle_grace_ms = 30'000;
  start();
  const json lease = ask(json{{"op", "reserve"}, {"n", 1}, {"for_ms", 3'600'000}});
  ASSERT_TRUE(lease.value("ok", false)) << lease.dump();
  const long long id = lease["job"]["id"];
  // Only the agent's clock moves: a scheduler that timed idleness on the wall clock would wait an hour.
  now_ += 60'001;
  ASSERT_TRUE(eventually([&] { return notices().size() == 1; })) << "no warning after the idle limit";
  EXPECT_FALSE(notices()[0].reclaimed);
  EXPECT_EQ(notices()[0].id, id);
  EXPECT_NE(notices()[0].summary.find("unused for 60"), std::string::npos) << notices()[0].summary;
  EXPECT_EQ(state_of(id), "active") << "reclaimed before its grace";
  now_ += 30'001;
  ASSERT_TRUE(eventually([&] { return notices().size() == 2; })) << "not reclaimed after the grace";
  EXPECT_TRUE(notices()[1].reclaimed);
  EXPECT_TRUE(reaches(id, "reclaimed")) << job(id).dump();
  EXPECT_FALSE(std::filesystem::exists(lease_file(0)));
}

}  // namespace
}  // namespace tarmac::sched
