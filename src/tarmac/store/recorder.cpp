#include "tarmac/store/recorder.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fmt/format.h>

#include "tarmac/store/private_files.hpp"
#include "tarmac/store/schema.hpp"

namespace tarmac::store {

namespace {

constexpr long long kMinuteMs = 60LL * 1000;
constexpr long long kHourMs = 60 * kMinuteMs;

// The sums of one rollup bucket, added to the stored row (or inserted) by one upsert.
struct Bucket {
  long long samples = 0;
  long long util_sum = 0;
  long long util_max = 0;
  long long mem_util_sum = 0;
  long long mem_used_sum = 0;
  long long mem_used_max = 0;
  long long power_sum = 0;
  long long temp_max = 0;

  void add(const GpuSample& s) {
    ++samples;
    util_sum += s.util_pct.value_or(0);
    util_max = std::max(util_max, s.util_pct.value_or(0));
    mem_util_sum += s.mem_util_pct.value_or(0);
    mem_used_sum += s.mem_used_mib.value_or(0);
    mem_used_max = std::max(mem_used_max, s.mem_used_mib.value_or(0));
    power_sum += s.power_w.value_or(0);
    temp_max = std::max(temp_max, s.temp_c.value_or(0));
  }
};

std::string rollup_upsert(std::string_view table) {
  return fmt::format(
      "INSERT INTO {0}(ts_ms, gpu, samples, util_sum, util_max, mem_util_sum, mem_used_mib_sum, mem_used_mib_max, "
      "power_w_sum, temp_c_max) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(ts_ms, gpu) DO UPDATE SET "
      "samples = samples + excluded.samples, util_sum = util_sum + excluded.util_sum, "
      "util_max = max(util_max, excluded.util_max), mem_util_sum = mem_util_sum + excluded.mem_util_sum, "
      "mem_used_mib_sum = mem_used_mib_sum + excluded.mem_used_mib_sum, "
      "mem_used_mib_max = max(mem_used_mib_max, excluded.mem_used_mib_max), "
      "power_w_sum = power_w_sum + excluded.power_w_sum, temp_c_max = max(temp_c_max, excluded.temp_c_max)",
      table);
}

Result<void> write_rollups(Database& db, std::string_view table, long long width_ms,
                           const std::vector<GpuSample>& samples) {
  std::map<std::pair<long long, unsigned>, Bucket> buckets;
  for (const auto& s : samples) buckets[{s.ts_ms - s.ts_ms % width_ms, s.gpu}].add(s);
  TARMAC_TRY_ASSIGN(auto st, db.prepare(rollup_upsert(table)));
  for (const auto& [key, b] : buckets) {
    st.bind(1, key.first);
    st.bind(2, static_cast<long long>(key.second));
    const std::array<long long, 8> values = {b.samples,      b.util_sum,     b.util_max,  b.mem_util_sum,
                                             b.mem_used_sum, b.mem_used_max, b.power_sum, b.temp_max};
    for (std::size_t i = 0; i < values.size(); ++i) st.bind(static_cast<int>(i) + 3, values[i]);
    TARMAC_TRY(st.run());
  }
  return {};
}

void bind_text_or_null(Statement& st, int i, const std::string& s) {
  if (!s.empty()) {
    st.bind(i, std::string_view(s));
  } else {
    st.bind_null(i);
  }
}

// Inserts every row of `rows` through one prepared statement; `bind` binds one row's values.
template <typename Rows, typename Bind>
Result<void> insert_rows(Database& db, std::string_view sql, const Rows& rows, Bind bind) {
  if (rows.empty()) return {};
  TARMAC_TRY_ASSIGN(auto st, db.prepare(sql));
  for (const auto& row : rows) {
    bind(st, row);
    TARMAC_TRY(st.run());
  }
  return {};
}

constexpr std::string_view kInsertGpu =
    "INSERT INTO gpu(gpu, uuid, name, pci_bus_id, mem_total_mib, first_ms, last_ms) "
    "VALUES(?, ?, ?, ?, ?, ?, ?) ON CONFLICT(gpu) DO UPDATE SET "
    "uuid = excluded.uuid, name = excluded.name, pci_bus_id = excluded.pci_bus_id, "
    "mem_total_mib = excluded.mem_total_mib, last_ms = excluded.last_ms";

constexpr std::string_view kInsertSample =
    "INSERT OR REPLACE INTO gpu_sample(ts_ms, gpu, util_pct, mem_util_pct, "
    "mem_used_mib, power_w, temp_c, sm_mhz, mem_mhz, enc_pct, dec_pct, class) "
    "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

void bind_sample(Statement& st, const GpuSample& s) {
  st.bind(1, s.ts_ms);
  st.bind(2, static_cast<long long>(s.gpu));
  st.bind(3, s.util_pct);
  st.bind(4, s.mem_util_pct);
  st.bind(5, s.mem_used_mib);
  st.bind(6, s.power_w);
  st.bind(7, s.temp_c);
  st.bind(8, s.sm_mhz);
  st.bind(9, s.mem_mhz);
  st.bind(10, s.enc_pct);
  st.bind(11, s.dec_pct);
  st.bind(12, static_cast<long long>(activity_code(s.activity)));
}

constexpr std::string_view kInsertSlowSample =
    "INSERT OR REPLACE INTO gpu_slow_sample(ts_ms, gpu, pcie_tx_kbps, "
    "pcie_rx_kbps, sm_active_pct, sm_occupancy_pct, tensor_active_pct, "
    "dram_bw_pct) VALUES(?, ?, ?, ?, ?, ?, ?, ?)";

void bind_slow_sample(Statement& st, const SlowSample& s) {
  st.bind(1, s.ts_ms);
  st.bind(2, static_cast<long long>(s.gpu));
  st.bind(3, s.pcie_tx_kbps);
  st.bind(4, s.pcie_rx_kbps);
  st.bind(5, s.sm_active_pct);
  st.bind(6, s.sm_occupancy_pct);
  st.bind(7, s.tensor_active_pct);
  st.bind(8, s.dram_bw_pct);
}

constexpr std::string_view kInsertProcessSample =
    "INSERT OR REPLACE INTO process_sample(ts_ms, gpu, pid, mem_used_mib, sm_util_pct, mem_util_pct, "
    "other_util_pct) VALUES(?, ?, ?, ?, ?, ?, ?)";

void bind_process_sample(Statement& st, const ProcessSample& s) {
  st.bind(1, s.ts_ms);
  st.bind(2, static_cast<long long>(s.gpu));
  st.bind(3, static_cast<long long>(s.pid));
  st.bind(4, s.mem_used_mib);
  st.bind(5, s.sm_util_pct);
  st.bind(6, s.mem_util_pct);
  st.bind(7, s.other_util_pct);
}

constexpr std::string_view kInsertEvent = "INSERT INTO event(ts_ms, gpu, kind, detail) VALUES(?, ?, ?, ?)";

void bind_event(Statement& st, const Event& e) {
  st.bind(1, e.ts_ms);
  if (e.gpu) {
    st.bind(2, static_cast<long long>(*e.gpu));
  } else {
    st.bind_null(2);
  }
  st.bind(3, std::string_view(e.kind));
  st.bind(4, std::string_view(e.detail));
}

constexpr std::string_view kInsertActivity =
    "INSERT OR REPLACE INTO activity(gpu, start_ms, end_ms, class) VALUES(?, ?, ?, ?)";

void bind_activity(Statement& st, const ActivitySpan& s) {
  st.bind(1, static_cast<long long>(s.gpu));
  st.bind(2, s.start_ms);
  st.bind(3, s.end_ms);
  st.bind(4, std::string_view(gpu::to_string(s.activity)));
}

constexpr std::string_view kInsertMigActivity =
    "INSERT OR REPLACE INTO mig_activity(gpu, gpu_instance, start_ms, end_ms, profile, slices, class, source) "
    "VALUES(?, ?, ?, ?, ?, ?, ?, ?)";

void bind_mig_activity(Statement& st, const MigSpan& s) {
  st.bind(1, static_cast<long long>(s.gpu));
  st.bind(2, static_cast<long long>(s.gpu_instance));
  st.bind(3, s.start_ms);
  st.bind(4, s.end_ms);
  st.bind(5, std::string_view(s.profile));
  st.bind(6, static_cast<long long>(s.slices));
  st.bind(7, std::string_view(gpu::to_string(s.activity)));
  st.bind(8, std::string_view(s.measured ? "gpm" : "processes"));
}

constexpr std::string_view kInsertProcess =
    "INSERT OR REPLACE INTO process(gpu, pid, first_ms, last_ms, start_unix, "
    "user, command, container, slurm_job, mem_used_mib_max, listed_after_start) "
    "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

void bind_process(Statement& st, const ProcessSpan& p) {
  st.bind(1, static_cast<long long>(p.gpu));
  st.bind(2, static_cast<long long>(p.pid));
  st.bind(3, p.first_ms);
  st.bind(4, p.last_ms);
  st.bind(5, p.start_unix);
  bind_text_or_null(st, 6, p.user);
  bind_text_or_null(st, 7, p.command);
  bind_text_or_null(st, 8, p.container);
  bind_text_or_null(st, 9, p.slurm_job);
  st.bind(10, p.mem_used_mib_max);
  st.bind(11, p.listed_after_start ? 1LL : 0LL);
}

constexpr std::string_view kInsertJob =
    "INSERT OR REPLACE INTO job_gpu(job, gpu, first_ms, last_ms, user, partition) VALUES(?, ?, ?, ?, ?, ?)";

void bind_job(Statement& st, const JobSpan& j) {
  st.bind(1, std::string_view(j.job));
  st.bind(2, static_cast<long long>(j.gpu));
  st.bind(3, j.first_ms);
  st.bind(4, j.last_ms);
  bind_text_or_null(st, 5, j.user);
  bind_text_or_null(st, 6, j.partition);
}

}  // namespace

std::string database_path(const std::string& state_dir) { return state_dir + "/tarmac.db"; }

Recorder::Recorder(RecorderOptions options) : options_(std::move(options)) {}

void Recorder::add(const GpuInfo& info, long long seen_ms) {
  auto [it, inserted] = gpus_.try_emplace(info.gpu, GpuSeen{info, seen_ms, seen_ms});
  if (!inserted) {
    it->second.info = info;
    it->second.last_ms = std::max(it->second.last_ms, seen_ms);
    it->second.first_ms = std::min(it->second.first_ms, seen_ms);
  }
}
void Recorder::add(const GpuSample& s) {
  samples_.push_back(s);
  enforce_bound();
}
void Recorder::add(const SlowSample& s) { slow_samples_.push_back(s); }
void Recorder::add(const ProcessSample& s) {
  process_samples_.push_back(s);
  enforce_bound();
}
void Recorder::add(const Event& e) { events_.push_back(e); }
void Recorder::update(const ActivitySpan& s) { activity_[{s.gpu, s.start_ms}] = s; }
void Recorder::update(const MigSpan& s) { mig_activity_[{s.gpu, s.gpu_instance, s.start_ms}] = s; }
void Recorder::update(const ProcessSpan& s) { processes_[{s.gpu, s.pid, s.first_ms}] = s; }
void Recorder::update(const JobSpan& s) { jobs_[{s.job, s.gpu, s.first_ms}] = s; }

std::size_t Recorder::pending_rows() const {
  return samples_.size() + slow_samples_.size() + process_samples_.size() + events_.size() + activity_.size() +
         mig_activity_.size() + processes_.size() + jobs_.size() + gpus_.size();
}

void Recorder::enforce_bound() {
  // The samples are the bulk; spans and events are few and carry what the report needs most.
  const std::size_t rows = samples_.size() + process_samples_.size();
  if (rows <= options_.max_pending_rows) return;
  const std::size_t excess = rows - options_.max_pending_rows + options_.max_pending_rows / 10;
  const std::size_t from_processes = std::min(excess, process_samples_.size());
  process_samples_.erase(process_samples_.begin(), process_samples_.begin() + static_cast<long>(from_processes));
  const std::size_t from_samples = std::min(excess - from_processes, samples_.size());
  samples_.erase(samples_.begin(), samples_.begin() + static_cast<long>(from_samples));
  dropped_ += from_processes + from_samples;
}

Result<void> Recorder::open() {
  // Created (or an older store tightened) before SQLite opens it, so that no moment exists when
  // the database, or the -wal and -shm SQLite gives its mode, is readable by everyone.
  TARMAC_TRY(prepare_private_store(options_.path));
  TARMAC_TRY_ASSIGN(auto db, Database::open(options_.path, Database::Mode::ReadWrite));
  TARMAC_TRY(ensure_schema(db));
  db_.emplace(std::move(db));
  return {};
}

Result<void> Recorder::write_batch() {
  Database& db = *db_;
  TARMAC_TRY(insert_rows(db, kInsertGpu, gpus_, [](Statement& st, const auto& entry) {
    const auto& [index, seen] = entry;
    st.bind(1, static_cast<long long>(index));
    bind_text_or_null(st, 2, seen.info.uuid);
    bind_text_or_null(st, 3, seen.info.name);
    bind_text_or_null(st, 4, seen.info.pci_bus_id);
    st.bind(5, seen.info.mem_total_mib);
    st.bind(6, seen.first_ms);
    st.bind(7, seen.last_ms);
  }));
  TARMAC_TRY(insert_rows(db, kInsertSample, samples_, bind_sample));
  if (!samples_.empty()) {
    TARMAC_TRY(write_rollups(db, "gpu_minute", kMinuteMs, samples_));
    TARMAC_TRY(write_rollups(db, "gpu_hour", kHourMs, samples_));
  }
  TARMAC_TRY(insert_rows(db, kInsertSlowSample, slow_samples_, bind_slow_sample));
  TARMAC_TRY(insert_rows(db, kInsertProcessSample, process_samples_, bind_process_sample));
  TARMAC_TRY(insert_rows(db, kInsertEvent, events_, bind_event));
  // The spans are kept by key, so that an updated span replaces the one pending.
  TARMAC_TRY(insert_rows(db, kInsertActivity, activity_,
                         [](Statement& st, const auto& entry) { bind_activity(st, entry.second); }));
  TARMAC_TRY(insert_rows(db, kInsertMigActivity, mig_activity_,
                         [](Statement& st, const auto& entry) { bind_mig_activity(st, entry.second); }));
  TARMAC_TRY(insert_rows(db, kInsertProcess, processes_,
                         [](Statement& st, const auto& entry) { bind_process(st, entry.second); }));
  TARMAC_TRY(insert_rows(db, kInsertJob, jobs_, [](Statement& st, const auto& entry) { bind_job(st, entry.second); }));
  return {};
}

FlushStatus Recorder::flush() {
  FlushStatus status;
  const std::size_t rows = pending_rows();
  auto fail = [&](const Error& e) {
    status.ok = false;
    status.failure = failure_of(e);
    if (status.failure == Failure::None) status.failure = Failure::Other;
    status.message = e.message;
    status.pending = pending_rows();
    status.dropped = dropped_;
    // A connection that failed to write may hold a broken view of a file that vanished or turned
    // read-only: open afresh next time. A full disk keeps it (the file itself is fine).
    if (status.failure != Failure::DiskFull && status.failure != Failure::Busy) db_.reset();
    return status;
  };
  // A store deleted or renamed under the agent is created afresh rather than written into the void.
  if (db_ && db_->file_moved()) db_.reset();
  if (!db_) {
    if (auto r = open(); !r.ok()) return fail(r.error());
  }
  if (rows == 0) return status;
  if (auto r = db_->exec("BEGIN IMMEDIATE"); !r.ok()) return fail(r.error());
  if (auto r = write_batch(); !r.ok()) {
    (void)db_->exec("ROLLBACK");
    return fail(r.error());
  }
  if (auto r = db_->exec("COMMIT"); !r.ok()) {
    (void)db_->exec("ROLLBACK");
    return fail(r.error());
  }
  status.written = rows;
  status.dropped = dropped_;
  gpus_.clear();
  samples_.clear();
  slow_samples_.clear();
  process_samples_.clear();
  events_.clear();
  activity_.clear();
  mig_activity_.clear();
  processes_.clear();
  jobs_.clear();
  dropped_ = 0;
  samples_.shrink_to_fit();
  process_samples_.shrink_to_fit();
  return status;
}

Result<void> Recorder::prune(long long now_ms) {
  if (!db_) return {};
  const auto& r = options_.retention;
  struct Rule {
    const char* sql;
    long long keep_ms;
  };
  const std::array<Rule, 10> rules = {{
      {"DELETE FROM gpu_sample WHERE ts_ms < ?", r.samples_ms},
      {"DELETE FROM gpu_slow_sample WHERE ts_ms < ?", r.samples_ms},
      {"DELETE FROM process_sample WHERE ts_ms < ?", r.samples_ms},
      {"DELETE FROM gpu_minute WHERE ts_ms < ?", r.minutes_ms},
      {"DELETE FROM gpu_hour WHERE ts_ms < ?", r.hours_ms},
      {"DELETE FROM activity WHERE end_ms < ?", r.hours_ms},
      {"DELETE FROM mig_activity WHERE end_ms < ?", r.hours_ms},
      {"DELETE FROM process WHERE last_ms < ?", r.hours_ms},
      {"DELETE FROM job_gpu WHERE last_ms < ?", r.hours_ms},
      {"DELETE FROM event WHERE ts_ms < ?", r.events_ms},
  }};
  TARMAC_TRY(db_->exec("BEGIN IMMEDIATE"));
  for (const auto& rule : rules) {
    if (rule.keep_ms <= 0) continue;
    auto st = db_->prepare(rule.sql);
    if (!st.ok()) {
      (void)db_->exec("ROLLBACK");
      return st.take_error();
    }
    st->bind(1, now_ms - rule.keep_ms);
    if (auto run = st->run(); !run.ok()) {
      (void)db_->exec("ROLLBACK");
      return run;
    }
  }
  return db_->exec("COMMIT");
}

}  // namespace tarmac::store
