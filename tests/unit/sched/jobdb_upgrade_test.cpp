// A store written by the tarmac before sched_job had stop_reason (version 1, its table copied
// below as that tarmac made it) is upgraded in place when the agent opens it, and the jobs that
// were stopping keep why (issue 14: recovery no longer reads it from the reason's words).
#include <unistd.h>

#include <filesystem>
#include <gtest/gtest.h>

#include "tarmac/sched/jobdb.hpp"
#include "tarmac/store/schema.hpp"
#include "tarmac/store/sqlite.hpp"

namespace tarmac::sched {
namespace {

// sched_job as version 1 created it (src/tarmac/sched/jobdb.cpp before the upgrade).
constexpr const char* kVersion1Table = R"sql(
CREATE TABLE IF NOT EXISTS sched_job(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL, state TEXT NOT NULL, uid INTEGER NOT NULL, user TEXT NOT NULL, name TEXT NOT NULL,
  spec TEXT NOT NULL, gpus TEXT NOT NULL, uuids TEXT NOT NULL,
  submitted_unix_ms INTEGER NOT NULL, started_unix_ms INTEGER, ended_unix_ms INTEGER, expires_unix_ms INTEGER,
  exit_code INTEGER, requeues INTEGER NOT NULL, outside TEXT NOT NULL, reason TEXT NOT NULL, log TEXT NOT NULL,
  shim_pid INTEGER, shim_start INTEGER);
CREATE INDEX IF NOT EXISTS sched_job_by_state ON sched_job(state);
INSERT INTO sched_job(kind, state, uid, user, name, spec, gpus, uuids, submitted_unix_ms, started_unix_ms, requeues,
                      outside, reason, log, shim_pid, shim_start) VALUES
  ('job', 'stopping', 1000, 'amy', 'a', '{}', '4', 'GPU-4', 1000, 2000, 0, '', 'preempted for job 3', '', 4242, 77),
  ('job', 'stopping', 1000, 'amy', 'b', '{}', '5', 'GPU-5', 1000, 2000, 0, '', 'cancelled by root', '', 4343, 78),
  ('job', 'running', 1001, 'bob', 'c', '{}', '6', 'GPU-6', 1000, 2000, 0, '', '', '', 1, 79),
  ('job', 'running', 1001, 'bob', 'd', '{}', '7', 'GPU-7', 1000, 2000, 0, '', '', '', 0, 80);
)sql";

class JobDbUpgradeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tarmac-jobdb-up-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/tarmac.db";
    auto db = store::Database::open(path_, store::Database::Mode::ReadWrite);
    ASSERT_TRUE(db.ok()) << db.error().message;
    ASSERT_TRUE(store::ensure_schema(*db).ok());
    ASSERT_TRUE(db->exec(kVersion1Table).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(JobDbUpgradeTest, AVersionOneStoreIsUpgradedInPlaceAndKeepsWhyJobsStop) {
  auto db = JobDb::open(path_);
  ASSERT_TRUE(db.ok()) << db.error().message;
  auto jobs = db->unfinished();
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  ASSERT_EQ(jobs->size(), 4u);
  EXPECT_EQ((*jobs)[0].stopping_for, StopReason::Preempt);
  EXPECT_EQ((*jobs)[1].stopping_for, StopReason::Cancel);
  EXPECT_EQ((*jobs)[2].stopping_for, StopReason::None);
  // Pids of 1 or less from the store are no wrapper: never signalled, never waited for.
  EXPECT_EQ((*jobs)[0].shim_pid, 4242);
  EXPECT_EQ((*jobs)[2].shim_pid, 0);
  EXPECT_EQ((*jobs)[3].shim_pid, 0);

  // From now on the reason's words play no part: a stop reason is stored as such.
  Job j = (*jobs)[1];
  j.stopping_for = StopReason::Preempt;
  j.reason = "cancelled, or so the words say";
  ASSERT_TRUE(db->save(j).ok());
  auto again = JobDb::open(path_);  // opening an upgraded store again changes nothing
  ASSERT_TRUE(again.ok()) << again.error().message;
  jobs = again->unfinished();
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ((*jobs)[1].stopping_for, StopReason::Preempt);

  auto raw = store::Database::open(path_, store::Database::Mode::ReadWrite);
  ASSERT_TRUE(raw.ok());
  auto version = raw->scalar("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'sched_job_version'");
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(version->value_or(0), 2);
}

TEST_F(JobDbUpgradeTest, AStoreFromANewerTarmacIsRefused) {
  {
    auto raw = store::Database::open(path_, store::Database::Mode::ReadWrite);
    ASSERT_TRUE(raw.ok());
    ASSERT_TRUE(raw->exec("INSERT OR REPLACE INTO meta(key, value) VALUES('sched_job_version', '99')").ok());
  }
  auto db = JobDb::open(path_);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.error().message.find("newer"), std::string::npos) << db.error().message;
}

}  // namespace
}  // namespace tarmac::sched
