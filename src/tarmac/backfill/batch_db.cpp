// Batches and their requests in the agent's store (batch_db.hpp, docs/backfill.md "State").
#include "tarmac/backfill/batch_db.hpp"

#include <fmt/format.h>

#include "tarmac/store/schema.hpp"

namespace tarmac::backfill {

namespace {

constexpr const char* kTables = R"sql(
CREATE TABLE IF NOT EXISTS backfill_batch(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  uid INTEGER NOT NULL, user TEXT NOT NULL, name TEXT NOT NULL, model TEXT NOT NULL, server TEXT NOT NULL,
  time_window TEXT NOT NULL, parallel INTEGER NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL,
  output_path TEXT NOT NULL, output_dev INTEGER NOT NULL, output_ino INTEGER NOT NULL,
  output_bytes INTEGER NOT NULL, requests INTEGER NOT NULL,
  submitted_unix_ms INTEGER NOT NULL, started_unix_ms INTEGER, ended_unix_ms INTEGER,
  gpu_ms INTEGER NOT NULL, windows TEXT NOT NULL,
  body_bytes INTEGER NOT NULL DEFAULT 0, output_btime_ns INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS backfill_batch_by_state ON backfill_batch(state);
CREATE TABLE IF NOT EXISTS backfill_request(
  batch INTEGER NOT NULL, idx INTEGER NOT NULL, custom_id TEXT NOT NULL, url TEXT NOT NULL, body TEXT NOT NULL,
  state TEXT NOT NULL, attempts INTEGER NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER,
  started_unix_ms INTEGER, ended_unix_ms INTEGER, error TEXT NOT NULL, out_offset INTEGER, out_len INTEGER,
  PRIMARY KEY(batch, idx)) WITHOUT ROWID;
DROP INDEX IF EXISTS backfill_request_by_state;
CREATE INDEX IF NOT EXISTS backfill_request_progress ON backfill_request(batch, state, idx, prompt_tokens,
  completion_tokens, started_unix_ms, ended_unix_ms);
)sql";

// Version 1 to 2: the columns quotas and resume need; bodies counted as stored, and those of ended
// batches dropped (docs/backfill.md "Limits").
constexpr const char* kUpgradeFrom1 = R"sql(
ALTER TABLE backfill_batch ADD COLUMN body_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE backfill_batch ADD COLUMN output_btime_ns INTEGER NOT NULL DEFAULT 0;
UPDATE backfill_request SET body = '' WHERE batch IN
  (SELECT id FROM backfill_batch WHERE state NOT IN ('queued', 'running'));
UPDATE backfill_batch SET body_bytes =
  (SELECT CAST(total(length(CAST(body AS BLOB))) AS INTEGER) FROM backfill_request WHERE batch = backfill_batch.id);
)sql";

constexpr const char* kUnfinished = "state IN ('queued', 'running')";
// What the quotas count and a new output is checked against: the unfinished, and those being stored.
constexpr const char* kHeld = "state IN ('loading', 'queued', 'running')";
constexpr const char* kLoading = "loading";

constexpr const char* kBatchColumns =
    "id, uid, user, name, model, server, time_window, parallel, state, reason, output_path, output_dev, output_ino, "
    "output_bytes, requests, submitted_unix_ms, started_unix_ms, ended_unix_ms, gpu_ms, windows, body_bytes, "
    "output_btime_ns";

constexpr const char* kRowColumns =
    "idx, custom_id, url, state, attempts, prompt_tokens, completion_tokens, started_unix_ms, ended_unix_ms, error, "
    "out_offset, out_len";

std::optional<long long> positive(long long v) { return v > 0 ? std::optional<long long>(v) : std::nullopt; }

Result<void> create_or_upgrade(store::Database& db) {
  TARMAC_TRY(db.exec("BEGIN IMMEDIATE"));
  auto body = [&]() -> Result<void> {
    TARMAC_TRY_ASSIGN(auto version,
                      db.scalar("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'backfill_version'"));
    if (version && *version > kBatchTablesVersion) {
      return make_error(Error::Code::Invalid,
                        fmt::format("the store's backfill tables have version {}, newer than this tarmac reads ({}): "
                                    "upgrade tarmac",
                                    *version, kBatchTablesVersion));
    }
    if (version && *version == 1) TARMAC_TRY(db.exec(kUpgradeFrom1));
    TARMAC_TRY(db.exec(kTables));
    return db.exec(fmt::format("INSERT OR REPLACE INTO meta(key, value) VALUES('backfill_version', '{}')",
                               kBatchTablesVersion));
  };
  if (auto r = body(); !r.ok()) {
    (void)db.exec("ROLLBACK");
    return r;
  }
  return db.exec("COMMIT");
}

// Binds every column after id (2..22) of `b`.
void bind_batch(store::Statement& s, const Batch& b) {
  s.bind(2, static_cast<long long>(b.uid));
  s.bind(3, std::string_view(b.user));
  s.bind(4, std::string_view(b.name));
  s.bind(5, std::string_view(b.model));
  s.bind(6, std::string_view(b.server));
  s.bind(7, std::string_view(b.window));
  s.bind(8, static_cast<long long>(b.parallel));
  s.bind(9, to_string(b.state));
  s.bind(10, std::string_view(b.reason));
  s.bind(11, std::string_view(b.output_path));
  s.bind(12, b.output_dev);
  s.bind(13, b.output_ino);
  s.bind(14, b.output_bytes);
  s.bind(15, b.requests);
  s.bind(16, b.submitted_ms);
  s.bind(17, positive(b.started_ms));
  s.bind(18, positive(b.ended_ms));
  s.bind(19, b.gpu_ms);
  s.bind(20, spans_text(b.windows));
  s.bind(21, b.body_bytes);
  s.bind(22, b.output_btime_ns);
}

Batch row_to_batch(const store::Statement& s) {
  Batch b;
  b.id = s.int64(0);
  b.uid = static_cast<uid_t>(s.int64(1));
  b.user = s.text(2);
  b.name = s.text(3);
  b.model = s.text(4);
  b.server = s.text(5);
  b.window = s.text(6);
  b.parallel = static_cast<unsigned>(std::max(1LL, s.int64(7)));
  b.state = batch_state_from(s.text(8)).value_or(BatchState::Failed);
  b.reason = s.text(9);
  b.output_path = s.text(10);
  b.output_dev = s.int64(11);
  b.output_ino = s.int64(12);
  b.output_bytes = std::max(0LL, s.int64(13));
  b.requests = s.int64(14);
  b.submitted_ms = s.int64(15);
  b.started_ms = s.opt_int64(16).value_or(0);
  b.ended_ms = s.opt_int64(17).value_or(0);
  b.gpu_ms = s.int64(18);
  b.windows = spans_from(s.text(19));
  b.body_bytes = s.int64(20);
  b.output_btime_ns = s.int64(21);
  return b;
}

RequestRow row_to_request(const store::Statement& s) {
  RequestRow r;
  r.index = s.int64(0);
  r.custom_id = s.text(1);
  r.endpoint = endpoint_from_url(s.text(2)).value_or(Endpoint::ChatCompletions);
  r.state = request_state_from(s.text(3)).value_or(RequestState::Pending);
  r.attempts = static_cast<int>(s.int64(4));
  r.prompt_tokens = s.opt_int64(5);
  r.completion_tokens = s.opt_int64(6);
  r.started_ms = s.opt_int64(7).value_or(0);
  r.ended_ms = s.opt_int64(8).value_or(0);
  r.error = s.text(9);
  r.out_offset = s.opt_int64(10).value_or(-1);
  r.out_len = s.opt_int64(11).value_or(0);
  return r;
}

}  // namespace

Result<BatchDb> BatchDb::open(const std::string& path) {
  TARMAC_TRY_ASSIGN(auto db, store::Database::open(path, store::Database::Mode::ReadWrite));
  TARMAC_TRY(store::ensure_schema(db));
  TARMAC_TRY(create_or_upgrade(db));
  return BatchDb(std::move(db));
}

Result<store::Statement*> BatchDb::cached(const std::string& sql) {
  auto it = cached_.find(sql);
  if (it == cached_.end()) {
    TARMAC_TRY_ASSIGN(auto s, db_.prepare(sql));
    it = cached_.emplace(sql, std::move(s)).first;
  }
  it->second.reset();
  return &it->second;
}

Result<void> BatchDb::in_transaction(const std::function<Result<void>()>& body) {
  const auto run = [&](const char* sql) -> Result<void> {
    TARMAC_TRY_ASSIGN(auto* s, cached(sql));
    return s->run();
  };
  TARMAC_TRY(run("BEGIN IMMEDIATE"));
  if (auto r = body(); !r.ok()) {
    (void)run("ROLLBACK");
    return r;
  }
  if (auto r = run("COMMIT"); !r.ok()) {
    (void)run("ROLLBACK");
    return r;
  }
  return {};
}

namespace {

// The requests' count and their bodies' bytes, into `batch`.
void count_requests(Batch& batch, const std::vector<BatchRequest>& requests) {
  batch.requests = static_cast<long long>(requests.size());
  batch.body_bytes = 0;
  for (const auto& r : requests) batch.body_bytes += static_cast<long long>(r.body.size());
}

}  // namespace

Result<void> BatchDb::insert_batch(Batch& batch) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare(fmt::format("INSERT INTO backfill_batch({}) VALUES(NULL, ?2, ?3, ?4, ?5, ?6, "
                                                    "?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
                                                    "?20, ?21, ?22) RETURNING id",
                                                    kBatchColumns)));
  bind_batch(s, batch);
  TARMAC_TRY_ASSIGN(const bool row, s.step());
  if (!row) return make_error(Error::Code::Internal, "INSERT ... RETURNING gave no id");
  batch.id = s.int64(0);
  return {};
}

Result<void> BatchDb::insert_requests(long long id, const std::vector<BatchRequest>& requests, std::size_t from,
                                      std::size_t to) {
  TARMAC_TRY_ASSIGN(auto* insert, cached("INSERT INTO backfill_request(batch, idx, custom_id, url, body, state, "
                                         "attempts, error) VALUES(?1, ?2, ?3, ?4, ?5, 'pending', 0, '')"));
  for (std::size_t i = from; i < std::min(to, requests.size()); ++i) {
    insert->reset();
    insert->bind(1, id);
    insert->bind(2, static_cast<long long>(i));
    insert->bind(3, std::string_view(requests[i].custom_id));
    insert->bind(4, to_url(requests[i].endpoint));
    insert->bind(5, std::string_view(requests[i].body));
    TARMAC_TRY(insert->run());
  }
  insert->reset();
  return {};
}

Result<void> BatchDb::create(Batch& batch, const std::vector<BatchRequest>& requests) {
  count_requests(batch, requests);
  Batch row = batch;
  const auto insert_all = [&]() -> Result<void> {
    TARMAC_TRY(insert_batch(row));
    return insert_requests(row.id, requests, 0, requests.size());
  };
  TARMAC_TRY(in_transaction(insert_all));
  batch.id = row.id;
  return {};
}

Result<void> BatchDb::begin_loading(Batch& batch, const std::vector<BatchRequest>& requests) {
  count_requests(batch, requests);
  Batch row = batch;
  const auto insert_loading = [&]() -> Result<void> {
    TARMAC_TRY(insert_batch(row));
    TARMAC_TRY_ASSIGN(auto mark, db_.prepare("UPDATE backfill_batch SET state = ?2 WHERE id = ?1"));
    mark.bind(1, row.id);
    mark.bind(2, std::string_view(kLoading));
    return mark.run();
  };
  TARMAC_TRY(in_transaction(insert_loading));
  batch.id = row.id;
  return {};
}

Result<void> BatchDb::load(long long id, const std::vector<BatchRequest>& requests, std::size_t from, std::size_t to) {
  return in_transaction([&] { return insert_requests(id, requests, from, to); });
}

Result<bool> BatchDb::loaded(long long id) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare("UPDATE backfill_batch SET state = 'queued' WHERE id = ?1 AND state = ?2"));
  s.bind(1, id);
  s.bind(2, std::string_view(kLoading));
  TARMAC_TRY(s.run());
  return db_.changes() == 1;
}

Result<long long> BatchDb::drop_loading(std::optional<long long> id) {
  long long dropped = 0;
  const auto drop = [&]() -> Result<void> {
    TARMAC_TRY_ASSIGN(auto rows, db_.prepare("DELETE FROM backfill_request WHERE batch IN (SELECT id FROM "
                                             "backfill_batch WHERE state = ?1 AND (?2 IS NULL OR id = ?2))"));
    rows.bind(1, std::string_view(kLoading));
    rows.bind(2, id);
    TARMAC_TRY(rows.run());
    TARMAC_TRY_ASSIGN(auto batches, db_.prepare("DELETE FROM backfill_batch WHERE state = ?1 AND (?2 IS NULL OR id = ?2)"));
    batches.bind(1, std::string_view(kLoading));
    batches.bind(2, id);
    TARMAC_TRY(batches.run());
    dropped = db_.changes();
    return {};
  };
  TARMAC_TRY(in_transaction(drop));
  return dropped;
}

Result<void> BatchDb::save(const Batch& batch) {
  const auto update = [&]() -> Result<void> {
    TARMAC_TRY_ASSIGN(auto s, db_.prepare("UPDATE backfill_batch SET uid = ?2, user = ?3, name = ?4, model = ?5, "
                                          "server = ?6, time_window = ?7, parallel = ?8, state = ?9, reason = ?10, "
                                          "output_path = ?11, output_dev = ?12, output_ino = ?13, requests = ?15, "
                                          "submitted_unix_ms = ?16, started_unix_ms = ?17, ended_unix_ms = ?18, "
                                          "gpu_ms = ?19, body_bytes = ?21, output_btime_ns = ?22 "
                                          "WHERE id = ?1"));
    s.bind(1, batch.id);
    bind_batch(s, batch);
    TARMAC_TRY(s.run());
    return drop_bodies_if_ended(batch);
  };
  return in_transaction(update);
}

Result<void> BatchDb::save_run(const Batch& batch) {
  const auto update = [&]() -> Result<void> {
    TARMAC_TRY_ASSIGN(auto s, db_.prepare("UPDATE backfill_batch SET state = ?2, reason = ?3, started_unix_ms = ?4, "
                                          "ended_unix_ms = ?5 WHERE id = ?1"));
    s.bind(1, batch.id);
    s.bind(2, to_string(batch.state));
    s.bind(3, std::string_view(batch.reason));
    s.bind(4, positive(batch.started_ms));
    s.bind(5, positive(batch.ended_ms));
    TARMAC_TRY(s.run());
    return drop_bodies_if_ended(batch);
  };
  return in_transaction(update);
}

Result<void> BatchDb::add_gpu_ms(long long id, long long ms) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare("UPDATE backfill_batch SET gpu_ms = gpu_ms + ?2 WHERE id = ?1"));
  s.bind(1, id);
  s.bind(2, ms);
  return s.run();
}

Result<void> BatchDb::add_window(long long id, Span span) {
  const auto update = [&]() -> Result<void> {
    TARMAC_TRY_ASSIGN(auto read, db_.prepare("SELECT windows FROM backfill_batch WHERE id = ?1"));
    read.bind(1, id);
    TARMAC_TRY_ASSIGN(const bool row, read.step());
    if (!row) return {};
    auto spans = spans_from(read.text(0));
    add_span(spans, span);
    TARMAC_TRY_ASSIGN(auto write, db_.prepare("UPDATE backfill_batch SET windows = ?2 WHERE id = ?1"));
    write.bind(1, id);
    write.bind(2, spans_text(spans));
    return write.run();
  };
  return in_transaction(update);
}

Result<void> BatchDb::add_event(long long ts_ms, const std::string& kind, const std::string& detail) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare("INSERT INTO event(ts_ms, gpu, kind, detail) VALUES(?1, NULL, ?2, ?3)"));
  s.bind(1, ts_ms);
  s.bind(2, std::string_view(kind));
  s.bind(3, std::string_view(detail));
  return s.run();
}

Result<void> BatchDb::drop_bodies_if_ended(const Batch& batch) {
  if (!ended(batch.state)) return {};
  TARMAC_TRY_ASSIGN(auto drop, db_.prepare("UPDATE backfill_request SET body = '' WHERE batch = ?1 AND body != ''"));
  drop.bind(1, batch.id);
  return drop.run();
}

Result<Holding> BatchDb::holding(std::optional<uid_t> uid) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare(fmt::format("SELECT count(*), total(body_bytes) FROM backfill_batch WHERE {} "
                                                    "AND (?1 IS NULL OR uid = ?1)",
                                                    kHeld)));
  s.bind(1, uid ? std::optional<long long>(*uid) : std::nullopt);
  TARMAC_TRY_ASSIGN(const bool row, s.step());
  if (!row) return Holding{};
  return Holding{s.int64(0), static_cast<long long>(s.real(1))};
}

Result<std::optional<long long>> BatchDb::unfinished_on(long long dev, long long ino) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare(fmt::format("SELECT id FROM backfill_batch WHERE output_dev = ?1 AND "
                                                    "output_ino = ?2 AND {} LIMIT 1",
                                                    kHeld)));
  s.bind(1, dev);
  s.bind(2, ino);
  TARMAC_TRY_ASSIGN(const bool row, s.step());
  if (!row) return std::optional<long long>();
  return std::optional<long long>(s.int64(0));
}

Result<std::optional<Batch>> BatchDb::batch(long long id) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare(fmt::format("SELECT {} FROM backfill_batch WHERE id = ?1 AND state != '{}'",
                                                    kBatchColumns, kLoading)));
  s.bind(1, id);
  TARMAC_TRY_ASSIGN(const bool row, s.step());
  if (!row) return std::optional<Batch>();
  return std::optional<Batch>(row_to_batch(s));
}

Result<std::vector<Batch>> BatchDb::batches(Which which) {
  const std::string where = which == Which::All ? fmt::format("WHERE state != '{}'", kLoading)
                                                 : fmt::format("WHERE {}", kUnfinished);
  TARMAC_TRY_ASSIGN(auto s, db_.prepare(fmt::format("SELECT {} FROM backfill_batch {} ORDER BY id", kBatchColumns,
                                                    where)));
  std::vector<Batch> out;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, s.step());
    if (!row) break;
    out.push_back(row_to_batch(s));
  }
  return out;
}

Result<Progress> BatchDb::progress(long long id) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare("SELECT state, count(*), total(prompt_tokens), total(completion_tokens), "
                                        "min(started_unix_ms), max(ended_unix_ms) FROM backfill_request "
                                        "WHERE batch = ?1 GROUP BY state"));
  s.bind(1, id);
  Progress p;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, s.step());
    if (!row) break;
    const long long count = s.int64(1);
    switch (request_state_from(s.text(0)).value_or(RequestState::Pending)) {
      case RequestState::Pending: p.pending += count; break;
      case RequestState::InFlight: p.in_flight += count; break;
      case RequestState::Done: p.done += count; break;
      case RequestState::Failed: p.failed += count; break;
    }
    p.prompt_tokens += static_cast<long long>(s.real(2));
    p.completion_tokens += static_cast<long long>(s.real(3));
    if (const auto first = s.opt_int64(4); first && (p.first_started_ms == 0 || *first < p.first_started_ms)) {
      p.first_started_ms = *first;
    }
    p.last_ended_ms = std::max(p.last_ended_ms, s.opt_int64(5).value_or(0));
  }
  return p;
}

Result<bool> BatchDb::unanswered(long long id) {
  TARMAC_TRY_ASSIGN(auto* statement, cached("SELECT EXISTS(SELECT 1 FROM backfill_request WHERE batch = ?1 AND "
                                            "state IN ('pending', 'in_flight'))"));
  const Hold s(*statement);
  s->bind(1, id);
  TARMAC_TRY_ASSIGN(const bool row, s->step());
  return row && s->int64(0) != 0;
}

Result<std::vector<RequestRow>> BatchDb::rows(long long id) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare(fmt::format("SELECT {} FROM backfill_request WHERE batch = ?1 ORDER BY idx",
                                                    kRowColumns)));
  s.bind(1, id);
  std::vector<RequestRow> out;
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, s.step());
    if (!row) break;
    out.push_back(row_to_request(s));
  }
  return out;
}

Result<std::optional<RequestState>> BatchDb::state_of(long long id, long long index) {
  TARMAC_TRY_ASSIGN(auto* statement, cached("SELECT state FROM backfill_request WHERE batch = ?1 AND idx = ?2"));
  const Hold s(*statement);
  s->bind(1, id);
  s->bind(2, index);
  TARMAC_TRY_ASSIGN(const bool row, s->step());
  if (!row) return std::optional<RequestState>();
  return request_state_from(s->text(0));
}

Result<std::vector<Sendable>> BatchDb::take_pending(long long id, std::size_t n, long long now_ms) {
  std::vector<Sendable> out;
  const auto take = [&]() -> Result<void> {
    {
      TARMAC_TRY_ASSIGN(auto* select, cached(fmt::format("SELECT {}, body FROM backfill_request WHERE batch = ?1 AND "
                                                         "state = 'pending' ORDER BY idx LIMIT ?2",
                                                         kRowColumns)));
      const Hold s(*select);
      s->bind(1, id);
      s->bind(2, static_cast<long long>(n));
      for (;;) {
        TARMAC_TRY_ASSIGN(const bool row, s->step());
        if (!row) break;
        out.push_back(Sendable{row_to_request(*s), s->text(12)});
      }
    }
    TARMAC_TRY_ASSIGN(auto* update, cached("UPDATE backfill_request SET state = 'in_flight', attempts = attempts + 1, "
                                           "started_unix_ms = ?3 WHERE batch = ?1 AND idx = ?2"));
    const Hold mark(*update);
    for (auto& r : out) {
      mark->bind(1, id);
      mark->bind(2, r.row.index);
      mark->bind(3, now_ms);
      TARMAC_TRY(mark->run());
      r.row.state = RequestState::InFlight;
      r.row.attempts += 1;
      r.row.started_ms = now_ms;
    }
    return {};
  };
  TARMAC_TRY(in_transaction(take));
  return out;
}

Result<void> BatchDb::back_to_pending(long long id, long long index, const std::string& error) {
  TARMAC_TRY_ASSIGN(auto s, db_.prepare("UPDATE backfill_request SET state = 'pending', error = ?3 WHERE batch = ?1 "
                                        "AND idx = ?2 AND state = 'in_flight'"));
  s.bind(1, id);
  s.bind(2, index);
  s.bind(3, std::string_view(error));
  return s.run();
}

Result<void> BatchDb::commit(long long id, const Commit& c) {
  return in_transaction([&]() -> Result<void> {
    {
      TARMAC_TRY_ASSIGN(auto* update, cached("UPDATE backfill_request SET state = ?3, prompt_tokens = ?4, "
                                             "completion_tokens = ?5, ended_unix_ms = ?6, error = ?7, "
                                             "out_offset = ?8, out_len = ?9 WHERE batch = ?1 AND idx = ?2"));
      const Hold answer(*update);
      for (const auto& a : c.answered) {
        answer->bind(1, id);
        answer->bind(2, a.index);
        answer->bind(3, to_string(a.state));
        answer->bind(4, a.prompt_tokens);
        answer->bind(5, a.completion_tokens);
        answer->bind(6, positive(a.ended_ms));
        answer->bind(7, std::string_view(a.error));
        answer->bind(8, a.out_offset);
        answer->bind(9, a.out_len);
        TARMAC_TRY(answer->run());
      }
    }
    TARMAC_TRY_ASSIGN(auto lose, db_.prepare("UPDATE backfill_request SET state = 'pending', out_offset = NULL, "
                                             "out_len = NULL, error = 'its line was missing from the output' "
                                             "WHERE batch = ?1 AND idx = ?2"));
    for (long long index : c.lost) {
      lose.bind(1, id);
      lose.bind(2, index);
      TARMAC_TRY(lose.run());
    }
    if (c.in_flight_to_pending) {
      TARMAC_TRY_ASSIGN(auto back, db_.prepare("UPDATE backfill_request SET state = 'pending' WHERE batch = ?1 AND "
                                               "state = 'in_flight'"));
      back.bind(1, id);
      TARMAC_TRY(back.run());
    }
    TARMAC_TRY_ASSIGN(auto* update, cached("UPDATE backfill_batch SET output_bytes = ?2 WHERE id = ?1"));
    const Hold bytes(*update);
    bytes->bind(1, id);
    bytes->bind(2, c.output_bytes);
    return bytes->run();
  });
}

}  // namespace tarmac::backfill
