#include "tarmac/sched/jobdb.hpp"

#include <algorithm>
#include <climits>
#include <fmt/format.h>

#include "tarmac/store/schema.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sched {

namespace {

// The table's own version, in the store's meta table as sched_job_version (the recorder's tables
// keep schema_version): 1, the first (no row of meta); 2 adds stop_reason, so that recovery no
// longer reads why a job stops from its words.
constexpr long long kTableVersion = 2;

constexpr const char* kTable = R"sql(
CREATE TABLE IF NOT EXISTS sched_job(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL, state TEXT NOT NULL, uid INTEGER NOT NULL, user TEXT NOT NULL, name TEXT NOT NULL,
  spec TEXT NOT NULL, gpus TEXT NOT NULL, uuids TEXT NOT NULL,
  submitted_unix_ms INTEGER NOT NULL, started_unix_ms INTEGER, ended_unix_ms INTEGER, expires_unix_ms INTEGER,
  exit_code INTEGER, requeues INTEGER NOT NULL, outside TEXT NOT NULL, reason TEXT NOT NULL, log TEXT NOT NULL,
  shim_pid INTEGER, shim_start INTEGER, stop_reason TEXT NOT NULL DEFAULT 'none');
CREATE INDEX IF NOT EXISTS sched_job_by_state ON sched_job(state);
)sql";

constexpr const char* kColumns =
    "id, kind, state, uid, user, name, spec, gpus, uuids, submitted_unix_ms, started_unix_ms, ended_unix_ms, "
    "expires_unix_ms, exit_code, requeues, outside, reason, log, shim_pid, shim_start, stop_reason";

std::string join_indices(const std::vector<unsigned>& v) {
  std::string out;
  for (unsigned i : v) {
    if (!out.empty()) out += ',';
    out += std::to_string(i);
  }
  return out;
}

std::vector<unsigned> split_indices(const std::string& text) {
  std::vector<unsigned> out;
  for (const auto& part : util::split(text, ',')) {
    if (const auto v = util::parse_int(part, 0, UINT_MAX)) out.push_back(static_cast<unsigned>(*v));
  }
  return out;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& part : util::split(text, ',')) {
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

std::optional<long long> positive(long long v) { return v > 0 ? std::optional<long long>(v) : std::nullopt; }

// Brings a store written by an older tarmac to kTableVersion, in place, in one transaction.
Result<void> upgrade(store::Database& db) {
  TARMAC_TRY(db.exec("BEGIN IMMEDIATE"));
  auto body = [&]() -> Result<void> {
    TARMAC_TRY(db.exec(kTable));
    TARMAC_TRY_ASSIGN(auto version,
                      db.scalar("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'sched_job_version'"));
    if (version && *version > kTableVersion) {
      return make_error(Error::Code::Invalid,
                        fmt::format("the store's job table has version {}, newer than this tarmac reads ({}): upgrade "
                                    "tarmac",
                                    *version, kTableVersion));
    }
    TARMAC_TRY_ASSIGN(auto has_stop_reason,
                      db.scalar("SELECT count(*) FROM pragma_table_info('sched_job') WHERE name = 'stop_reason'"));
    if (has_stop_reason.value_or(0) == 0) {
      // Version 1 kept why a job stopped only in its words; read them this once, for the jobs that
      // were stopping when that tarmac went down.
      TARMAC_TRY(db.exec("ALTER TABLE sched_job ADD COLUMN stop_reason TEXT NOT NULL DEFAULT 'none';"
                         "UPDATE sched_job SET stop_reason = CASE WHEN reason LIKE 'preempted%' THEN 'preempt' "
                         "ELSE 'cancel' END WHERE state = 'stopping';"));
    }
    return db.exec(fmt::format("INSERT OR REPLACE INTO meta(key, value) VALUES('sched_job_version', '{}')",
                               kTableVersion));
  };
  if (auto r = body(); !r.ok()) {
    (void)db.exec("ROLLBACK");
    return r;
  }
  return db.exec("COMMIT");
}

// Binds every column after id (2..21) of `job`.
void bind_job(store::Statement& s, const Job& job) {
  s.bind(2, std::string_view(to_string(job.kind)));
  s.bind(3, std::string_view(to_string(job.state)));
  s.bind(4, static_cast<long long>(job.uid));
  s.bind(5, std::string_view(job.user));
  s.bind(6, std::string_view(job.name));
  const std::string spec = util::json_text(spec_json(job));
  s.bind(7, std::string_view(spec));
  const std::string gpus = join_indices(job.gpus);
  s.bind(8, std::string_view(gpus));
  std::string uuids;
  for (const auto& u : job.gpu_uuids) uuids += (uuids.empty() ? "" : ",") + u;
  s.bind(9, std::string_view(uuids));
  s.bind(10, job.submitted_ms);
  s.bind(11, positive(job.started_ms));
  s.bind(12, positive(job.ended_ms));
  s.bind(13, positive(job.expires_ms));
  s.bind(14, job.exit_code ? std::optional<long long>(*job.exit_code) : std::nullopt);
  s.bind(15, static_cast<long long>(job.requeues));
  const std::string outside = join_indices(job.outside);
  s.bind(16, std::string_view(outside));
  s.bind(17, std::string_view(job.reason));
  s.bind(18, std::string_view(job.log));
  s.bind(19, job.shim_pid > 0 ? std::optional<long long>(job.shim_pid) : std::nullopt);
  s.bind(20, job.shim_start > 0 ? std::optional<long long>(static_cast<long long>(job.shim_start)) : std::nullopt);
  s.bind(21, std::string_view(to_string(job.stopping_for)));
}

Job row_to_job(const store::Statement& s) {
  Job job;
  job.id = s.int64(0);
  job.kind = job_kind_from(s.text(1)).value_or(JobKind::Job);
  job.state = job_state_from(s.text(2)).value_or(JobState::Lost);
  job.uid = static_cast<uid_t>(s.int64(3));
  job.user = s.text(4);
  job.name = s.text(5);
  apply_spec_json(nlohmann::json::parse(s.text(6), nullptr, false), job);
  job.gpus = split_indices(s.text(7));
  job.gpu_uuids = split_words(s.text(8));
  job.submitted_ms = s.int64(9);
  job.started_ms = s.opt_int64(10).value_or(0);
  job.ended_ms = s.opt_int64(11).value_or(0);
  job.expires_ms = s.opt_int64(12).value_or(0);
  if (auto code = s.opt_int64(13)) job.exit_code = static_cast<int>(*code);
  job.requeues = static_cast<int>(s.int64(14));
  job.outside = split_indices(s.text(15));
  job.reason = s.text(16);
  job.log = s.text(17);
  // A pid of 1 or less (a damaged or hand-edited store) is no wrapper: never signal or wait for it.
  const long long pid = s.opt_int64(18).value_or(0);
  job.shim_pid = pid >= 2 && pid <= INT_MAX ? static_cast<int>(pid) : 0;
  job.shim_start = static_cast<unsigned long long>(std::max(0LL, s.opt_int64(19).value_or(0)));
  job.stopping_for = stop_reason_from(s.text(20)).value_or(StopReason::None);
  return job;
}

}  // namespace

Result<JobDb> JobDb::open(const std::string& path) {
  TARMAC_TRY_ASSIGN(auto db, store::Database::open(path, store::Database::Mode::ReadWrite));
  TARMAC_TRY(store::ensure_schema(db));
  TARMAC_TRY(upgrade(db));
  return JobDb(std::move(db));
}

Result<void> JobDb::insert(Job& job) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare(fmt::format(
                                "INSERT INTO sched_job({}) VALUES(NULL, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
                                "?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21) RETURNING id",
                                kColumns)));
  bind_job(s, job);
  TARMAC_TRY_ASSIGN(const bool row, s.step());
  if (!row) return make_error(Error::Code::Internal, "INSERT ... RETURNING gave no id");
  job.id = s.int64(0);
  s.reset();
  return {};
}

Result<void> JobDb::save(const Job& job) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare(
                                "UPDATE sched_job SET kind = ?2, state = ?3, uid = ?4, user = ?5, name = ?6, spec = ?7, "
                                "gpus = ?8, uuids = ?9, submitted_unix_ms = ?10, started_unix_ms = ?11, "
                                "ended_unix_ms = ?12, expires_unix_ms = ?13, exit_code = ?14, requeues = ?15, "
                                "outside = ?16, reason = ?17, log = ?18, shim_pid = ?19, shim_start = ?20, "
                                "stop_reason = ?21 WHERE id = ?1"));
  s.bind(1, job.id);
  bind_job(s, job);
  return s.run();
}

Result<std::vector<Job>> JobDb::select(const std::string& where, long long param) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare(fmt::format("SELECT {} FROM sched_job {} ORDER BY id", kColumns, where)));
  if (where.find('?') != std::string::npos) s.bind(1, param);
  std::vector<Job> out;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, s.step());
    if (!row) break;
    out.push_back(row_to_job(s));
  }
  return out;
}

Result<std::vector<Job>> JobDb::unfinished() {
  return select("WHERE state IN ('queued', 'running', 'stopping', 'active')", 0);
}

Result<std::vector<Job>> JobDb::list(bool all, long long ended_since_ms) {
  if (all) return select("", 0);
  return select("WHERE state IN ('queued', 'running', 'stopping', 'active') OR ended_unix_ms >= ?1", ended_since_ms);
}

Result<std::map<uid_t, long long>> JobDb::usage(long long since_ms, long long now_ms) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare(
                                "SELECT uid, SUM((length(gpus) - length(replace(gpus, ',', '')) + 1) * "
                                "(MIN(ended_unix_ms, ?2) - MAX(started_unix_ms, ?1))) FROM sched_job "
                                "WHERE kind = 'job' AND started_unix_ms IS NOT NULL AND ended_unix_ms > ?1 "
                                "AND gpus != '' GROUP BY uid"));
  s.bind(1, since_ms);
  s.bind(2, now_ms);
  std::map<uid_t, long long> out;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, s.step());
    if (!row) break;
    out[static_cast<uid_t>(s.int64(0))] = std::max(0LL, s.int64(1));
  }
  return out;
}

Result<void> JobDb::event(long long ts_ms, std::optional<unsigned> gpu, const std::string& kind,
                          const std::string& detail) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare("INSERT INTO event(ts_ms, gpu, kind, detail) VALUES(?1, ?2, ?3, ?4)"));
  s.bind(1, ts_ms);
  s.bind(2, gpu ? std::optional<long long>(*gpu) : std::nullopt);
  s.bind(3, std::string_view(kind));
  s.bind(4, std::string_view(detail));
  return s.run();
}

}  // namespace tarmac::sched
