// Who may read the store: it holds every job's command line and working directory, and every GPU
// process's, so only the agent's user and the database file's group read it (docs/recorder.md).
#pragma once

#include <sys/types.h>

#include <string>

#include "tarmac/util/result.hpp"

namespace tarmac::store {

// The database and its -wal and -shm files (SQLite gives those the database's own mode): the
// owner writes, the group reads (an administrator may chgrp it to let a team read history).
inline constexpr mode_t kStoreFileMode = 0640;
// The state directory: others may pass through it (to their jobs' logs/ID.log, by name) but not
// list it.
inline constexpr mode_t kStateDirMode = 0711;

// Creates the directory of `db_path` (kStateDirMode) when it is missing and the database file
// (kStoreFileMode) when it is missing, and takes any permission beyond kStoreFileMode from an
// existing database, -wal or -shm file that this process's user owns (a store from an older
// tarmac, 0644). Files are opened relative to the directory without following links. Fails naming
// the file and why.
[[nodiscard]] Result<void> prepare_private_store(const std::string& db_path);

}  // namespace tarmac::store
