// A store written before backfill existed (recorder schema 3, a job in sched_job, no backfill
// tables) gains the backfill tables in place when the agent opens it, keeping what it held; tables
// of a newer tarmac are refused rather than written over.
#include <gtest/gtest.h>

#include <filesystem>

#include "tarmac/backfill/batch_db.hpp"
#include "tarmac/store/schema.hpp"
#include "tarmac/store/sqlite.hpp"

namespace tarmac::backfill {
namespace {

class BatchDbUpgradeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tarmac-backfill-up-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/tarmac.db";
    auto db = store::Database::open(path_, store::Database::Mode::ReadWrite);
    ASSERT_TRUE(db.ok()) << db.error().message;
    // The store as the tarmac before backfill left it: schema 3 and an event.
    ASSERT_TRUE(store::ensure_schema(*db).ok());
    ASSERT_TRUE(db->exec("INSERT INTO event(ts_ms, gpu, kind, detail) VALUES(1, 0, 'xid', '79')").ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(BatchDbUpgradeTest, AStoreWithoutBackfillTablesGainsThemInPlaceAndKeepsItsRows) {
  {
    auto db = BatchDb::open(path_);
    ASSERT_TRUE(db.ok()) << db.error().message;
    Batch b;
    b.user = "amy";
    b.model = "m";
    ASSERT_TRUE(db->create(b, {{"a", Endpoint::Completions, R"({"model":"m","prompt":"x"})", 1}}).ok());
    EXPECT_EQ(b.id, 1);
  }
  auto db = store::Database::open(path_, store::Database::Mode::ReadOnly);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(db->scalar("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'backfill_version'")->value_or(0),
            kBatchTablesVersion);
  EXPECT_EQ(db->scalar("SELECT count(*) FROM event")->value_or(0), 1);
  EXPECT_EQ(db->scalar("SELECT count(*) FROM backfill_request WHERE state = 'pending'")->value_or(0), 1);
  EXPECT_TRUE(store::check_schema(*db).ok());  // readers of the recorder's tables still read it
  // Opening again changes nothing.
  auto again = BatchDb::open(path_);
  ASSERT_TRUE(again.ok());
  auto batches = again->batches(BatchDb::Which::All);
  ASSERT_TRUE(batches.ok());
  EXPECT_EQ(batches->size(), 1U);
}

TEST_F(BatchDbUpgradeTest, Version1TablesGainBodyBytesAndDropTheBodiesOfEndedBatches) {
  {
    auto db = BatchDb::open(path_);
    ASSERT_TRUE(db.ok()) << db.error().message;
    Batch open_batch, ended_batch;
    open_batch.model = ended_batch.model = "m";
    ASSERT_TRUE(db->create(open_batch, {{"a", Endpoint::Completions, "0123456789", 1}}).ok());
    ASSERT_TRUE(db->create(ended_batch, {{"b", Endpoint::Completions, "01234", 1}}).ok());
    // Back to the tables as version 1 wrote them: no body_bytes or birth time, an ended batch's
    // bodies kept.
    auto& raw = db->database();
    ASSERT_TRUE(raw.exec("UPDATE backfill_batch SET state = 'cancelled' WHERE id = 2").ok());
    ASSERT_TRUE(raw.exec("ALTER TABLE backfill_batch DROP COLUMN body_bytes").ok());
    ASSERT_TRUE(raw.exec("ALTER TABLE backfill_batch DROP COLUMN output_btime_ns").ok());
    ASSERT_TRUE(raw.exec("UPDATE meta SET value = '1' WHERE key = 'backfill_version'").ok());
  }
  auto db = BatchDb::open(path_);
  ASSERT_TRUE(db.ok()) << db.error().message;
  auto& raw = db->database();
  EXPECT_EQ(raw.scalar("SELECT body_bytes FROM backfill_batch WHERE id = 1")->value_or(-1), 10);
  EXPECT_EQ(raw.scalar("SELECT count(*) FROM backfill_request WHERE batch = 2 AND body = ''")->value_or(-1), 1);
  auto held = db->holding(std::nullopt);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->batches, 1);
  EXPECT_EQ(held->body_bytes, 10);
}

TEST_F(BatchDbUpgradeTest, TablesOfANewerTarmacAreRefusedAndLeftAlone) {
  {
    auto db = store::Database::open(path_, store::Database::Mode::ReadWrite);
    ASSERT_TRUE(db->exec("INSERT INTO meta(key, value) VALUES('backfill_version', '9')").ok());
  }
  auto db = BatchDb::open(path_);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.error().message.find("newer than this tarmac reads"), std::string::npos) << db.error().message;
  auto raw = store::Database::open(path_, store::Database::Mode::ReadOnly);
  EXPECT_EQ(raw->scalar("SELECT count(*) FROM sqlite_schema WHERE name = 'backfill_batch'")->value_or(1), 0);
}

TEST_F(BatchDbUpgradeTest, PendingRequestsAreTakenInInputOrderAndCounted) {
  auto db = BatchDb::open(path_);
  ASSERT_TRUE(db.ok());
  Batch b;
  b.model = "m";
  std::vector<BatchRequest> requests;
  for (int i = 0; i < 5; ++i) requests.push_back({"r" + std::to_string(i), Endpoint::Completions, "{}", 1});
  ASSERT_TRUE(db->create(b, requests).ok());
  auto first = db->take_pending(b.id, 2, 100);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 2U);
  EXPECT_EQ((*first)[1].row.custom_id, "r1");
  EXPECT_EQ((*first)[1].row.attempts, 1);
  ASSERT_TRUE(db->back_to_pending(b.id, 0, "interrupted").ok());
  auto p = db->progress(b.id);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pending, 4);
  EXPECT_EQ(p->in_flight, 1);
  auto again = db->take_pending(b.id, 1, 200);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].row.custom_id, "r0");
  EXPECT_EQ((*again)[0].row.attempts, 2);
}

}  // namespace
}  // namespace tarmac::backfill
