#include "tarmac/sched/leases.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <memory>
#include <thread>

#include "tarmac/host/proc_parse.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sched {

namespace {

constexpr std::string_view kPrefix = "gpu-";
constexpr std::string_view kSuffix = ".lease";
constexpr const char* kLockName = ".lock";
// A lease is one short line; anything longer is not one (and is not read into memory).
constexpr std::size_t kMaxLeaseBytes = 512;
// Every file of the directory: never through a symlink, never blocking (a FIFO), never inherited.
constexpr int kFileFlags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;

Error io_error(const std::string& what) {
  return make_error(Error::Code::Io, fmt::format("{}: {}", what, std::strerror(errno)));
}

// "uid 1000 (alice)", for messages about who owns what.
std::string uid_text(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) {
    return fmt::format("uid {} ({})", uid, found->pw_name);
  }
  return fmt::format("uid {}", uid);
}

bool writable_by_others(const struct stat& st) { return (st.st_mode & (S_IWGRP | S_IWOTH)) != 0; }
bool sticky(const struct stat& st) { return (st.st_mode & S_ISVTX) != 0; }

// Whether the directory `st` may hold leases for a caller of effective uid `me`; the refusal's words
// otherwise. Root's shared directory or the caller's own, and sticky when others may write it (so
// nobody can remove or replace a file that is not theirs).
std::optional<std::string> refusal(const std::string& dir, const struct stat& st, uid_t me) {
  if (!S_ISDIR(st.st_mode)) return fmt::format("the lock directory {} is not a directory", dir);
  if (st.st_uid != 0 && st.st_uid != me) {
    return fmt::format("the lock directory {} belongs to {}, not to root or to you: refused (anyone could have made "
                       "it to catch other users' leases; remove it, or set scheduler.lock_dir or TARMAC_LOCK_DIR)",
                       dir, uid_text(st.st_uid));
  }
  if (writable_by_others(st) && !sticky(st)) {
    return fmt::format("the lock directory {} is writable by others but not sticky (mode {:04o}): refused (it must "
                       "be 1777 to be shared, or not writable by others)",
                       dir, st.st_mode & 07777);
  }
  return std::nullopt;
}

// A file of the directory, opened without following a symlink or blocking, and its fstat.
struct OpenedFile {
  util::Fd fd;
  struct stat st {};
};

std::optional<OpenedFile> open_in(int dirfd, const std::string& name, int flags, mode_t mode = 0) {
  OpenedFile f;
  f.fd.reset(::openat(dirfd, name.c_str(), flags | kFileFlags, mode));
  if (!f.fd || ::fstat(f.fd.get(), &f.st) != 0) return std::nullopt;
  return f;
}

// Whether `name` in the directory is still the file `st` (not replaced since it was checked).
bool still_the_same(int dirfd, const std::string& name, const struct stat& st) {
  struct stat now {};
  return ::fstatat(dirfd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st.st_dev &&
         now.st_ino == st.st_ino;
}

// A regular file of one link and at most `max` bytes, read; nullopt for anything else.
std::optional<std::string> read_regular(const OpenedFile& f, std::size_t max) {
  if (!S_ISREG(f.st.st_mode) || f.st.st_nlink != 1 || f.st.st_size > static_cast<off_t>(max)) return std::nullopt;
  std::string text(max + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(f.fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > max) return std::nullopt;
  text.resize(got);
  return text;
}

// 16 hex digits from the kernel's random source: a temporary file's name nobody can guess.
std::optional<std::string> random_hex() {
  unsigned long long v = 0;
  if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) return std::nullopt;
  return fmt::format("{:016x}", v);
}

std::string lease_name(std::string_view uuid) { return fmt::format("{}{}{}", kPrefix, uuid, kSuffix); }

// Creates the missing lock directory `dir` for a caller of effective uid `me` and opens it: mode
// 1777 with its `.lock` for root (shared by every user), 0700 for anyone else (theirs alone). Only
// in a parent owned by root or the caller that others cannot write unless it is sticky: elsewhere
// someone could swap the new directory for theirs between mkdir and open.
Result<util::Fd> create_dir(const std::string& dir, uid_t me) {
  const std::filesystem::path path(dir);
  const std::string name = path.filename().string();
  const std::string parent = path.has_parent_path() ? path.parent_path().string() : ".";
  const auto cannot = [&dir](const std::string& why) {
    return make_error(Error::Code::Io, fmt::format("cannot create the lock directory {}: {} (set scheduler.lock_dir or "
                                                   "TARMAC_LOCK_DIR)",
                                                   dir, why));
  };
  if (name.empty() || name == "." || name == "..") return cannot("not a directory name");
  util::Fd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd && errno == ENOENT && me == 0) {
    // /run/tarmac before the agent or systemd-tmpfiles made it: root's, 0755.
    if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) return cannot(fmt::format("{}: {}", parent, std::strerror(errno)));
    parent_fd.reset(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  if (!parent_fd) return cannot(fmt::format("{}: {}", parent, std::strerror(errno)));
  struct stat pst {};
  if (::fstat(parent_fd.get(), &pst) != 0) return cannot(fmt::format("{}: {}", parent, std::strerror(errno)));
  if ((pst.st_uid != 0 && pst.st_uid != me) || (writable_by_others(pst) && !sticky(pst))) {
    return cannot(fmt::format("its parent {} (owner {}, mode {:04o}) could let someone else replace it", parent,
                              uid_text(pst.st_uid), pst.st_mode & 07777));
  }
  const mode_t mode = me == 0 ? 01777 : 0700;
  const bool made = ::mkdirat(parent_fd.get(), name.c_str(), mode) == 0;
  if (!made && errno != EEXIST) return cannot(std::strerror(errno));
  util::Fd fd(::openat(parent_fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return io_error(fmt::format("cannot open the lock directory {}", dir));
  if (!made) return fd;  // made by someone else meanwhile: checked by the caller as any other
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || st.st_uid != me) return cannot("it was replaced while it was made");
  // mkdir's mode is masked by the umask; this is the directory just made, so its mode is ours to set.
  if (::fchmod(fd.get(), mode) != 0) return io_error(fmt::format("cannot set the mode of {}", dir));
  if (me == 0) {
    // The lock file at once, root's: a user who made it first could hold or replace it.
    // Already there: another of root's tarmacs, which found the directory, made it first (or a user
    // did); lock() checks whatever is there and removes what is not root's.
    auto lock = open_in(fd.get(), kLockName, O_RDONLY | O_CREAT | O_EXCL, 0644);
    if (!lock && errno == EEXIST) return fd;
    if (!lock || ::fchmod(lock->fd.get(), 0644) != 0) return io_error(fmt::format("cannot create {}/{}", dir, kLockName));
  }
  return fd;
}

}  // namespace

std::string format_lease(const Lease& lease) {
  return fmt::format("{} {} {} {} {}\n", lease.pid, lease.starttime, lease.expires_unix_ms,
                     lease.job_id.empty() ? "-" : lease.job_id, lease.user.empty() ? "-" : lease.user);
}

std::optional<Lease> parse_lease(std::string_view uuid, std::string_view text) {
  if (text.ends_with('\n')) text.remove_suffix(1);
  const auto words = util::split(text, ' ');
  if (words.size() != 5) return std::nullopt;
  Lease lease;
  lease.uuid = uuid;
  if (words[0] == "0") {
    lease.pid = 0;
  } else if (const auto pid = parse_pid(words[0])) {
    lease.pid = *pid;
  } else {
    return std::nullopt;
  }
  const auto start = util::parse_int(words[1], 0, LLONG_MAX);
  const auto expires = util::parse_int(words[2], 0, LLONG_MAX);
  if (!start || !expires || words[3].empty() || words[4].empty()) return std::nullopt;
  lease.starttime = static_cast<unsigned long long>(*start);
  lease.expires_unix_ms = *expires;
  lease.job_id = words[3];
  lease.user = words[4];
  return lease;
}

std::optional<int> parse_pid(std::string_view text) {
  const auto pid = util::parse_int(text, 2, INT_MAX);
  if (!pid) return std::nullopt;
  return static_cast<int>(*pid);
}

std::optional<unsigned long long> process_starttime(int pid) {
  if (pid <= 0) return std::nullopt;
  const auto text = util::read_file(fmt::format("/proc/{}/stat", pid));
  if (!text) return std::nullopt;
  const auto stat = host::parse_stat(*text);
  if (!stat || stat->state == 'Z' || stat->state == 'X') return std::nullopt;
  return stat->starttime_ticks;
}

std::optional<uid_t> process_uid(int pid) {
  if (pid <= 0) return std::nullopt;
  const auto text = util::read_file(fmt::format("/proc/{}/status", pid));
  if (!text) return std::nullopt;
  const auto uid = host::parse_status_uid(*text);
  if (!uid) return std::nullopt;
  return static_cast<uid_t>(*uid);
}

std::string describe(const Lease& lease) {
  std::string out = fmt::format("by {}, job {}", lease.user, lease.job_id);
  if (lease.pid != 0) out += fmt::format(", pid {}", lease.pid);
  if (lease.expires_unix_ms != 0) {
    const std::time_t t = static_cast<std::time_t>(lease.expires_unix_ms / 1000);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    out += fmt::format(", until {:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                       tm.tm_hour, tm.tm_min, tm.tm_sec);
  }
  return out;
}

bool lease_is_live(const Lease& lease, long long now_unix_ms, long long max_hold_ms) {
  if (lease.pid == 0 && lease.expires_unix_ms == 0) return false;  // nothing would ever end it
  if (lease.pid == 1 || lease.pid < 0) return false;
  if (lease.expires_unix_ms != 0 && now_unix_ms >= lease.expires_unix_ms) return false;
  if (lease.pid == 0 && lease.file_uid != 0 && max_hold_ms > 0 && lease.written_unix_ms > 0 &&
      now_unix_ms - lease.written_unix_ms >= max_hold_ms) {
    return false;
  }
  if (lease.pid != 0) {
    const auto start = process_starttime(lease.pid);
    if (!start || *start != lease.starttime) return false;
    // Only the user who runs a process can lease in its name: a lease naming another user's
    // process (init, a daemon) would otherwise hold the GPU as long as that process lives.
    if (process_uid(lease.pid) != std::optional<uid_t>(lease.file_uid)) return false;
  }
  return true;
}

std::string lock_dir(const std::string& configured) {
  if (const char* env = std::getenv("TARMAC_LOCK_DIR"); env != nullptr && *env != '\0') return env;
  if (!configured.empty()) return configured;
  return kDefaultLockDir;
}

Result<LeaseDir> LeaseDir::open(std::string dir, long long max_hold_ms) {
  while (dir.size() > 1 && dir.ends_with('/')) dir.pop_back();
  const uid_t me = ::geteuid();
  util::Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd && errno == ENOENT) {
    TARMAC_TRY_ASSIGN(auto made, create_dir(dir, me));
    fd = std::move(made);
  } else if (!fd && (errno == ELOOP || errno == ENOTDIR)) {
    return make_error(Error::Code::Io, fmt::format("the lock directory {} is a symlink or not a directory: refused", dir));
  } else if (!fd) {
    return io_error(fmt::format("cannot open the lock directory {} (set scheduler.lock_dir or TARMAC_LOCK_DIR)", dir));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error(fmt::format("cannot look at the lock directory {}", dir));
  if (auto why = refusal(dir, st, me)) return make_error(Error::Code::Io, *why);
  return LeaseDir(std::move(dir), std::move(fd), st.st_uid, max_hold_ms);
}

Result<LeaseDir::DirLock> LeaseDir::lock(long long wait_ms) const {
  const std::string path = fmt::format("{}/{}", dir_, kLockName);
  const bool mine = owner_ == ::geteuid();
  std::optional<OpenedFile> f;
  for (int attempt = 0; attempt < 3 && !f; ++attempt) {
    f = open_in(fd_.get(), kLockName, O_RDONLY);
    if (!f && errno == ENOENT && mine) {
      // Only the directory's owner makes its lock file, so that nobody else can remove or replace it.
      f = open_in(fd_.get(), kLockName, O_RDONLY | O_CREAT | O_EXCL, 0644);
      if (f && ::fchmod(f->fd.get(), 0644) != 0) return io_error(fmt::format("cannot set the mode of {}", path));
      if (!f && errno == EEXIST) continue;
    }
    if (!f && errno == ENOENT) {
      return make_error(Error::Code::Io, fmt::format("{} is missing: {} makes it with the directory (systemd-tmpfiles, "
                                                     "or root's first tarmac pick or run)",
                                                     path, uid_text(owner_)));
    }
    if (!f && errno != ELOOP && errno != ENXIO) return io_error(fmt::format("cannot open {}", path));
    if (f && S_ISREG(f->st.st_mode) && f->st.st_uid == owner_) break;
    // A symlink, a FIFO or someone else's file in the lock's place: the directory's owner removes
    // it (nobody who checks the owner ever locked it); anyone else refuses it.
    if (!mine) {
      return make_error(Error::Code::Io, fmt::format("{} is not a regular file owned by {}: refused (its owner or root "
                                                     "may remove it)",
                                                     path, uid_text(owner_)));
    }
    if (::unlinkat(fd_.get(), kLockName, 0) != 0 && errno != ENOENT) {
      return io_error(fmt::format("cannot remove the impostor {}", path));
    }
    f.reset();
  }
  if (!f) return make_error(Error::Code::Io, fmt::format("cannot make {}: it keeps being replaced", path));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(0LL, wait_ms));
  for (;;) {
    if (::flock(f->fd.get(), wait_ms < 0 ? LOCK_EX : LOCK_EX | LOCK_NB) == 0) return DirLock(std::move(f->fd));
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return io_error(fmt::format("cannot lock {}", path));
    if (std::chrono::steady_clock::now() >= deadline) {
      return make_error(Error::Code::Io, fmt::format("{} is held by another process for more than {} ms", path, wait_ms));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Result<std::vector<Lease>> LeaseDir::live_leases(long long now_unix_ms, StaleFiles stale) const {
  const int list_fd = ::openat(fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (list_fd < 0) return io_error(fmt::format("cannot read the lock directory {}", dir_));
  const std::unique_ptr<DIR, int (*)(DIR*)> d(::fdopendir(list_fd), ::closedir);
  if (!d) {
    ::close(list_fd);
    return io_error(fmt::format("cannot read the lock directory {}", dir_));
  }
  std::vector<Lease> live;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix) || name.size() <= kPrefix.size() + kSuffix.size()) {
      continue;
    }
    const std::string uuid = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
    const auto f = open_in(fd_.get(), name, O_RDONLY);
    if (!f) {
      // A symlink or a socket is no lease; unreadable (another user's 0600 file) is not ours to judge.
      if ((errno == ELOOP || errno == ENXIO) && stale == StaleFiles::Remove) (void)::unlinkat(fd_.get(), name.c_str(), 0);
      continue;
    }
    const auto text = read_regular(*f, kMaxLeaseBytes);
    auto lease = text ? parse_lease(uuid, *text) : std::nullopt;
    if (lease) {
      lease->file_uid = f->st.st_uid;
      lease->written_unix_ms = f->st.st_ctim.tv_sec * 1000LL + f->st.st_ctim.tv_nsec / 1'000'000;
    }
    if (lease && lease_is_live(*lease, now_unix_ms, max_hold_ms_)) {
      live.push_back(std::move(*lease));
    } else if (stale == StaleFiles::Remove && still_the_same(fd_.get(), name, f->st)) {
      (void)::unlinkat(fd_.get(), name.c_str(), 0);  // in the sticky directory only its owner (or root) can
    }
  }
  return live;
}

Result<void> LeaseDir::write(const std::vector<Lease>& leases) const {
  for (const auto& lease : leases) {
    if (lease.uuid.empty() || lease.uuid.find('/') != std::string::npos) {
      return make_error(Error::Code::Invalid, fmt::format("'{}' is not a GPU UUID to lease", lease.uuid));
    }
    const std::string name = lease_name(lease.uuid);
    const auto suffix = random_hex();
    if (!suffix) return io_error("cannot name a temporary lease file (getrandom)");
    const std::string tmp = fmt::format(".{}.{}.tmp", name, *suffix);
    // O_EXCL: a file this call made, so its mode is ours to set; nothing anyone put there is reused.
    const auto f = open_in(fd_.get(), tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (!f) return io_error(fmt::format("cannot write {}/{}", dir_, tmp));
    const bool written = ::fchmod(f->fd.get(), 0644) == 0 && util::write_all(f->fd.get(), format_lease(lease));
    if (!written || ::renameat(fd_.get(), tmp.c_str(), fd_.get(), name.c_str()) != 0) {
      const Error e = io_error(fmt::format("cannot write the lease {}/{}", dir_, name));
      (void)::unlinkat(fd_.get(), tmp.c_str(), 0);
      return e;
    }
  }
  return {};
}

void LeaseDir::remove(const std::vector<std::string>& uuids, const std::string& job_id) const {
  for (const auto& uuid : uuids) {
    if (uuid.empty() || uuid.find('/') != std::string::npos) continue;
    const std::string name = lease_name(uuid);
    const auto f = open_in(fd_.get(), name, O_RDONLY);
    if (!f) continue;
    const auto text = read_regular(*f, kMaxLeaseBytes);
    const auto lease = text ? parse_lease(uuid, *text) : std::nullopt;
    if (lease && lease->job_id != job_id) continue;  // not ours any more
    if (still_the_same(fd_.get(), name, f->st)) (void)::unlinkat(fd_.get(), name.c_str(), 0);
  }
}

}  // namespace tarmac::sched
