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

// Opens `name` in `dir` (creating it when `create`) and takes away any permission beyond
// kStoreFileMode when this process's user owns it; a missing file that is not created is fine.
Result<void> restrict_file(int dir, const std::string& dir_path, const std::string& name, bool create) {
  const std::string path = dir_path + "/" + name;
  const int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | (create ? O_CREAT : 0);
  util::Fd fd(::openat(dir, name.c_str(), flags, kStoreFileMode));
  if (!fd) {
    if (errno == ENOENT && !create) return {};
    if (errno == ELOOP) return io_error(path, "a symbolic link (the store must be a file in its directory)");
    return io_error(path, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error(path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return io_error(path, "not a regular file");
  const mode_t mode = st.st_mode & 07777;
  if (st.st_uid == ::geteuid() && (mode & ~kStoreFileMode) != 0) {
    if (::fchmod(fd.get(), mode & kStoreFileMode) != 0) {
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
