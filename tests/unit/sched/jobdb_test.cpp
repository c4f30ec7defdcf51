#include "tarmac/sched/jobdb.hpp"

#include <unistd.h>

#include <filesystem>
#include <gtest/gtest.h>

namespace tarmac::sched {
namespace {

class JobDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tarmac-jobdb-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

Job job(uid_t uid, JobState state) {
  Job j;
  j.uid = uid;
  j.user = "u" + std::to_string(uid);
  j.path = "/bin/true";
  j.argv = {"true"};
  j.state = state;
  j.submitted_ms = 1000;
  return j;
}

TEST_F(JobDbTest, IdsAreNeverReusedAndRowsRoundTrip) {
  auto db = JobDb::open(dir_ + "/tarmac.db");
  ASSERT_TRUE(db.ok()) << db.error().message;
  Job a = job(1000, JobState::Queued);
  Job b = job(1001, JobState::Queued);
  ASSERT_TRUE(db->insert(a).ok());
  ASSERT_TRUE(db->insert(b).ok());
  EXPECT_EQ(a.id, 1);
  EXPECT_EQ(b.id, 2);
  b.state = JobState::Running;
  b.gpus = {4, 5};
  b.gpu_uuids = {"GPU-a", "GPU-b"};
  b.started_ms = 2000;
  b.shim_pid = 4242;
  b.outside = {0};
  ASSERT_TRUE(db->save(b).ok());
  a.state = JobState::Done;
  a.exit_code = 3;
  a.ended_ms = 5000;
  ASSERT_TRUE(db->save(a).ok());

  auto open = db->unfinished();
  ASSERT_TRUE(open.ok());
  ASSERT_EQ(open->size(), 1u);
  const Job& back = open->front();
  EXPECT_EQ(back.id, 2);
  EXPECT_EQ(back.state, JobState::Running);
  EXPECT_EQ(back.gpus, (std::vector<unsigned>{4, 5}));
  EXPECT_EQ(back.gpu_uuids, (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_EQ(back.shim_pid, 4242);
  EXPECT_EQ(back.outside, (std::vector<unsigned>{0}));
  EXPECT_EQ(back.argv, (std::vector<std::string>{"true"}));

  // An id taken by a deleted row is not given again (AUTOINCREMENT).
  Job c = job(1000, JobState::Queued);
  ASSERT_TRUE(db->insert(c).ok());
  EXPECT_EQ(c.id, 3);

  auto recent = db->list(false, 4000);
  ASSERT_TRUE(recent.ok());
  EXPECT_EQ(recent->size(), 3u);  // job 1 ended at 5000, after 4000
  auto older = db->list(false, 6000);
  ASSERT_TRUE(older.ok());
  EXPECT_EQ(older->size(), 2u);
}

TEST_F(JobDbTest, UsageCountsGpuTimeInsideTheWindow) {
  auto db = JobDb::open(dir_ + "/tarmac.db");
  ASSERT_TRUE(db.ok());
  Job two = job(1000, JobState::Done);
  two.gpus = {0, 1};
  two.started_ms = 10'000;
  two.ended_ms = 20'000;
  Job one = job(1001, JobState::Done);
  one.gpus = {3};
  one.started_ms = 500;
  one.ended_ms = 15'000;  // half of it before the window
  Job never = job(1002, JobState::Cancelled);  // cancelled while queued: no GPU time
  never.ended_ms = 12'000;
  for (Job* j : {&two, &one, &never}) {
    ASSERT_TRUE(db->insert(*j).ok());
  }
  auto usage = db->usage(7'500, 30'000);
  ASSERT_TRUE(usage.ok()) << usage.error().message;
  EXPECT_EQ((*usage)[1000], 2 * 10'000);
  EXPECT_EQ((*usage)[1001], 7'500);
  EXPECT_EQ(usage->count(1002), 0u);
}

TEST_F(JobDbTest, EventsGoToTheStoresEventTable) {
  auto db = JobDb::open(dir_ + "/tarmac.db");
  ASSERT_TRUE(db.ok());
  EXPECT_TRUE(db->event(123, 2, "lease_idle", "lease 1 unused").ok());
  EXPECT_TRUE(db->event(124, std::nullopt, "lease_reclaimed", "lease 1").ok());
}

}  // namespace
}  // namespace tarmac::sched
