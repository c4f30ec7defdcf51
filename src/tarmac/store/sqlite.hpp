// A thin RAII layer over SQLite's C API: one Database per connection, one Statement per prepared
// query. Every failure comes back as a Result whose message names SQLite's own text; nothing throws.
// The only product code that includes sqlite3.h is sqlite.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tarmac/util/result.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace tarmac::store {

// Why a write failed, in the terms the recorder acts on.
enum class Failure {
  None,
  DiskFull,   // SQLITE_FULL: keep the data, retry when space returns
  ReadOnly,   // SQLITE_READONLY / CANTOPEN / PERM: the directory or file cannot be written
  Busy,       // SQLITE_BUSY / LOCKED: another writer; retry
  Corrupt,    // SQLITE_CORRUPT / NOTADB: never write over it
  Other,
};

// The Failure a store error carries as its cause: SQLite's code, classified where it failed, or
// ReadOnly for a store file or directory tarmac itself could not prepare; None for any other error.
[[nodiscard]] Failure failure_of(const Error& error);

class Statement {
 public:
  Statement() = default;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  ~Statement();

  // Binds parameter `index` (1-based); nullopt binds NULL.
  void bind(int index, long long value);
  void bind(int index, std::optional<long long> value);
  void bind(int index, double value);
  void bind(int index, std::optional<double> value);
  void bind(int index, std::string_view text);
  void bind_null(int index);

  // One step: true when a row is ready, false when done. Leaves the statement to reset().
  [[nodiscard]] Result<bool> step();
  // Steps to the end (for INSERT/UPDATE/DELETE) and resets, keeping the bindings' slots.
  [[nodiscard]] Result<void> run();
  void reset();

  [[nodiscard]] bool is_null(int column) const;
  [[nodiscard]] long long int64(int column) const;
  [[nodiscard]] std::optional<long long> opt_int64(int column) const;
  [[nodiscard]] double real(int column) const;
  [[nodiscard]] std::string text(int column) const;

 private:
  friend class Database;
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

class Database {
 public:
  enum class Mode { ReadWrite, ReadOnly };

  // Opens (ReadWrite: creates) the database at `path`.
  [[nodiscard]] static Result<Database> open(const std::string& path, Mode mode);

  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  ~Database();

  // Runs one or more statements that return no rows.
  [[nodiscard]] Result<void> exec(std::string_view sql);
  [[nodiscard]] Result<Statement> prepare(std::string_view sql);
  // The first column of the first row of `sql`, or nullopt when it returns no row.
  [[nodiscard]] Result<std::optional<long long>> scalar(std::string_view sql);

  // The rows the last INSERT, UPDATE or DELETE on this connection changed.
  [[nodiscard]] long long changes() const;

  // Whether the file was deleted or renamed since it was opened (writes would go nowhere).
  [[nodiscard]] bool file_moved() const;

 private:
  explicit Database(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

}  // namespace tarmac::store
