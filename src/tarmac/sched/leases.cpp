#include "tarmac/sched/leases.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fmt/format.h>
#include <sstream>

#include "tarmac/host/proc_parse.hpp"
#include "tarmac/util/fs.hpp"

namespace tarmac::sched {

namespace {

constexpr std::string_view kPrefix = "gpu-";
constexpr std::string_view kSuffix = ".lease";

Error io_error(const std::string& what) {
  return make_error(Error::Code::Io, fmt::format("{}: {}", what, std::strerror(errno)));
}

}  // namespace

std::string format_lease(const Lease& lease) {
  return fmt::format("{} {} {} {} {}\n", lease.pid, lease.starttime, lease.expires_unix_ms,
                     lease.job_id.empty() ? "-" : lease.job_id, lease.user.empty() ? "-" : lease.user);
}

std::optional<Lease> parse_lease(std::string_view uuid, std::string_view text) {
  std::istringstream in{std::string(text)};
  Lease lease;
  lease.uuid = uuid;
  if (!(in >> lease.pid >> lease.starttime >> lease.expires_unix_ms >> lease.job_id >> lease.user)) return std::nullopt;
  if (lease.pid < 0 || lease.expires_unix_ms < 0) return std::nullopt;
  return lease;
}

std::optional<unsigned long long> process_starttime(int pid) {
  if (pid <= 0) return std::nullopt;
  const auto text = util::read_file(fmt::format("/proc/{}/stat", pid));
  if (!text) return std::nullopt;
  const auto stat = host::parse_stat(*text);
  if (!stat || stat->state == 'Z' || stat->state == 'X') return std::nullopt;
  return stat->starttime_ticks;
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

bool lease_is_live(const Lease& lease, long long now_unix_ms) {
  if (lease.pid == 0 && lease.expires_unix_ms == 0) return false;  // nothing would ever end it
  if (lease.expires_unix_ms != 0 && now_unix_ms >= lease.expires_unix_ms) return false;
  if (lease.pid != 0) {
    const auto start = process_starttime(lease.pid);
    if (!start || *start != lease.starttime) return false;
  }
  return true;
}

std::string lock_dir(const std::string& configured) {
  if (const char* env = std::getenv("TARMAC_LOCK_DIR"); env != nullptr && *env != '\0') return env;
  if (!configured.empty()) return configured;
  return "/run/lock/tarmac";
}

LeaseDir::DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

Result<LeaseDir> LeaseDir::open(std::string dir) {
  if (::mkdir(dir.c_str(), 01777) == 0) {
    // mkdir's mode is masked by the umask; every user must be able to lease, as in /run/lock.
    if (::chmod(dir.c_str(), 01777) != 0) return io_error(fmt::format("cannot set the mode of {}", dir));
  } else if (errno != EEXIST) {
    return io_error(fmt::format("cannot create the lock directory {} (set scheduler.lock_dir or TARMAC_LOCK_DIR)", dir));
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return make_error(Error::Code::Io, fmt::format("the lock directory {} is not a directory", dir));
  }
  return LeaseDir(std::move(dir));
}

Result<LeaseDir::DirLock> LeaseDir::lock() const {
  const std::string path = dir_ + "/.lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd >= 0) {
    (void)::fchmod(fd, 0666);  // let every user open it; fails harmlessly when another user owns it
  } else {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // flock needs no write access
  }
  if (fd < 0) return io_error(fmt::format("cannot open {}", path));
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const Error e = io_error(fmt::format("cannot lock {}", path));
    ::close(fd);
    return e;
  }
  return DirLock(fd);
}

std::string LeaseDir::file_of(std::string_view uuid) const {
  return fmt::format("{}/{}{}{}", dir_, kPrefix, uuid, kSuffix);
}

Result<std::vector<Lease>> LeaseDir::live_leases(long long now_unix_ms) const {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return io_error(fmt::format("cannot read the lock directory {}", dir_));
  std::vector<Lease> live;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix) || name.size() <= kPrefix.size() + kSuffix.size()) {
      continue;
    }
    const std::string_view uuid = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
    const std::string path = dir_ + "/" + std::string(name);
    const auto text = util::read_file(path);
    if (!text) continue;  // unreadable: not a lease this process can honour or remove
    auto lease = parse_lease(uuid, *text);
    if (lease && lease_is_live(*lease, now_unix_ms)) {
      live.push_back(std::move(*lease));
    } else {
      (void)::unlink(path.c_str());  // in the sticky directory only its owner (or root) can
    }
  }
  ::closedir(d);
  return live;
}

Result<void> LeaseDir::write(const std::vector<Lease>& leases) const {
  for (const auto& lease : leases) {
    const std::string path = file_of(lease.uuid);
    const std::string tmp = fmt::format("{}/.{}{}{}.{}.tmp", dir_, kPrefix, lease.uuid, kSuffix, ::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return io_error(fmt::format("cannot write {}", tmp));
    (void)::fchmod(fd, 0644);
    const std::string text = format_lease(lease);
    const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    const bool closed = ::close(fd) == 0;
    if (!written || !closed || ::rename(tmp.c_str(), path.c_str()) != 0) {
      const Error e = io_error(fmt::format("cannot write the lease {}", path));
      (void)::unlink(tmp.c_str());
      return e;
    }
  }
  return {};
}

void LeaseDir::remove(const std::vector<std::string>& uuids, const std::string& job_id) const {
  for (const auto& uuid : uuids) {
    const std::string path = file_of(uuid);
    const auto text = util::read_file(path);
    if (!text) continue;
    const auto lease = parse_lease(uuid, *text);
    if (lease && lease->job_id != job_id) continue;  // not ours any more
    (void)::unlink(path.c_str());
  }
}

}  // namespace tarmac::sched
