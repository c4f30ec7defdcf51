#include "tarmac/store/sqlite.hpp"

#include <fmt/format.h>
#include <sqlite3.h>
#include <utility>

namespace tarmac::store {

namespace {

// What the recorder does about a failure, from SQLite's (extended) result code.
Failure classify_failure(int code) {
  switch (code & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW: return Failure::None;
    case SQLITE_FULL: return Failure::DiskFull;
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_AUTH: return Failure::ReadOnly;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return Failure::Busy;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return Failure::Corrupt;
    case SQLITE_IOERR:
      // A write that fails for lack of space can surface as an I/O error (ENOSPC on the WAL).
      return Failure::DiskFull;
    default: return Failure::Other;
  }
}

Error sqlite_error(sqlite3* db, int rc, std::string_view what) {
  return make_error(Error::Code::Io, fmt::format("{}: {}", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)),
                    classify_failure(db ? sqlite3_extended_errcode(db) : rc));
}

}  // namespace

Failure failure_of(const Error& error) {
  const Failure* failure = error.cause_as<Failure>();
  return failure != nullptr ? *failure : Failure::None;
}


Statement::Statement(Statement&& o) noexcept : db_(std::exchange(o.db_, nullptr)), stmt_(std::exchange(o.stmt_, nullptr)) {}

Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    sqlite3_finalize(stmt_);
    db_ = std::exchange(o.db_, nullptr);
    stmt_ = std::exchange(o.stmt_, nullptr);
  }
  return *this;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::bind(int i, long long v) { sqlite3_bind_int64(stmt_, i, v); }
void Statement::bind(int i, std::optional<long long> v) {
  if (v) {
    sqlite3_bind_int64(stmt_, i, *v);
  } else {
    sqlite3_bind_null(stmt_, i);
  }
}
void Statement::bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
void Statement::bind(int i, std::optional<double> v) {
  if (v) {
    sqlite3_bind_double(stmt_, i, *v);
  } else {
    sqlite3_bind_null(stmt_, i);
  }
}
void Statement::bind(int i, std::string_view t) {
  sqlite3_bind_text(stmt_, i, t.data(), static_cast<int>(t.size()), SQLITE_TRANSIENT);
}
void Statement::bind_null(int i) { sqlite3_bind_null(stmt_, i); }

Result<bool> Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  Error e = sqlite_error(db_, rc, "sqlite");
  sqlite3_reset(stmt_);
  return e;
}

Result<void> Statement::run() {
  for (;;) {
    TARMAC_TRY_ASSIGN(const bool row, step());
    if (!row) break;
  }
  sqlite3_reset(stmt_);
  return {};
}

void Statement::reset() { sqlite3_reset(stmt_); }

bool Statement::is_null(int c) const { return sqlite3_column_type(stmt_, c) == SQLITE_NULL; }
long long Statement::int64(int c) const { return sqlite3_column_int64(stmt_, c); }
std::optional<long long> Statement::opt_int64(int c) const {
  if (is_null(c)) return std::nullopt;
  return int64(c);
}
double Statement::real(int c) const { return sqlite3_column_double(stmt_, c); }
std::string Statement::text(int c) const {
  const auto* p = sqlite3_column_text(stmt_, c);
  if (p == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(stmt_, c)));
}

Result<Database> Database::open(const std::string& path, Mode mode) {
  sqlite3* db = nullptr;
  const int flags = mode == Mode::ReadOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Error e = sqlite_error(db, rc, fmt::format("cannot open {}", path));
    sqlite3_close(db);
    return e;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 2000);
  return Database(db);
}

Database::Database(Database&& o) noexcept : db_(std::exchange(o.db_, nullptr)) {}

Database& Database::operator=(Database&& o) noexcept {
  if (this != &o) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
  }
  return *this;
}

Database::~Database() { sqlite3_close_v2(db_); }

Result<void> Database::exec(std::string_view sql) {
  const std::string text(sql);
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    Error e = make_error(Error::Code::Io, fmt::format("sqlite: {}", message ? message : sqlite3_errstr(rc)),
                         classify_failure(sqlite3_extended_errcode(db_)));
    sqlite3_free(message);
    return e;
  }
  return {};
}

Result<Statement> Database::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt,
                                    nullptr);
  if (rc != SQLITE_OK) return sqlite_error(db_, rc, "sqlite prepare");
  return Statement(db_, stmt);
}

Result<std::optional<long long>> Database::scalar(std::string_view sql) {
  TARMAC_TRY_ASSIGN(auto stmt, prepare(sql));
  TARMAC_TRY_ASSIGN(const bool row, stmt.step());
  if (!row || stmt.is_null(0)) return std::optional<long long>{};
  return std::optional<long long>{stmt.int64(0)};
}

long long Database::changes() const { return sqlite3_changes(db_); }

bool Database::file_moved() const {
  int moved = 0;
  return sqlite3_file_control(db_, "main", SQLITE_FCNTL_HAS_MOVED, &moved) == SQLITE_OK && moved != 0;
}

}  // namespace tarmac::store
