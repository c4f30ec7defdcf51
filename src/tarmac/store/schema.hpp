// The recorder's schema (docs/recorder.md): created on first open, versioned in meta.
#pragma once

#include <string_view>

#include "tarmac/store/sqlite.hpp"

namespace tarmac::store {

// 1: the first; 2: process_sample.mem_util_pct (per-process memory utilization, issue 15);
// 3: process_sample.other_util_pct (the busiest of encoder, decoder, JPEG and OFA).
inline constexpr int kSchemaVersion = 6;

// Creates the tables, indexes and views that are missing, brings a store of an older version to
// kSchemaVersion in place (in the same transaction), and checks the schema version; sets WAL mode.
// Fails on a database written by a newer tarmac.
[[nodiscard]] Result<void> ensure_schema(Database& db);

// Whether `table` has `column` (trusted names: tarmac's own): a store of an older version that no
// agent has upgraded yet lacks the newer ones.
[[nodiscard]] Result<bool> table_has(Database& db, std::string_view table, std::string_view column);

// Checks that `db` is a tarmac store of a version this binary reads.
[[nodiscard]] Result<void> check_schema(Database& db);

}  // namespace tarmac::store
