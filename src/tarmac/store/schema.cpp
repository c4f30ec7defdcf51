#include "tarmac/store/schema.hpp"

#include <fmt/format.h>

#include "tarmac/store/rows.hpp"

namespace tarmac::store {

namespace {

// WITHOUT ROWID tables keyed by (time, gpu): the table is its own time index, so a range read is
// one seek, and a row costs about 37 bytes (docs/recorder.md, "Size").
constexpr std::string_view kTables = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS activity_class(code INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gpu(
  gpu INTEGER PRIMARY KEY, uuid TEXT, name TEXT, pci_bus_id TEXT, mem_total_mib INTEGER,
  first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS gpu_sample(
  ts_ms INTEGER NOT NULL, gpu INTEGER NOT NULL,
  util_pct INTEGER, mem_util_pct INTEGER, mem_used_mib INTEGER, power_w INTEGER, temp_c INTEGER,
  sm_mhz INTEGER, mem_mhz INTEGER, enc_pct INTEGER, dec_pct INTEGER, class INTEGER NOT NULL,
  PRIMARY KEY(ts_ms, gpu)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_minute(
  ts_ms INTEGER NOT NULL, gpu INTEGER NOT NULL, samples INTEGER NOT NULL,
  util_sum INTEGER NOT NULL, util_max INTEGER NOT NULL, mem_util_sum INTEGER NOT NULL,
  mem_used_mib_sum INTEGER NOT NULL, mem_used_mib_max INTEGER NOT NULL, power_w_sum INTEGER NOT NULL,
  temp_c_max INTEGER NOT NULL, PRIMARY KEY(ts_ms, gpu)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_hour(
  ts_ms INTEGER NOT NULL, gpu INTEGER NOT NULL, samples INTEGER NOT NULL,
  util_sum INTEGER NOT NULL, util_max INTEGER NOT NULL, mem_util_sum INTEGER NOT NULL,
  mem_used_mib_sum INTEGER NOT NULL, mem_used_mib_max INTEGER NOT NULL, power_w_sum INTEGER NOT NULL,
  temp_c_max INTEGER NOT NULL, PRIMARY KEY(ts_ms, gpu)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_slow_sample(
  ts_ms INTEGER NOT NULL, gpu INTEGER NOT NULL, pcie_tx_kbps INTEGER, pcie_rx_kbps INTEGER,
  sm_active_pct REAL, sm_occupancy_pct REAL, tensor_active_pct REAL, dram_bw_pct REAL,
  PRIMARY KEY(ts_ms, gpu)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS process_sample(
  ts_ms INTEGER NOT NULL, gpu INTEGER NOT NULL, pid INTEGER NOT NULL,
  mem_used_mib INTEGER, sm_util_pct INTEGER, mem_util_pct INTEGER, other_util_pct INTEGER,
  PRIMARY KEY(ts_ms, gpu, pid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS process(
  gpu INTEGER NOT NULL, pid INTEGER NOT NULL, first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL,
  start_unix INTEGER, user TEXT, command TEXT, container TEXT, slurm_job TEXT,
  mem_used_mib_max INTEGER NOT NULL, listed_after_start INTEGER, PRIMARY KEY(gpu, pid, first_ms)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS process_by_last ON process(last_ms);
CREATE TABLE IF NOT EXISTS activity(
  gpu INTEGER NOT NULL, start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL, class TEXT NOT NULL,
  PRIMARY KEY(gpu, start_ms)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS activity_by_end ON activity(end_ms);
CREATE TABLE IF NOT EXISTS mig_activity(
  gpu INTEGER NOT NULL, gpu_instance INTEGER NOT NULL, start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL,
  profile TEXT NOT NULL, slices INTEGER NOT NULL, class TEXT NOT NULL, source TEXT NOT NULL,
  PRIMARY KEY(gpu, gpu_instance, start_ms)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mig_activity_by_end ON mig_activity(end_ms);
CREATE TABLE IF NOT EXISTS job_gpu(
  job TEXT NOT NULL, gpu INTEGER NOT NULL, first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL,
  user TEXT, partition TEXT, PRIMARY KEY(job, gpu, first_ms)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS job_gpu_by_last ON job_gpu(last_ms);
CREATE TABLE IF NOT EXISTS event(
  id INTEGER PRIMARY KEY, ts_ms INTEGER NOT NULL, gpu INTEGER, kind TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS event_by_time ON event(ts_ms);
CREATE VIEW IF NOT EXISTS gpu_sample_v AS
  SELECT datetime(s.ts_ms / 1000, 'unixepoch') AS time, s.*, c.name AS class_name
  FROM gpu_sample s JOIN activity_class c ON c.code = s.class;
CREATE VIEW IF NOT EXISTS gpu_hour_v AS
  SELECT datetime(ts_ms / 1000, 'unixepoch') AS time, gpu, samples,
         1.0 * util_sum / samples AS util_avg, util_max, 1.0 * mem_util_sum / samples AS mem_util_avg,
         1.0 * mem_used_mib_sum / samples AS mem_used_mib_avg, mem_used_mib_max,
         1.0 * power_w_sum / samples AS power_w_avg, temp_c_max
  FROM gpu_hour;
)sql";

// Adds `column` (INTEGER) to `table` when a store of an older version lacks it: the rows it
// recorded keep NULL (unknown), never 0.
Result<void> add_integer_column(Database& db, std::string_view table, std::string_view column) {
  TARMAC_TRY_ASSIGN(const bool has, table_has(db, table, column));
  if (has) return {};
  return db.exec(fmt::format("ALTER TABLE {} ADD COLUMN {} INTEGER", table, column));
}

// Version 1 lacks process_sample.mem_util_pct, versions 1 and 2 other_util_pct, versions 1 to 3
// process.listed_after_start; versions 1 to 4 lack the job_gpu table, 1 to 5 mig_activity, which
// kTables creates.
Result<void> upgrade_older_versions(Database& db) {
  TARMAC_TRY(add_integer_column(db, "process_sample", "mem_util_pct"));
  TARMAC_TRY(add_integer_column(db, "process_sample", "other_util_pct"));
  return add_integer_column(db, "process", "listed_after_start");
}

}  // namespace

Result<bool> table_has(Database& db, std::string_view table, std::string_view column) {
  TARMAC_TRY_ASSIGN(auto has, db.scalar(fmt::format("SELECT count(*) FROM pragma_table_info('{}') WHERE name = '{}'",
                                                    table, column)));
  return has.value_or(0) != 0;
}

Result<void> check_schema(Database& db) {
  auto has_meta = db.scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'meta'");
  if (!has_meta.ok()) return has_meta.take_error();
  if (has_meta->value_or(0) == 0) return make_error(Error::Code::Invalid, "not a tarmac store (no meta table)");
  TARMAC_TRY_ASSIGN(auto version, db.scalar("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema_version'"));
  if (!version) return make_error(Error::Code::Invalid, "not a tarmac store (no schema_version)");
  if (*version > kSchemaVersion) {
    return make_error(Error::Code::Invalid,
                      fmt::format("the store has schema version {}, newer than this tarmac reads ({}): upgrade tarmac",
                                  *version, kSchemaVersion));
  }
  return {};
}

Result<void> ensure_schema(Database& db) {
  TARMAC_TRY(db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"));
  TARMAC_TRY(db.exec("BEGIN IMMEDIATE"));
  auto body = [&]() -> Result<void> {
    TARMAC_TRY(db.exec(kTables));
    TARMAC_TRY_ASSIGN(auto insert, db.prepare("INSERT OR REPLACE INTO activity_class(code, name) VALUES(?, ?)"));
    for (auto a : gpu::kActivities) {
      insert.bind(1, static_cast<long long>(activity_code(a)));
      insert.bind(2, std::string_view(gpu::to_string(a)));
      TARMAC_TRY(insert.run());
    }
    TARMAC_TRY_ASSIGN(auto version, db.scalar("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema_version'"));
    if (version && *version > kSchemaVersion) return check_schema(db);
    TARMAC_TRY(upgrade_older_versions(db));
    return db.exec(fmt::format("INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', '{}')", kSchemaVersion));
  };
  if (auto r = body(); !r.ok()) {
    (void)db.exec("ROLLBACK");
    return r;
  }
  return db.exec("COMMIT");
}

int activity_code(gpu::Activity a) {
  switch (a) {
    case gpu::Activity::Busy: return 0;
    case gpu::Activity::Starved: return 1;
    case gpu::Activity::Holding: return 2;
    case gpu::Activity::Idle: return 3;
    case gpu::Activity::ReservedIdle: return 4;
    case gpu::Activity::Fault: return 5;
  }
  return 3;
}

std::optional<gpu::Activity> activity_from_code(long long code) {
  for (auto a : gpu::kActivities) {
    if (activity_code(a) == code) return a;
  }
  return std::nullopt;
}

std::optional<gpu::Activity> activity_from_name(std::string_view name) {
  for (auto a : gpu::kActivities) {
    if (name == gpu::to_string(a)) return a;
  }
  return std::nullopt;
}

}  // namespace tarmac::store
