#include "tarmac/util/trusted_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <string_view>
#include <vector>

#include "tarmac/util/fd.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::util {

namespace {

std::string who(uid_t uid) { return uid == 0 ? std::string("root") : fmt::format("uid {}", uid); }

Error open_error(const std::string& what, int err) {
  if (err == ENOENT || err == ENOTDIR) return make_error(Error::Code::NotFound, fmt::format("{}: no such file", what));
  if (err == EACCES || err == EPERM) return make_error(Error::Code::Io, fmt::format("{}: permission denied", what));
  return make_error(Error::Code::Io, fmt::format("{}: {}", what, std::strerror(err)));
}

// Why `st` (of `what`) could have been written by someone other than `owner`, or "" when it cannot.
std::string untrusted_because(const struct stat& st, const std::string& what, uid_t owner, bool directory) {
  if (directory) {
    if (st.st_uid != owner && st.st_uid != 0) {
      return fmt::format("its directory {} is owned by uid {}, not by {}", what, st.st_uid, who(owner));
    }
    // A sticky directory (/tmp) lets others add entries but not replace someone else's.
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
      return fmt::format("its directory {} is writable by {} (mode {:04o})", what,
                         (st.st_mode & S_IWOTH) != 0 ? "everyone" : "its group", st.st_mode & 07777);
    }
    return {};
  }
  if (st.st_uid != owner) return fmt::format("it is owned by uid {}, not by {}", st.st_uid, who(owner));
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("it is writable by {} (mode {:04o})", (st.st_mode & S_IWOTH) != 0 ? "everyone" : "its group",
                       st.st_mode & 07777);
  }
  return {};
}

// Whether a symbolic link on the way is followed (made by someone trusted; what it leads to is
// checked from there on) or refused (for a path that is opened again by name later, whose link
// target's own directories were never checked).
enum class Links { Follow, Refuse };

// Opens every directory from / down to the one holding `path`'s last component, each relative to
// the one above and checked by fstat; returns that last directory.
Result<Fd> open_trusted_parent(const std::string& path, const std::vector<std::string>& parts, uid_t owner,
                               Links links = Links::Follow) {
  Fd dir(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return open_error("/", errno);
  std::string at = "/";
  for (std::size_t i = 0;; ++i) {
    struct stat st {};
    if (::fstat(dir.get(), &st) != 0) return open_error(at, errno);
    if (auto why = untrusted_because(st, at, owner, true); !why.empty()) {
      return make_error(Error::Code::Invalid, fmt::format("{}: {}", path, why));
    }
    if (i + 1 >= parts.size()) return dir;
    // A symbolic link here was made by someone the check above trusts; what it leads to is
    // checked by the fstat of the next round.
    const int nofollow = links == Links::Refuse ? O_NOFOLLOW : 0;
    Fd next(::openat(dir.get(), parts[i].c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC | nofollow));
    if (!next && links == Links::Refuse && (errno == ELOOP || errno == ENOTDIR)) {
      struct stat link {};
      if (::fstatat(dir.get(), parts[i].c_str(), &link, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(link.st_mode)) {
        return make_error(Error::Code::Invalid, fmt::format("{}: {}/{} is a symbolic link (give the path it leads to)",
                                                            path, at == "/" ? "" : at, parts[i]));
      }
    }
    if (!next) return open_error(path, errno);
    at += (at.size() > 1 ? "/" : "") + parts[i];
    dir = std::move(next);
  }
}

// The components of `path`, made absolute from the working directory.
Result<std::vector<std::string>> path_parts(const std::string& path) {
  std::string absolute = path;
  if (absolute.empty() || absolute.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd) == nullptr) return open_error(path, errno);
    absolute = std::string(cwd) + "/" + path;
  }
  std::vector<std::string> parts;
  for (auto& part : split(absolute, '/')) {
    if (!part.empty() && part != ".") parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace

Result<void> check_trusted_socket(const std::string& path, uid_t owner) {
  TARMAC_TRY_ASSIGN(const std::vector<std::string> parts, path_parts(path));
  if (parts.empty()) return make_error(Error::Code::Invalid, fmt::format("{}: not a socket", path));
  TARMAC_TRY_ASSIGN(Fd dir, open_trusted_parent(path, parts, owner, Links::Refuse));
  struct stat st {};
  if (::fstatat(dir.get(), parts.back().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return open_error(path, errno);
  if (!S_ISSOCK(st.st_mode)) return make_error(Error::Code::Invalid, fmt::format("{}: not a socket", path));
  if (st.st_uid != owner && st.st_uid != 0) {
    return make_error(Error::Code::Invalid,
                      fmt::format("{}: it is owned by uid {}, not by {}", path, st.st_uid, who(owner)));
  }
  return {};
}

Result<std::string> read_trusted_file(const std::string& path, Writers writers, uid_t owner, std::size_t max_bytes) {
  constexpr int kFlags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  Fd fd;
  if (writers == Writers::Anyone) {
    fd.reset(::open(path.c_str(), kFlags));
  } else {
    TARMAC_TRY_ASSIGN(const std::vector<std::string> parts, path_parts(path));
    if (parts.empty()) return make_error(Error::Code::Invalid, fmt::format("{}: not a regular file", path));
    TARMAC_TRY_ASSIGN(Fd dir, open_trusted_parent(path, parts, owner));
    fd.reset(::openat(dir.get(), parts.back().c_str(), kFlags));
  }
  if (!fd) return open_error(path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return open_error(path, errno);
  if (!S_ISREG(st.st_mode)) return make_error(Error::Code::Invalid, fmt::format("{}: not a regular file", path));
  if (writers == Writers::OwnerOnly) {
    if (auto why = untrusted_because(st, path, owner, false); !why.empty()) {
      return make_error(Error::Code::Invalid, fmt::format("{}: {}", path, why));
    }
  }
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return open_error(path, errno);
    if (n == 0) return text;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > max_bytes) {
      return make_error(Error::Code::Invalid, fmt::format("{}: larger than {} bytes", path, max_bytes));
    }
  }
}

}  // namespace tarmac::util
