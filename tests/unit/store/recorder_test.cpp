#include "tarmac/store/recorder.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "tarmac/store/reader.hpp"
#include "temp_dir.hpp"
#include "store_test_support.hpp"

namespace tarmac::store {
namespace {

using test_support::TempDir;
using test_support::kAll;

constexpr long long kHour0 = 1736154000000;  // Monday 2025-01-06 09:00:00 UTC, an hour boundary
constexpr long long kMinute = 60LL * 1000;
constexpr long long kHour = 60 * kMinute;

// The comparable fields of each row type (the structs have no operator==), copied so that a
// failure prints values.
auto fields(const GpuSample& s) {
  return std::make_tuple(s.ts_ms, s.gpu, s.util_pct, s.mem_util_pct, s.mem_used_mib, s.power_w, s.temp_c, s.sm_mhz,
                  s.mem_mhz, s.enc_pct, s.dec_pct, s.activity);
}
auto fields(const GpuInfo& g) { return std::make_tuple(g.gpu, g.uuid, g.name, g.pci_bus_id, g.mem_total_mib); }
auto fields(const ProcessSample& p) {
  return std::make_tuple(p.ts_ms, p.gpu, p.pid, p.mem_used_mib, p.sm_util_pct, p.mem_util_pct, p.other_util_pct);
}
auto fields(const ProcessSpan& p) {
  return std::make_tuple(p.gpu, p.pid, p.first_ms, p.last_ms, p.start_unix, p.user, p.command, p.container, p.slurm_job,
                  p.mem_used_mib_max);
}
auto fields(const ActivitySpan& a) { return std::make_tuple(a.gpu, a.activity, a.start_ms, a.end_ms); }
auto fields(const Event& e) { return std::make_tuple(e.ts_ms, e.gpu, e.kind, e.detail); }

GpuSample sample(long long ts_ms, unsigned gpu, long long util, long long mem_used_mib = 1000,
                 gpu::Activity activity = gpu::Activity::Busy) {
  GpuSample s;
  s.ts_ms = ts_ms;
  s.gpu = gpu;
  s.util_pct = util;
  s.mem_util_pct = util / 2;
  s.mem_used_mib = mem_used_mib;
  s.power_w = 100 + util;
  s.temp_c = 40 + util / 10;
  s.activity = activity;
  return s;
}

Reader open_reader(const std::string& path) {
  auto reader = Reader::open(path);
  if (!reader.ok()) ADD_FAILURE() << reader.error().message;
  return std::move(reader).value();
}

// The first column of the first row of `sql` as text, on a connection of its own.
std::string pragma_text(const std::string& path, const std::string& sql) {
  auto db = Database::open(path, Database::Mode::ReadWrite);
  if (!db.ok()) return "open failed: " + db.error().message;
  auto st = db->prepare(sql);
  if (!st.ok()) return "prepare failed: " + st.error().message;
  auto row = st->step();
  if (!row.ok() || !*row) return "no row";
  return st->text(0);
}

TEST(Recorder, AFlushIsReadBackFieldForFieldWithNullsForMissingValues) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  Recorder rec({path, {}, 1000});

  const GpuInfo full{0, "GPU-aaaa", "NVIDIA H100 80GB HBM3", "00000000:07:00.0", 81559};
  const GpuInfo sparse{1, "GPU-bbbb", "NVIDIA A100", "", std::nullopt};
  rec.add(full, kHour0);
  rec.add(sparse, kHour0);

  GpuSample all = sample(kHour0, 0, 97, 70000);
  all.sm_mhz = 1980;
  all.mem_mhz = 2619;
  all.enc_pct = 3;
  all.dec_pct = 4;
  GpuSample none;  // nothing supported: every value NULL
  none.ts_ms = kHour0;
  none.gpu = 1;
  none.activity = gpu::Activity::Fault;
  rec.add(all);
  rec.add(none);

  const ProcessSample p1{kHour0, 0, 4242, 69000, 95, 41, 17};
  const ProcessSample p2{kHour0, 0, 4343, std::nullopt, std::nullopt};
  rec.add(p1);
  rec.add(p2);

  const Event on_gpu{kHour0, 0u, "process-start", "pid 4242 user alice: python train.py (69000 MiB)"};
  const Event fleet{kHour0 + 1, std::nullopt, "agent-start", ""};
  rec.add(on_gpu);
  rec.add(fleet);

  const ActivitySpan busy{0, gpu::Activity::Busy, kHour0, kHour0 + 5000};
  const ActivitySpan fault{1, gpu::Activity::Fault, kHour0, kHour0 + 5000};
  rec.update(ActivitySpan{0, gpu::Activity::Busy, kHour0, kHour0});  // replaced by the later update
  rec.update(busy);
  rec.update(fault);

  const ProcessSpan job{0, 4242, kHour0, kHour0 + 5000, 1736150000, "alice", "python train.py", "docker:0123456789ab",
                        "77", 69000};
  const ProcessSpan bare{0, 4343, kHour0, kHour0, std::nullopt, "", "", "", "", 0};
  rec.update(job);
  rec.update(bare);

  rec.add(SlowSample{kHour0, 0, 1000, 2000, 55.5, std::nullopt, 12.25, 40.0});

  EXPECT_EQ(rec.pending_rows(), 13U);
  const FlushStatus st = rec.flush();
  ASSERT_TRUE(st.ok) << st.message;
  EXPECT_EQ(st.written, 13U);
  EXPECT_EQ(st.pending, 0U);
  EXPECT_EQ(rec.pending_rows(), 0U);
  EXPECT_TRUE(rec.is_open());

  Reader reader = open_reader(path);
  auto gpus = reader.gpus();
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 2U);
  EXPECT_EQ(fields((*gpus)[0]), fields(full));
  EXPECT_EQ(fields((*gpus)[1]), fields(sparse));

  auto samples = reader.samples(kAll, {});
  ASSERT_TRUE(samples.ok()) << samples.error().message;
  ASSERT_EQ(samples->size(), 2U);
  EXPECT_EQ(fields((*samples)[0]), fields(all));
  EXPECT_EQ(fields((*samples)[1]), fields(none));

  auto processes = reader.process_samples(kAll, {});
  ASSERT_TRUE(processes.ok()) << processes.error().message;
  ASSERT_EQ(processes->size(), 2U);
  EXPECT_EQ(fields((*processes)[0]), fields(p1));
  EXPECT_EQ(fields((*processes)[1]), fields(p2));

  auto events = reader.events(kAll);
  ASSERT_TRUE(events.ok()) << events.error().message;
  ASSERT_EQ(events->size(), 2U);
  EXPECT_EQ(fields((*events)[0]), fields(on_gpu));
  EXPECT_EQ(fields((*events)[1]), fields(fleet));

  auto activity = reader.activity(kAll);
  ASSERT_TRUE(activity.ok()) << activity.error().message;
  ASSERT_EQ(activity->size(), 2U);
  EXPECT_EQ(fields((*activity)[0]), fields(busy));
  EXPECT_EQ(fields((*activity)[1]), fields(fault));

  auto spans = reader.processes(kAll);
  ASSERT_TRUE(spans.ok()) << spans.error().message;
  ASSERT_EQ(spans->size(), 2U);
  std::sort(spans->begin(), spans->end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  EXPECT_EQ(fields((*spans)[0]), fields(job));
  EXPECT_EQ(fields((*spans)[1]), fields(bare));

  // Missing values are NULL in the file itself, not zeros or empty strings.
  EXPECT_EQ(pragma_text(path, "SELECT count(*) FROM gpu_sample WHERE gpu = 1 AND util_pct IS NULL AND "
                              "mem_util_pct IS NULL AND mem_used_mib IS NULL AND power_w IS NULL AND temp_c IS NULL "
                              "AND sm_mhz IS NULL AND mem_mhz IS NULL AND enc_pct IS NULL AND dec_pct IS NULL"),
            "1");
  EXPECT_EQ(pragma_text(path, "SELECT count(*) FROM gpu WHERE gpu = 1 AND pci_bus_id IS NULL AND mem_total_mib IS NULL"),
            "1");
  EXPECT_EQ(pragma_text(path, "SELECT count(*) FROM process WHERE pid = 4343 AND start_unix IS NULL AND user IS NULL"),
            "1");
  EXPECT_EQ(pragma_text(path, "SELECT count(*) FROM event WHERE kind = 'agent-start' AND gpu IS NULL"), "1");
  EXPECT_EQ(pragma_text(path, "SELECT sm_active_pct || '/' || ifnull(sm_occupancy_pct, 'NULL') || '/' || "
                              "tensor_active_pct FROM gpu_slow_sample"),
            "55.5/NULL/12.25");
}

TEST(Recorder, ASpanUpdatedInALaterFlushIsReplacedNotDuplicated) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  Recorder rec({path, {}, 1000});
  rec.update(ActivitySpan{0, gpu::Activity::Idle, kHour0, kHour0 + 10000});
  rec.update(ProcessSpan{0, 7, kHour0, kHour0 + 10000, std::nullopt, "bob", "a.out", "", "", 100});
  ASSERT_TRUE(rec.flush().ok);
  rec.update(ActivitySpan{0, gpu::Activity::Idle, kHour0, kHour0 + 20000});
  rec.update(ProcessSpan{0, 7, kHour0, kHour0 + 20000, std::nullopt, "bob", "a.out", "", "", 300});
  ASSERT_TRUE(rec.flush().ok);

  Reader reader = open_reader(path);
  auto activity = reader.activity(kAll);
  ASSERT_TRUE(activity.ok());
  ASSERT_EQ(activity->size(), 1U);
  EXPECT_EQ((*activity)[0].end_ms, kHour0 + 20000);
  auto spans = reader.processes(kAll);
  ASSERT_TRUE(spans.ok());
  ASSERT_EQ(spans->size(), 1U);
  EXPECT_EQ((*spans)[0].last_ms, kHour0 + 20000);
  EXPECT_EQ((*spans)[0].mem_used_mib_max, 300);
}

TEST(Recorder, SamplesInTwoMinutesOfOneHourGiveTwoMinuteRowsAndOneHourRow) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  Recorder rec({path, {}, 1000});
  GpuSample a = sample(kHour0 + 10 * 1000, 0, 10, 1000);  // 09:00:10
  GpuSample b = sample(kHour0 + 40 * 1000, 0, 30, 3000);  // 09:00:40
  GpuSample c = sample(kHour0 + kMinute + 20 * 1000, 0, 50, 2000);  // 09:01:20
  a.temp_c = 60;
  b.temp_c = 71;
  c.temp_c = 65;
  rec.add(a);
  rec.add(b);
  rec.add(c);
  ASSERT_TRUE(rec.flush().ok);

  Reader reader = open_reader(path);
  auto minutes = reader.rollups(Level::Minutes, kAll, {});
  ASSERT_TRUE(minutes.ok()) << minutes.error().message;
  ASSERT_EQ(minutes->size(), 2U);
  const Rollup& m0 = (*minutes)[0];
  EXPECT_EQ(m0.ts_ms, kHour0);
  EXPECT_EQ(m0.gpu, 0U);
  EXPECT_EQ(m0.samples, 2);
  EXPECT_DOUBLE_EQ(m0.util_avg, 20.0);
  EXPECT_EQ(m0.util_max, 30);
  EXPECT_DOUBLE_EQ(m0.mem_util_avg, 10.0);  // (5 + 15) / 2
  EXPECT_DOUBLE_EQ(m0.mem_used_mib_avg, 2000.0);
  EXPECT_EQ(m0.mem_used_mib_max, 3000);
  EXPECT_DOUBLE_EQ(m0.power_w_avg, 120.0);  // (110 + 130) / 2
  EXPECT_EQ(m0.temp_c_max, 71);
  const Rollup& m1 = (*minutes)[1];
  EXPECT_EQ(m1.ts_ms, kHour0 + kMinute);
  EXPECT_EQ(m1.samples, 1);
  EXPECT_DOUBLE_EQ(m1.util_avg, 50.0);
  EXPECT_EQ(m1.util_max, 50);
  EXPECT_EQ(m1.temp_c_max, 65);

  auto hours = reader.rollups(Level::Hours, kAll, {});
  ASSERT_TRUE(hours.ok()) << hours.error().message;
  ASSERT_EQ(hours->size(), 1U);
  const Rollup& h = (*hours)[0];
  EXPECT_EQ(h.ts_ms, kHour0);
  EXPECT_EQ(h.samples, 3);
  EXPECT_DOUBLE_EQ(h.util_avg, 30.0);
  EXPECT_EQ(h.util_max, 50);
  EXPECT_DOUBLE_EQ(h.mem_used_mib_avg, 2000.0);
  EXPECT_EQ(h.mem_used_mib_max, 3000);
  EXPECT_EQ(h.temp_c_max, 71);
}

TEST(Recorder, RollupsAreKeptPerGpu) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  Recorder rec({path, {}, 1000});
  rec.add(sample(kHour0, 0, 100));
  rec.add(sample(kHour0, 1, 0));
  rec.add(sample(kHour0 + kHour, 1, 40));  // the next hour
  ASSERT_TRUE(rec.flush().ok);

  Reader reader = open_reader(path);
  auto hours = reader.rollups(Level::Hours, kAll, {});
  ASSERT_TRUE(hours.ok());
  ASSERT_EQ(hours->size(), 3U);
  EXPECT_EQ(std::make_tuple((*hours)[0].ts_ms, (*hours)[0].gpu, (*hours)[0].util_max), std::make_tuple(kHour0, 0U, 100LL));
  EXPECT_EQ(std::make_tuple((*hours)[1].ts_ms, (*hours)[1].gpu, (*hours)[1].util_max), std::make_tuple(kHour0, 1U, 0LL));
  EXPECT_EQ(std::make_tuple((*hours)[2].ts_ms, (*hours)[2].gpu, (*hours)[2].util_max),
            std::make_tuple(kHour0 + kHour, 1U, 40LL));
}

TEST(Recorder, TwoFlushesIntoOneMinuteMergeTheirRollups) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  Recorder rec({path, {}, 1000});
  rec.add(sample(kHour0 + 5000, 0, 80, 1000));
  ASSERT_TRUE(rec.flush().ok);
  rec.add(sample(kHour0 + 15000, 0, 20, 3000));
  ASSERT_TRUE(rec.flush().ok);

  Reader reader = open_reader(path);
  for (const Level level : {Level::Minutes, Level::Hours}) {
    auto rows = reader.rollups(level, kAll, {});
    ASSERT_TRUE(rows.ok());
    ASSERT_EQ(rows->size(), 1U);
    const Rollup& r = (*rows)[0];
    EXPECT_EQ(r.samples, 2);
    EXPECT_DOUBLE_EQ(r.util_avg, 50.0);
    EXPECT_EQ(r.util_max, 80);  // the first flush's maximum is kept
    EXPECT_DOUBLE_EQ(r.mem_used_mib_avg, 2000.0);
    EXPECT_EQ(r.mem_used_mib_max, 3000);
    EXPECT_DOUBLE_EQ(r.power_w_avg, 150.0);
  }
  auto samples = reader.samples(kAll, {});
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(samples->size(), 2U);
}

TEST(Recorder, TheStoreIsInWalModeAndPassesIntegrityCheck) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  Recorder rec({path, {}, 1000});
  for (int i = 0; i < 50; ++i) rec.add(sample(kHour0 + i * 10000LL, static_cast<unsigned>(i % 2), i));
  rec.update(ActivitySpan{0, gpu::Activity::Busy, kHour0, kHour0 + 490000});
  ASSERT_TRUE(rec.flush().ok);

  EXPECT_EQ(pragma_text(path, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(pragma_text(path, "PRAGMA integrity_check"), "ok");
  // The sample tables are their own time index.
  EXPECT_NE(pragma_text(path, "SELECT sql FROM sqlite_schema WHERE name = 'gpu_sample'").find("WITHOUT ROWID"),
            std::string::npos);
}

TEST(Recorder, AnUnwritablePathKeepsTheBatchUntilThePathWorks) {
  TempDir dir;
  // A regular file where the directory should be: no user, root included, can create files in it.
  const std::string blocker = dir / "file";
  std::ofstream(blocker) << "not a directory\n";
  const std::string path = blocker + "/tarmac.db";
  Recorder rec({path, {}, 1000});
  rec.add(GpuInfo{0, "GPU-aaaa", "H100", "", std::nullopt}, kHour0);
  rec.add(sample(kHour0, 0, 90));
  rec.add(sample(kHour0 + 10000, 0, 91));
  rec.add(Event{kHour0, 0u, "process-start", "pid 1"});
  rec.update(ActivitySpan{0, gpu::Activity::Busy, kHour0, kHour0 + 10000});
  ASSERT_EQ(rec.pending_rows(), 5U);

  const FlushStatus failed = rec.flush();
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.failure, Failure::ReadOnly);
  EXPECT_NE(failed.message.find(path), std::string::npos) << failed.message;
  EXPECT_EQ(failed.written, 0U);
  EXPECT_EQ(failed.pending, 5U);
  EXPECT_EQ(failed.dropped, 0U);
  EXPECT_EQ(rec.pending_rows(), 5U);
  EXPECT_FALSE(rec.is_open());

  // More arrives while the store is unwritable; a retry fails the same way and loses nothing.
  rec.add(sample(kHour0 + 20000, 0, 92));
  rec.update(ActivitySpan{0, gpu::Activity::Busy, kHour0, kHour0 + 20000});
  const FlushStatus again = rec.flush();
  EXPECT_FALSE(again.ok);
  EXPECT_EQ(again.pending, 6U);

  std::filesystem::remove(blocker);
  const FlushStatus st = rec.flush();
  ASSERT_TRUE(st.ok) << st.message;
  EXPECT_EQ(st.written, 6U);
  EXPECT_EQ(st.pending, 0U);
  EXPECT_EQ(rec.pending_rows(), 0U);

  Reader reader = open_reader(path);
  auto samples = reader.samples(kAll, {});
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(samples->size(), 3U);
  EXPECT_EQ((*samples)[0].util_pct, 90);
  EXPECT_EQ((*samples)[2].util_pct, 92);
  auto activity = reader.activity(kAll);
  ASSERT_TRUE(activity.ok());
  ASSERT_EQ(activity->size(), 1U);
  EXPECT_EQ((*activity)[0].end_ms, kHour0 + 20000);
  auto events = reader.events(kAll);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1U);
  auto gpus = reader.gpus();
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ(gpus->size(), 1U);
  auto hours = reader.rollups(Level::Hours, kAll, {});
  ASSERT_TRUE(hours.ok());
  ASSERT_EQ(hours->size(), 1U);
  EXPECT_EQ((*hours)[0].samples, 3);
}

TEST(Recorder, ADatabaseFileDeletedWhileOpenIsNotWrittenIntoTheVoid) {
  // When the file is deleted under an open recorder (an admin clearing the state directory),
  // SQLite would go on writing into the unlinked inode; the recorder notices
  // (SQLITE_FCNTL_HAS_MOVED) and creates the store afresh at its path.
  TempDir dir;
  const std::string path = database_path(dir.path());
  Recorder rec({path, {}, 1000});
  rec.add(sample(kHour0, 0, 10));
  ASSERT_TRUE(rec.flush().ok);
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);

  rec.add(sample(kHour0 + 1000, 0, 20));
  // Either this flush fails and keeps the row, or it writes the row at the path; a retry must
  // leave it at the path either way.
  const FlushStatus st = rec.flush();
  if (!st.ok) EXPECT_EQ(st.pending, 1U);
  const FlushStatus retry = rec.flush();
  EXPECT_TRUE(retry.ok) << retry.message;

  ASSERT_TRUE(std::filesystem::exists(path)) << "nothing was written at " << path;
  auto reader = Reader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto samples = reader->samples(kAll, {});
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(samples->size(), 1U);
  EXPECT_EQ((*samples)[0].ts_ms, kHour0 + 1000);
}

TEST(Recorder, TheGpuTableKeepsWhenEachGpuWasFirstAndLastSeen) {
  // A GPU added at T0 and again at T0 + 10 s before the first flush keeps first_ms = T0
  // (docs/recorder.md: "when this index was first seen") and last_ms = T0 + 10 s.
  TempDir dir;
  const std::string path = database_path(dir.path());
  Recorder rec({path, {}, 1000});
  const GpuInfo info{0, "GPU-aaaa", "H100", "00000000:07:00.0", 81559};
  rec.add(info, kHour0);
  rec.add(info, kHour0 + 10000);
  ASSERT_TRUE(rec.flush().ok);
  rec.add(info, kHour0 + 20000);
  ASSERT_TRUE(rec.flush().ok);
  EXPECT_EQ(pragma_text(path, "SELECT first_ms || '/' || last_ms FROM gpu WHERE gpu = 0"),
            std::to_string(kHour0) + "/" + std::to_string(kHour0 + 20000));
}

TEST(Recorder, TheMemoryBoundDropsTheOldestSamplesAndSaysHowMany) {
  TempDir dir;
  const std::string blocker = dir / "file";
  std::ofstream(blocker) << "x";
  const std::string path = blocker + "/tarmac.db";
  constexpr std::size_t kBound = 10;
  Recorder rec({path, {}, kBound});
  constexpr int kAdded = 25;
  for (int i = 0; i < kAdded; ++i) rec.add(sample(kHour0 + i * 1000LL, 0, i));
  rec.add(Event{kHour0, 0u, "process-start", "kept: events are not dropped"});

  const std::size_t kept_samples = rec.pending_rows() - 1;
  EXPECT_LE(kept_samples, kBound);
  EXPECT_GT(kept_samples, 0U);
  const FlushStatus failed = rec.flush();
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.dropped, kAdded - kept_samples);
  EXPECT_EQ(failed.pending, kept_samples + 1);

  std::filesystem::remove(blocker);
  const FlushStatus st = rec.flush();
  ASSERT_TRUE(st.ok) << st.message;
  EXPECT_EQ(st.dropped, kAdded - kept_samples);
  EXPECT_EQ(st.written, kept_samples + 1);

  Reader reader = open_reader(path);
  auto samples = reader.samples(kAll, {});
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(samples->size(), kept_samples);
  // The newest survive, in order, with nothing missing between them.
  for (std::size_t i = 0; i < samples->size(); ++i) {
    EXPECT_EQ((*samples)[i].util_pct, static_cast<long long>(kAdded - kept_samples + i));
  }
  auto events = reader.events(kAll);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1U);

  // The count starts again after a successful flush.
  rec.add(sample(kHour0 + 100000, 0, 1));
  const FlushStatus next = rec.flush();
  ASSERT_TRUE(next.ok);
  EXPECT_EQ(next.dropped, 0U);
}

TEST(Recorder, PruneDeletesOldSamplesButKeepsHourRollups) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  Retention retention;
  retention.samples_ms = 1 * kHour;
  retention.minutes_ms = 2 * kHour;
  Recorder rec({path, retention, 1000});
  const long long old_ts = kHour0 + 5000;
  const long long new_ts = kHour0 + 3 * kHour + 5000;
  rec.add(sample(old_ts, 0, 70));
  rec.add(ProcessSample{old_ts, 0, 11, 100, 0});
  rec.add(SlowSample{old_ts, 0, 1, 2, std::nullopt, std::nullopt, std::nullopt, std::nullopt});
  rec.add(sample(new_ts, 0, 30));
  rec.add(ProcessSample{new_ts, 0, 11, 100, 0});
  rec.add(Event{old_ts, 0u, "throttle-start", "HW thermal"});
  rec.update(ActivitySpan{0, gpu::Activity::Busy, old_ts, new_ts});
  ASSERT_TRUE(rec.flush().ok);

  const long long now = new_ts + 60 * 1000;
  ASSERT_TRUE(rec.prune(now).ok());

  Reader reader = open_reader(path);
  auto samples = reader.samples(kAll, {});
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(samples->size(), 1U);
  EXPECT_EQ((*samples)[0].ts_ms, new_ts);
  auto processes = reader.process_samples(kAll, {});
  ASSERT_TRUE(processes.ok());
  ASSERT_EQ(processes->size(), 1U);
  EXPECT_EQ((*processes)[0].ts_ms, new_ts);
  EXPECT_EQ(pragma_text(path, "SELECT count(*) FROM gpu_slow_sample"), "0");

  auto minutes = reader.rollups(Level::Minutes, kAll, {});
  ASSERT_TRUE(minutes.ok());
  ASSERT_EQ(minutes->size(), 1U);  // older than 2 h: gone
  EXPECT_EQ((*minutes)[0].ts_ms, kHour0 + 3 * kHour);
  auto hours = reader.rollups(Level::Hours, kAll, {});
  ASSERT_TRUE(hours.ok());
  ASSERT_EQ(hours->size(), 2U);  // both hours stay
  EXPECT_EQ((*hours)[0].ts_ms, kHour0);
  EXPECT_DOUBLE_EQ((*hours)[0].util_avg, 70.0);

  auto events = reader.events(kAll);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1U);
  auto activity = reader.activity(kAll);
  ASSERT_TRUE(activity.ok());
  EXPECT_EQ(activity->size(), 1U);
  EXPECT_EQ(pragma_text(path, "PRAGMA integrity_check"), "ok");
}

TEST(Recorder, ZeroRetentionKeepsALevelForever) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  Retention forever{0, 0, 0, 0};
  Recorder rec({path, forever, 1000});
  rec.add(sample(kHour0, 0, 70));
  rec.add(Event{kHour0, 0u, "fault", "x"});
  ASSERT_TRUE(rec.flush().ok);
  ASSERT_TRUE(rec.prune(kHour0 + 1000LL * 86400 * 1000).ok());

  Reader reader = open_reader(path);
  auto samples = reader.samples(kAll, {});
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(samples->size(), 1U);
  auto events = reader.events(kAll);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1U);
}

}  // namespace
}  // namespace tarmac::store
