#include "tarmac/store/reader.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "tarmac/store/recorder.hpp"
#include "temp_dir.hpp"
#include "store_test_support.hpp"

namespace tarmac::store {
namespace {

using test_support::TempDir;
using test_support::kT0;


GpuSample sample(long long ts_ms, unsigned gpu) {
  GpuSample s;
  s.ts_ms = ts_ms;
  s.gpu = gpu;
  s.util_pct = 50;
  return s;
}

// A store at `path` holding what `fill` adds, flushed.
template <typename Fill>
void write_store(const std::string& path, Fill fill) {
  Recorder rec({path, {}, 1000});
  fill(rec);
  const FlushStatus st = rec.flush();
  ASSERT_TRUE(st.ok) << st.message;
}

TEST(Reader, AMissingFileIsAnErrorNamingThePath) {
  TempDir dir;
  const std::string path = dir / "nothing-here.db";
  auto reader = Reader::open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.error().code, Error::Code::NotFound);
  EXPECT_NE(reader.error().message.find(path), std::string::npos) << reader.error().message;
  // Opening read-only never creates the file.
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Reader, ASqliteFileThatIsNotATarmacStoreIsRefused) {
  TempDir dir;
  const std::string path = dir / "other.db";
  {
    auto db = Database::open(path, Database::Mode::ReadWrite);
    ASSERT_TRUE(db.ok()) << db.error().message;
    ASSERT_TRUE(db->exec("CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes(text) VALUES('hi')").ok());
  }
  auto reader = Reader::open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.error().message.find("not a tarmac store"), std::string::npos) << reader.error().message;
  EXPECT_NE(reader.error().message.find(path), std::string::npos) << reader.error().message;
}

TEST(Reader, AFileThatIsNotSqliteAtAllIsRefused) {
  TempDir dir;
  const std::string path = dir / "text.db";
  std::ofstream(path) << "this is a text file, long enough to have a header's worth of bytes in it, "
                         "and then some more bytes so that SQLite reads a whole page of it\n";
  auto reader = Reader::open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.error().message.find(path), std::string::npos) << reader.error().message;
}

TEST(Reader, AStoreFromANewerTarmacIsRefusedWithAnUpgradeHint) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  write_store(path, [](Recorder&) {});
  {
    auto db = Database::open(path, Database::Mode::ReadWrite);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->exec("UPDATE meta SET value = '99' WHERE key = 'schema_version'").ok());
  }
  auto reader = Reader::open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.error().message.find("upgrade tarmac"), std::string::npos) << reader.error().message;
}

TEST(Reader, AnEmptyStoreHasNoRecordedRange) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  write_store(path, [](Recorder&) {});  // a flush with nothing pending still creates the store
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto recorded = reader->recorded();
  ASSERT_TRUE(recorded.ok()) << recorded.error().message;
  EXPECT_FALSE(recorded->has_value());
  auto gpus = reader->gpus();
  ASSERT_TRUE(gpus.ok());
  EXPECT_TRUE(gpus->empty());
}

TEST(Reader, TheRecordedRangeSpansTheActivity) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  write_store(path, [](Recorder& rec) {
    rec.update(ActivitySpan{0, gpu::Activity::Idle, kT0, kT0 + 5000});
    rec.update(ActivitySpan{1, gpu::Activity::Busy, kT0 - 2000, kT0 + 3000});
    rec.update(ActivitySpan{1, gpu::Activity::Idle, kT0 + 3000, kT0 + 9000});
  });
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto recorded = reader->recorded();
  ASSERT_TRUE(recorded.ok());
  ASSERT_TRUE(recorded->has_value());
  EXPECT_EQ((*recorded)->since_ms, kT0 - 2000);
  EXPECT_EQ((*recorded)->until_ms, kT0 + 9000);
}

TEST(Reader, RangesAreHalfOpenAndTheGpuFilterApplies) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  write_store(path, [](Recorder& rec) {
    for (unsigned g = 0; g < 3; ++g) {
      for (long long t = 0; t < 5; ++t) rec.add(sample(kT0 + t * 1000, g));
      rec.add(ProcessSample{kT0, g, 100 + g, 10, 0});
    }
    rec.add(Event{kT0 + 1000, 0u, "a", ""});
    rec.add(Event{kT0 + 2000, 1u, "b", ""});
  });
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;

  auto some = reader->samples({kT0 + 1000, kT0 + 3000}, {0, 2});
  ASSERT_TRUE(some.ok()) << some.error().message;
  ASSERT_EQ(some->size(), 4U);  // 2 times x 2 GPUs, ordered by time then GPU
  EXPECT_EQ(std::make_pair((*some)[0].ts_ms, (*some)[0].gpu), std::make_pair(kT0 + 1000, 0U));
  EXPECT_EQ(std::make_pair((*some)[1].ts_ms, (*some)[1].gpu), std::make_pair(kT0 + 1000, 2U));
  EXPECT_EQ(std::make_pair((*some)[3].ts_ms, (*some)[3].gpu), std::make_pair(kT0 + 2000, 2U));

  auto processes = reader->process_samples({kT0, kT0 + 1}, {1});
  ASSERT_TRUE(processes.ok());
  ASSERT_EQ(processes->size(), 1U);
  EXPECT_EQ((*processes)[0].pid, 101U);

  auto events = reader->events({kT0 + 1000, kT0 + 2000});
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1U);
  EXPECT_EQ((*events)[0].kind, "a");

  auto hours = reader->rollups(Level::Hours, {kT0, kT0 + 1}, {2});
  ASSERT_TRUE(hours.ok());
  ASSERT_EQ(hours->size(), 1U);
  EXPECT_EQ((*hours)[0].gpu, 2U);
  EXPECT_EQ((*hours)[0].samples, 5);
}

TEST(Reader, SpansThatOverlapTheRangeAreReturnedUnclipped) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  write_store(path, [](Recorder& rec) {
    rec.update(ActivitySpan{0, gpu::Activity::Busy, kT0, kT0 + 10000});          // across the start
    rec.update(ActivitySpan{0, gpu::Activity::Idle, kT0 + 10000, kT0 + 50000});  // across the end
    rec.update(ActivitySpan{0, gpu::Activity::Busy, kT0 + 50000, kT0 + 60000});  // after
    rec.update(ProcessSpan{0, 1, kT0 - 5000, kT0 - 1000, std::nullopt, "", "", "", "", 0});  // before
    rec.update(ProcessSpan{0, 2, kT0 - 5000, kT0 + 45000, std::nullopt, "", "", "", "", 0});  // around
  });
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto activity = reader->activity({kT0 + 5000, kT0 + 40000});
  ASSERT_TRUE(activity.ok());
  ASSERT_EQ(activity->size(), 2U);
  EXPECT_EQ((*activity)[0].start_ms, kT0);
  EXPECT_EQ((*activity)[1].end_ms, kT0 + 50000);
  auto processes = reader->processes({kT0 + 5000, kT0 + 40000});
  ASSERT_TRUE(processes.ok());
  ASSERT_EQ(processes->size(), 1U);
  EXPECT_EQ((*processes)[0].pid, 2U);
  EXPECT_EQ((*processes)[0].first_ms, kT0 - 5000);
}

TEST(Reader, JobSpansOverlappingTheRangeComeBackWithTheirUserAndPartition) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  write_store(path, [](Recorder& rec) {
    rec.update(JobSpan{"77", 1, kT0 - 5000, kT0 + 20000, "alice", "gpu"});
    rec.update(JobSpan{"77", 2, kT0 - 5000, kT0 + 20000, "alice", "gpu"});
    rec.update(JobSpan{"78", 1, kT0 - 9000, kT0 - 6000, "", ""});  // before the range
    rec.update(JobSpan{"77", 1, kT0 - 5000, kT0 + 30000, "alice", "gpu"});  // the same span, later
  });
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto jobs = reader->jobs({kT0, kT0 + 40000});
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  ASSERT_EQ(jobs->size(), 2U);
  EXPECT_EQ((*jobs)[0].job, "77");
  EXPECT_EQ((*jobs)[0].gpu, 1U);
  EXPECT_EQ((*jobs)[0].last_ms, kT0 + 30000) << "an updated span replaces the one written";
  EXPECT_EQ((*jobs)[0].user, "alice");
  EXPECT_EQ((*jobs)[1].partition, "gpu");
}

// reap asks for the spans of every listed (GPU, pid) with one prepared statement: each answer is
// its own query's (its GPU, pid and range), in order, none carried over from the one before.
TEST(Reader, EachSpanQueryIsAnsweredOnItsOwn) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  write_store(path, [](Recorder& rec) {
    rec.update(ProcessSpan{0, 7, kT0, kT0 + 1000, 11, "", "", "", "", 0});
    rec.update(ProcessSpan{0, 7, kT0 + 5000, kT0 + 6000, 12, "", "", "", "", 0});
    rec.update(ProcessSpan{1, 7, kT0, kT0 + 6000, 13, "", "", "", "", 0});
    rec.update(ProcessSpan{0, 8, kT0, kT0 + 6000, 14, "", "", "", "", 0});
  });
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto each = reader->processes_of(std::vector<SpanQuery>{
      {0, 7, {kT0, kT0 + 10000}}, {0, 7, {kT0 + 4000, kT0 + 10000}}, {1, 7, {kT0, kT0 + 10000}}, {1, 8, {kT0, kT0 + 10000}}});
  ASSERT_TRUE(each.ok()) << each.error().message;
  ASSERT_EQ(each->size(), 4U);
  ASSERT_EQ((*each)[0].size(), 2U);
  EXPECT_EQ((*each)[0][0].start_unix, 11);
  EXPECT_EQ((*each)[0][1].start_unix, 12);
  ASSERT_EQ((*each)[1].size(), 1U);
  EXPECT_EQ((*each)[1][0].start_unix, 12);
  ASSERT_EQ((*each)[2].size(), 1U);
  EXPECT_EQ((*each)[2][0].start_unix, 13);
  EXPECT_TRUE((*each)[3].empty());
  // The one-query form answers as the first of them.
  auto one = reader->processes_of(0, 7, {kT0, kT0 + 10000});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 2U);
}

TEST(Reader, ReadsWhileTheRecorderKeepsWriting) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  Recorder rec({path, {}, 1000});
  rec.add(sample(kT0, 0));
  ASSERT_TRUE(rec.flush().ok);
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  rec.add(sample(kT0 + 1000, 0));
  const FlushStatus st = rec.flush();
  ASSERT_TRUE(st.ok) << st.message;  // an open reader does not block the writer (WAL)
  auto samples = reader->samples({0, kT0 + 10000}, {});
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(samples->size(), 2U);
}

}  // namespace
}  // namespace tarmac::store
