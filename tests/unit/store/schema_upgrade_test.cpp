// A store written by the tarmac before process_sample had mem_util_pct (schema version 1, its
// table copied below as that tarmac made it): readers read it as it is (the missing column as
// unknown), the agent's recorder upgrades it in place in one transaction, and from then on per-process
// utilization keeps "unknown" (NULL) and "idle" (0) apart (issue 15).
#include <gtest/gtest.h>

#include "tarmac/store/reader.hpp"
#include "tarmac/store/recorder.hpp"
#include "tarmac/store/schema.hpp"
#include "tarmac/store/sqlite.hpp"
#include "temp_dir.hpp"
#include "store_test_support.hpp"

namespace tarmac::store {
namespace {

using test_support::TempDir;
using test_support::kT0;
using test_support::kAll;


// meta and process_sample as version 1 created them (src/tarmac/store/schema.cpp before the
// upgrade), with one recorded row.
constexpr const char* kVersion1 = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS process_sample(
  ts_ms INTEGER NOT NULL, gpu INTEGER NOT NULL, pid INTEGER NOT NULL,
  mem_used_mib INTEGER, sm_util_pct INTEGER, PRIMARY KEY(ts_ms, gpu, pid)) WITHOUT ROWID;
INSERT INTO meta(key, value) VALUES('schema_version', '1');
INSERT INTO process_sample(ts_ms, gpu, pid, mem_used_mib, sm_util_pct) VALUES(1736154000000, 0, 4242, 6144, 0);
)sql";

std::string make_version_1_store(const TempDir& dir) {
  const std::string path = database_path(dir.path());
  auto db = Database::open(path, Database::Mode::ReadWrite);
  EXPECT_TRUE(db.ok()) << db.error().message;
  EXPECT_TRUE(db->exec(kVersion1).ok());
  return path;
}

long long schema_version(const std::string& path) {
  auto db = Database::open(path, Database::Mode::ReadOnly);
  if (!db.ok()) return -1;
  auto v = db->scalar("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema_version'");
  return v.ok() ? v->value_or(-1) : -1;
}

TEST(SchemaUpgrade, AReaderReadsAVersionOneStoreAsItIsWithMemoryUtilizationUnknown) {
  TempDir dir;
  const std::string path = make_version_1_store(dir);
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto rows = reader->process_samples(kAll, {});
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 1U);
  EXPECT_EQ((*rows)[0].sm_util_pct, 0);
  EXPECT_FALSE((*rows)[0].mem_util_pct.has_value());  // never recorded: unknown, not 0
  EXPECT_EQ(schema_version(path), 1);                  // a reader never writes
  // No job_gpu table before version 5: no jobs, rather than an error.
  auto jobs = reader->jobs(kAll);
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  EXPECT_TRUE(jobs->empty());
}

TEST(SchemaUpgrade, TheRecorderUpgradesAVersionOneStoreInPlaceAndKeepsUnknownApartFromIdle) {
  TempDir dir;
  const std::string path = make_version_1_store(dir);
  {
    Recorder rec({path, {}, 1000});
    rec.add(ProcessSample{kT0 + 1000, 0, 4242, 6144, 0, 0});                       // known idle
    rec.add(ProcessSample{kT0 + 1000, 0, 4343, 30720, std::nullopt, std::nullopt});  // unknown
    rec.add(ProcessSample{kT0 + 1000, 0, 4444, 30720, 92, 38});
    const FlushStatus st = rec.flush();
    ASSERT_TRUE(st.ok) << st.message;
  }
  EXPECT_EQ(schema_version(path), kSchemaVersion);
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto rows = reader->process_samples(kAll, {});
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 4U);
  EXPECT_FALSE((*rows)[0].mem_util_pct.has_value());  // the old row: unknown
  EXPECT_EQ((*rows)[0].mem_used_mib, 6144);
  EXPECT_EQ((*rows)[1].mem_util_pct, 0);
  EXPECT_EQ((*rows)[1].sm_util_pct, 0);
  EXPECT_FALSE((*rows)[2].sm_util_pct.has_value());
  EXPECT_FALSE((*rows)[2].mem_util_pct.has_value());
  EXPECT_EQ((*rows)[3].mem_util_pct, 38);

  auto again = Database::open(path, Database::Mode::ReadWrite);  // opening it again changes nothing
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(ensure_schema(*again).ok());
  EXPECT_EQ(schema_version(path), kSchemaVersion);
}

// process_sample as version 2 created it (before other_util_pct), with one recorded row.
constexpr const char* kVersion2 = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS process_sample(
  ts_ms INTEGER NOT NULL, gpu INTEGER NOT NULL, pid INTEGER NOT NULL,
  mem_used_mib INTEGER, sm_util_pct INTEGER, mem_util_pct INTEGER, PRIMARY KEY(ts_ms, gpu, pid)) WITHOUT ROWID;
INSERT INTO meta(key, value) VALUES('schema_version', '2');
INSERT INTO process_sample(ts_ms, gpu, pid, mem_used_mib, sm_util_pct, mem_util_pct)
  VALUES(1736154000000, 0, 4242, 6144, 0, 0);
)sql";

// Version 2 to 3: process_sample gains other_util_pct (encoder, decoder, JPEG, OFA); a reader reads
// a version 2 store as it is, the recorder upgrades it in place, and old rows keep it unknown.
TEST(SchemaUpgrade, AVersionTwoStoreGainsTheOtherEnginesInPlace) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  {
    auto db = Database::open(path, Database::Mode::ReadWrite);
    ASSERT_TRUE(db.ok()) << db.error().message;
    ASSERT_TRUE(db->exec(kVersion2).ok());
  }
  {
    auto reader = Reader::open(path);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    auto rows = reader->process_samples(kAll, {});
    ASSERT_TRUE(rows.ok()) << rows.error().message;
    ASSERT_EQ(rows->size(), 1U);
    EXPECT_EQ((*rows)[0].mem_util_pct, 0);
    EXPECT_FALSE((*rows)[0].other_util_pct.has_value());
    EXPECT_EQ(schema_version(path), 2);  // a reader never writes
  }
  {
    Recorder rec({path, {}, 1000});
    rec.add(ProcessSample{kT0 + 1000, 0, 4242, 6144, 0, 0, 70});  // an NVENC job at SM 0 %
    const FlushStatus st = rec.flush();
    ASSERT_TRUE(st.ok) << st.message;
  }
  EXPECT_EQ(schema_version(path), kSchemaVersion);
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto rows = reader->process_samples(kAll, {});
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 2U);
  EXPECT_FALSE((*rows)[0].other_util_pct.has_value());  // the old row: unknown, never 0
  EXPECT_EQ((*rows)[1].other_util_pct, 70);
}

constexpr const char* kVersion3 = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS process(
  gpu INTEGER NOT NULL, pid INTEGER NOT NULL, first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL,
  start_unix INTEGER, user TEXT, command TEXT, container TEXT, slurm_job TEXT,
  mem_used_mib_max INTEGER NOT NULL, PRIMARY KEY(gpu, pid, first_ms)) WITHOUT ROWID;
INSERT INTO meta(key, value) VALUES('schema_version', '3');
INSERT INTO process(gpu, pid, first_ms, last_ms, start_unix, user, command, container, slurm_job, mem_used_mib_max)
  VALUES(0, 4242, 1736154000000, 1736154060000, 1736153990, 'alice', 'python', NULL, NULL, 6144);
)sql";

// Version 3 to 4: process gains listed_after_start (whether the agent saw the listing begin while
// the process had the pid: reap's proof that it is not a stale context's). A reader reads a
// version 3 store as it is, the recorder upgrades it in place, and an old span stays unproven.
TEST(SchemaUpgrade, AVersionThreeStoreGainsTheListingProofInPlaceAndOldSpansStayUnproven) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  {
    auto db = Database::open(path, Database::Mode::ReadWrite);
    ASSERT_TRUE(db.ok()) << db.error().message;
    ASSERT_TRUE(db->exec(kVersion3).ok());
  }
  {
    auto reader = Reader::open(path);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    auto spans = reader->processes(kAll);
    ASSERT_TRUE(spans.ok()) << spans.error().message;
    ASSERT_EQ(spans->size(), 1U);
    EXPECT_FALSE((*spans)[0].listed_after_start);
    EXPECT_EQ(schema_version(path), 3);  // a reader never writes
  }
  {
    Recorder rec({path, {}, 1000});
    ProcessSpan span{0, 5151, kT0 + 1000, kT0 + 2000, kT0 / 1000 - 60, "bob", "a.out", "", "", 100};
    span.listed_after_start = true;
    rec.update(span);
    const FlushStatus st = rec.flush();
    ASSERT_TRUE(st.ok) << st.message;
  }
  EXPECT_EQ(schema_version(path), kSchemaVersion);
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto spans = reader->processes(kAll);
  ASSERT_TRUE(spans.ok()) << spans.error().message;
  ASSERT_EQ(spans->size(), 2U);
  for (const auto& s : *spans) EXPECT_EQ(s.listed_after_start, s.pid == 5151) << s.pid;
}

TEST(SchemaUpgrade, AStoreOfANewerSchemaIsRefused) {
  TempDir dir;
  const std::string path = make_version_1_store(dir);
  {
    auto db = Database::open(path, Database::Mode::ReadWrite);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->exec("UPDATE meta SET value = '99' WHERE key = 'schema_version'").ok());
  }
  auto db = Database::open(path, Database::Mode::ReadWrite);
  ASSERT_TRUE(db.ok());
  auto r = ensure_schema(*db);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("newer than this tarmac reads"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace tarmac::store
