#include "tarmac/store/private_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "tarmac/store/sqlite.hpp"
#include "tarmac/util/fd.hpp"

namespace tarmac::store {

namespace {

// ReadOnly: the recorder treats a store it cannot prepare as a directory it cannot write.
Error io_error(const std::string& what, const std::string& why) {
  return make_error(Error::Code::Io, fmt::format("{}: {}", what, why), Failure::ReadOnly);
}

// Creates `name` in `dir` when it does not exist.
Result<void> create_if_missing(int dir, const std::string& path, const std::string& name) {
  // A file this call creates is one no SQLite connection of this process has open, so closing it
  // here drops no lock (see restrict_file).
  util::Fd made(::openat(dir, name.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, kStoreFileMode));
  if (made || errno == EEXIST) return {};
  if (errno == ELOOP) return io_error(path, "a symbolic link (the store must be a file in its directory)");
  return io_error(path, std::strerror(errno));
}

// Takes away any permission of `name` in `dir` beyond kStoreFileMode when this process's user owns
// it (creating it first when `create`); a missing file that is not created is fine.
//
// The file is opened with O_PATH, never for reading or writing: the agent calls this while its own
// SQLite connections (the scheduler's job table, the recorder before it reopens) hold the store, and
// POSIX drops every fcntl lock a process holds on a file when it closes *any* descriptor of that
// file. SQLite's locks are such locks: without them, a reader in another process took itself for the
// last connection and deleted the -wal and -shm the agent was writing through, or truncated the
// mapped -shm under it (SIGBUS). Linux does not release locks when an O_PATH descriptor closes.
Result<void> restrict_file(int dir, const std::string& dir_path, const std::string& name, bool create) {
  const std::string path = dir_path + "/" + name;
  if (create) TARMAC_TRY(create_if_missing(dir, path, name));
  util::Fd fd(::openat(dir, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT && !create) return {};
    return io_error(path, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error(path, std::strerror(errno));
  // O_PATH | O_NOFOLLOW opens a link itself rather than failing with ELOOP.
  if (S_ISLNK(st.st_mode)) return io_error(path, "a symbolic link (the store must be a file in its directory)");
  if (!S_ISREG(st.st_mode)) return io_error(path, "not a regular file");
  const mode_t mode = st.st_mode & 07777;
  if (st.st_uid == ::geteuid() && (mode & ~kStoreFileMode) != 0) {
    // fchmod refuses an O_PATH descriptor; its /proc link names exactly the file checked above.
    const std::string self = fmt::format("/proc/self/fd/{}", fd.get());
    if (::chmod(self.c_str(), mode & kStoreFileMode) != 0) {
      return io_error(path, fmt::format("cannot make it mode {:04o}: {}", mode & kStoreFileMode, std::strerror(errno)));
    }
  }
  return {};
}

}  // namespace

Result<void> prepare_private_store(const std::string& db_path) {
  const std::filesystem::path db(db_path);
  const std::string dir = db.parent_path().empty() ? std::string(".") : db.parent_path().string();
  const std::string what = fmt::format("cannot open {}", db_path);
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    if (const auto above = std::filesystem::path(dir).parent_path(); !above.empty()) {
      std::filesystem::create_directories(above, ec);
      if (ec) return io_error(what, fmt::format("cannot create {}: {}", above.string(), ec.message()));
    }
    if (::mkdir(dir.c_str(), kStateDirMode) != 0 && errno != EEXIST) {
      const int err = errno;
      return io_error(what, fmt::format("cannot create {}: {}", dir, std::strerror(err)));
    }
  }
  util::Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd) {
    const int err = errno;
    return io_error(what, fmt::format("its directory {}: {}", dir, std::strerror(err)));
  }
  const std::string name = db.filename().string();
  TARMAC_TRY(restrict_file(dfd.get(), dir, name, true));
  TARMAC_TRY(restrict_file(dfd.get(), dir, name + "-wal", false));
  TARMAC_TRY(restrict_file(dfd.get(), dir, name + "-shm", false));
  return {};
}

}  // namespace tarmac::store
