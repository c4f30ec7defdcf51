// The recorder's schema (docs/recorder.md): created on first open, versioned in meta.
#pragma once

#include "tarmac/store/sqlite.hpp"

namespace tarmac::store {

inline constexpr int kSchemaVersion = 1;

// Creates the tables, indexes and views that are missing and checks the schema version; sets WAL
// mode. Fails on a database written by a newer tarmac.
[[nodiscard]] Result<void> ensure_schema(Database& db);

// Checks that `db` is a tarmac store of a version this binary reads.
[[nodiscard]] Result<void> check_schema(Database& db);

}  // namespace tarmac::store
