#include "tarmac/store/reader.hpp"

#include <algorithm>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fmt/format.h>

#include "tarmac/store/schema.hpp"

namespace tarmac::store {

namespace {

// " AND gpu IN (0,2)" for a non-empty filter.
std::string gpu_filter(const std::vector<unsigned>& gpus) {
  if (gpus.empty()) return {};
  std::string out = " AND gpu IN (";
  for (std::size_t i = 0; i < gpus.size(); ++i) out += fmt::format("{}{}", i ? "," : "", gpus[i]);
  return out + ")";
}

void bind_range(Statement& st, const TimeRange& r) {
  st.bind(1, r.since_ms);
  st.bind(2, r.until_ms);
}

}  // namespace

Result<Reader> Reader::open(const std::string& path) {
  // SQLite would say only "unable to open database file", at the first query. Asked without opening
  // the file: the agent's HTTP server reads the store its own recorder writes, and closing any
  // descriptor of it would drop the recorder's SQLite locks (store/private_files.cpp).
  if (::faccessat(AT_FDCWD, path.c_str(), R_OK, AT_EACCESS) != 0) {
    if (errno == EACCES || errno == EPERM) {
      return make_error(Error::Code::Io,
                        fmt::format("cannot read the store {}: permission denied. It holds every job's command line "
                                    "and working directory, so only the agent's user and the file's group may read "
                                    "it (docs/recorder.md): ask the administrator to add you to that group, or give "
                                    "--db FILE",
                                    path));
    }
    return make_error(Error::Code::NotFound,
                      fmt::format("no recorded telemetry at {}: start `tarmac agent` (or give --db FILE)", path));
  }
  TARMAC_TRY_ASSIGN(auto db, Database::open(path, Database::Mode::ReadOnly));
  if (auto r = check_schema(db); !r.ok()) {
    Error e = r.take_error();
    e.message = fmt::format("{}: {}", path, e.message);
    return e;
  }
  return Reader(std::move(db));
}

Result<std::vector<GpuInfo>> Reader::gpus() {
  TARMAC_TRY_ASSIGN(auto st, db_.prepare("SELECT gpu, uuid, name, pci_bus_id, mem_total_mib FROM gpu ORDER BY gpu"));
  std::vector<GpuInfo> out;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, st.step());
    if (!row) break;
    out.push_back({static_cast<unsigned>(st.int64(0)), st.text(1), st.text(2), st.text(3), st.opt_int64(4)});
  }
  return out;
}

Result<std::optional<TimeRange>> Reader::recorded() {
  // The hour rollups and activity spans outlive the raw samples (retention), so they bound what
  // was ever recorded.
  TARMAC_TRY_ASSIGN(auto st, db_.prepare("SELECT min(start_ms), max(end_ms) FROM activity"));
  TARMAC_TRY_ASSIGN(const bool row, st.step());
  if (!row || st.is_null(0)) return std::optional<TimeRange>{};
  return std::optional<TimeRange>{TimeRange{st.int64(0), st.int64(1)}};
}

Result<std::vector<GpuSample>> Reader::samples(const TimeRange& range, const std::vector<unsigned>& gpus) {
  TARMAC_TRY_ASSIGN(auto st,
                    db_.prepare(fmt::format("SELECT ts_ms, gpu, util_pct, mem_util_pct, mem_used_mib, power_w, temp_c, "
                                            "sm_mhz, mem_mhz, enc_pct, dec_pct, class FROM gpu_sample "
                                            "WHERE ts_ms >= ? AND ts_ms < ?{} ORDER BY ts_ms, gpu",
                                            gpu_filter(gpus))));
  bind_range(st, range);
  std::vector<GpuSample> out;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, st.step());
    if (!row) break;
    GpuSample s;
    s.ts_ms = st.int64(0);
    s.gpu = static_cast<unsigned>(st.int64(1));
    s.util_pct = st.opt_int64(2);
    s.mem_util_pct = st.opt_int64(3);
    s.mem_used_mib = st.opt_int64(4);
    s.power_w = st.opt_int64(5);
    s.temp_c = st.opt_int64(6);
    s.sm_mhz = st.opt_int64(7);
    s.mem_mhz = st.opt_int64(8);
    s.enc_pct = st.opt_int64(9);
    s.dec_pct = st.opt_int64(10);
    s.activity = activity_from_code(st.int64(11)).value_or(gpu::Activity::Idle);
    out.push_back(s);
  }
  return out;
}

Result<std::vector<Rollup>> Reader::rollups(Level level, const TimeRange& range, const std::vector<unsigned>& gpus) {
  const char* table = level == Level::Hours ? "gpu_hour" : "gpu_minute";
  // A bucket that starts before the range but holds part of it belongs to it.
  const long long width = level == Level::Hours ? 3600LL * 1000 : 60LL * 1000;
  const TimeRange buckets{range.since_ms - ((range.since_ms % width) + width) % width, range.until_ms};
  TARMAC_TRY_ASSIGN(auto st, db_.prepare(fmt::format(
                                 "SELECT ts_ms, gpu, samples, util_sum, util_max, mem_util_sum, mem_used_mib_sum, "
                                 "mem_used_mib_max, power_w_sum, temp_c_max FROM {} WHERE ts_ms >= ? AND ts_ms < ?{} "
                                 "ORDER BY ts_ms, gpu",
                                 table, gpu_filter(gpus))));
  bind_range(st, buckets);
  std::vector<Rollup> out;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, st.step());
    if (!row) break;
    Rollup r;
    r.ts_ms = st.int64(0);
    r.gpu = static_cast<unsigned>(st.int64(1));
    r.samples = st.int64(2);
    const double n = r.samples > 0 ? static_cast<double>(r.samples) : 1.0;
    r.util_avg = static_cast<double>(st.int64(3)) / n;
    r.util_max = st.int64(4);
    r.mem_util_avg = static_cast<double>(st.int64(5)) / n;
    r.mem_used_mib_avg = static_cast<double>(st.int64(6)) / n;
    r.mem_used_mib_max = st.int64(7);
    r.power_w_avg = static_cast<double>(st.int64(8)) / n;
    r.temp_c_max = st.int64(9);
    out.push_back(r);
  }
  return out;
}

Result<std::vector<ProcessSample>> Reader::process_samples(const TimeRange& range, const std::vector<unsigned>& gpus) {
  // A store of an older version that no agent has upgraded yet (the reader never writes) lacks
  // the newer columns: its rows read them as unknown.
  TARMAC_TRY_ASSIGN(const bool has_mem_util, table_has(db_, "process_sample", "mem_util_pct"));
  TARMAC_TRY_ASSIGN(const bool has_other_util, table_has(db_, "process_sample", "other_util_pct"));
  TARMAC_TRY_ASSIGN(auto st, db_.prepare(fmt::format("SELECT ts_ms, gpu, pid, mem_used_mib, sm_util_pct, {}, {} FROM "
                                                     "process_sample WHERE ts_ms >= ? AND ts_ms < ?{} "
                                                     "ORDER BY ts_ms, gpu, pid",
                                                     has_mem_util ? "mem_util_pct" : "NULL",
                                                     has_other_util ? "other_util_pct" : "NULL", gpu_filter(gpus))));
  bind_range(st, range);
  std::vector<ProcessSample> out;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, st.step());
    if (!row) break;
    out.push_back({st.int64(0), static_cast<unsigned>(st.int64(1)), static_cast<unsigned>(st.int64(2)),
                   st.opt_int64(3), st.opt_int64(4), st.opt_int64(5), st.opt_int64(6)});
  }
  return out;
}

Result<std::vector<ActivitySpan>> Reader::activity(const TimeRange& range) {
  TARMAC_TRY_ASSIGN(auto st, db_.prepare("SELECT gpu, start_ms, end_ms, class FROM activity "
                                         "WHERE end_ms >= ? AND start_ms < ? ORDER BY gpu, start_ms"));
  bind_range(st, range);
  std::vector<ActivitySpan> out;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, st.step());
    if (!row) break;
    ActivitySpan s;
    s.gpu = static_cast<unsigned>(st.int64(0));
    s.start_ms = st.int64(1);
    s.end_ms = st.int64(2);
    s.activity = activity_from_name(st.text(3)).value_or(gpu::Activity::Idle);
    out.push_back(s);
  }
  return out;
}

Result<std::vector<MigSpan>> Reader::mig_activity(const TimeRange& range) {
  std::vector<MigSpan> out;
  // A store of schema 5 or older that no agent has upgraded has no MIG spans.
  TARMAC_TRY_ASSIGN(auto has, db_.scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND "
                                         "name = 'mig_activity'"));
  if (has.value_or(0) == 0) return out;
  TARMAC_TRY_ASSIGN(auto st, db_.prepare("SELECT gpu, gpu_instance, start_ms, end_ms, profile, slices, class, source "
                                         "FROM mig_activity WHERE end_ms >= ? AND start_ms < ? "
                                         "ORDER BY gpu, gpu_instance, start_ms"));
  bind_range(st, range);
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, st.step());
    if (!row) break;
    MigSpan s;
    s.gpu = static_cast<unsigned>(st.int64(0));
    s.gpu_instance = static_cast<unsigned>(st.int64(1));
    s.start_ms = st.int64(2);
    s.end_ms = st.int64(3);
    s.profile = st.text(4);
    s.slices = static_cast<unsigned>(std::clamp<long long>(st.int64(5), 0, 8));
    s.activity = activity_from_name(st.text(6)).value_or(gpu::Activity::Idle);
    s.measured = st.text(7) == "gpm";
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

// The spans' query; a store of schema 3 or older that no agent has upgraded lacks
// listed_after_start, and reads it as not proven.
Result<std::string> select_spans(Database& db) {
  TARMAC_TRY_ASSIGN(const bool has_listed, table_has(db, "process", "listed_after_start"));
  return fmt::format("SELECT gpu, pid, first_ms, last_ms, start_unix, user, command, container, slurm_job, "
                     "mem_used_mib_max, {} FROM process WHERE last_ms >= ? AND first_ms < ?",
                     has_listed ? "listed_after_start" : "NULL");
}

Result<std::vector<ProcessSpan>> read_spans(Statement& st) {
  std::vector<ProcessSpan> out;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, st.step());
    if (!row) break;
    ProcessSpan p;
    p.gpu = static_cast<unsigned>(st.int64(0));
    p.pid = static_cast<unsigned>(st.int64(1));
    p.first_ms = st.int64(2);
    p.last_ms = st.int64(3);
    p.start_unix = st.opt_int64(4);
    p.user = st.text(5);
    p.command = st.text(6);
    p.container = st.text(7);
    p.slurm_job = st.text(8);
    p.mem_used_mib_max = st.int64(9);
    p.listed_after_start = st.opt_int64(10).value_or(0) == 1;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

Result<std::vector<ProcessSpan>> Reader::processes(const TimeRange& range) {
  TARMAC_TRY_ASSIGN(const auto select, select_spans(db_));
  TARMAC_TRY_ASSIGN(auto st, db_.prepare(fmt::format("{} ORDER BY first_ms, gpu", select)));
  bind_range(st, range);
  return read_spans(st);
}

Result<std::vector<ProcessSpan>> Reader::processes_of(unsigned gpu, unsigned pid, const TimeRange& range) {
  TARMAC_TRY_ASSIGN(auto each, processes_of(std::vector<SpanQuery>{{gpu, pid, range}}));
  return std::move(each.front());
}

Result<std::vector<std::vector<ProcessSpan>>> Reader::processes_of(const std::vector<SpanQuery>& queries) {
  TARMAC_TRY_ASSIGN(const auto select, select_spans(db_));
  TARMAC_TRY_ASSIGN(auto st, db_.prepare(fmt::format("{} AND gpu = ? AND pid = ? ORDER BY first_ms", select)));
  std::vector<std::vector<ProcessSpan>> out;
  out.reserve(queries.size());
  for (const auto& q : queries) {
    st.reset();
    bind_range(st, q.range);
    st.bind(3, static_cast<long long>(q.gpu));
    st.bind(4, static_cast<long long>(q.pid));
    TARMAC_TRY_ASSIGN(auto spans, read_spans(st));
    out.push_back(std::move(spans));
  }
  return out;
}

Result<std::vector<Event>> Reader::events(const TimeRange& range) {
  TARMAC_TRY_ASSIGN(auto st, db_.prepare("SELECT ts_ms, gpu, kind, detail FROM event "
                                         "WHERE ts_ms >= ? AND ts_ms < ? ORDER BY ts_ms, id"));
  bind_range(st, range);
  std::vector<Event> out;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, st.step());
    if (!row) break;
    Event e;
    e.ts_ms = st.int64(0);
    if (!st.is_null(1)) e.gpu = static_cast<unsigned>(st.int64(1));
    e.kind = st.text(2);
    e.detail = st.text(3);
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<JobSpan>> Reader::jobs(const TimeRange& range) {
  std::vector<JobSpan> out;
  TARMAC_TRY_ASSIGN(auto has, db_.scalar("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'job_gpu'"));
  if (has.value_or(0) == 0) return out;
  TARMAC_TRY_ASSIGN(auto st, db_.prepare("SELECT job, gpu, first_ms, last_ms, user, partition FROM job_gpu "
                                         "WHERE last_ms >= ? AND first_ms < ? ORDER BY first_ms, job, gpu"));
  bind_range(st, range);
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, st.step());
    if (!row) break;
    JobSpan j;
    j.job = st.text(0);
    j.gpu = static_cast<unsigned>(st.int64(1));
    j.first_ms = st.int64(2);
    j.last_ms = st.int64(3);
    j.user = st.text(4);
    j.partition = st.text(5);
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace tarmac::store
