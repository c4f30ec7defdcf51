#include "tarmac/host/job_map.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "tarmac/util/clock.hpp"
#include "tarmac/util/fd.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::host {

namespace {

constexpr std::size_t kMaxFileBytes = 64 * 1024;
constexpr std::size_t kMaxJobsPerGpu = 64;
constexpr long long kLockWaitMs = 5000;

std::optional<unsigned> gpu_index(std::string_view name) {
  if (name.empty() || name.size() > 4 || name.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  if (name.size() > 1 && name.front() == '0') return std::nullopt;
  return static_cast<unsigned>(std::stoul(std::string(name)));
}

// The whole of a regular file under `dir_fd`, or nullopt.
std::optional<std::string> read_at(int dir_fd, const std::string& name) {
  util::Fd fd(openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) return std::nullopt;
  struct stat st{};
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::size_t>(st.st_size) > kMaxFileBytes) {
    return std::nullopt;
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd.get(), text.data() + got, text.size() - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  return text;
}

std::vector<std::string> jobs_in(const std::string& text) {
  std::vector<std::string> jobs;
  for (const auto& line : util::split(text, '\n')) {
    const std::string id(util::trim(line));
    if (!valid_job_id(id) || std::find(jobs.begin(), jobs.end(), id) != jobs.end()) continue;
    jobs.push_back(id);
    if (jobs.size() == kMaxJobsPerGpu) break;
  }
  return jobs;
}

constexpr std::string_view kInfoPrefix = ".job-";

// A user or partition name as the info file may hold it: plain, short, no separators.
bool plain_name(std::string_view v) {
  return !v.empty() && v.size() <= 64 && std::all_of(v.begin(), v.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '.' ||
           c == '@' || c == '-';
  });
}

JobInfo info_in(const std::string& text) {
  JobInfo info;
  for (const auto& whole : util::split(text, '\n')) {
    const std::string_view line = whole;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, eq);
    const std::string_view value = util::trim(line.substr(eq + 1));
    if (!plain_name(value)) continue;
    if (key == "user") info.user = std::string(value);
    if (key == "partition") info.partition = std::string(value);
  }
  return info;
}

Error io_error(const std::string& what) {
  return make_error(Error::Code::Io, fmt::format("{}: {}", what, std::strerror(errno)));
}

// Whether a directory on the way may be trusted: its owner root or this user, and writable by
// nobody else unless sticky (as /tmp: others cannot replace what is in it). The last one must not
// be writable by others at all.
bool trusted_dir(const struct stat& st, bool last) {
  if (!S_ISDIR(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid())) return false;
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) == 0) return true;
  return !last && (st.st_mode & S_ISVTX) != 0;
}

// Opens `dir` one component at a time from /, never through a link, creating what is missing
// (0755), each directory checked with trusted_dir: root's writes there cannot be redirected.
Result<util::Fd> open_private_dir(const std::string& dir) {
  if (dir.empty() || dir.front() != '/') {
    return make_error(Error::Code::Invalid, fmt::format("{}: the job mapping directory must be an absolute path", dir));
  }
  util::Fd at(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!at) return io_error("cannot open /");
  const auto parts = util::split(std::string_view(dir).substr(1), '/');
  std::vector<std::string> names;
  for (const auto& p : parts) {
    if (p.empty() || p == ".") continue;
    if (p == "..") return make_error(Error::Code::Invalid, fmt::format("{}: \"..\" in the job mapping directory", dir));
    names.push_back(p);
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    const bool last = i + 1 == names.size();
    util::Fd next(openat(at.get(), names[i].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!next && errno == ENOENT) {
      if (mkdirat(at.get(), names[i].c_str(), 0755) != 0 && errno != EEXIST) return io_error("cannot create " + dir);
      next.reset(openat(at.get(), names[i].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    }
    if (!next) return io_error(fmt::format("cannot open {} (a link, or not a directory?)", dir));
    struct stat st{};
    if (fstat(next.get(), &st) != 0 || !trusted_dir(st, last)) {
      return make_error(Error::Code::Invalid,
                        fmt::format("{}: every directory on its path must be root's or this user's, and {} writable "
                                    "by no one else",
                                    dir, last ? "it" : "each (but sticky ones, as /tmp)"));
    }
    at = std::move(next);
  }
  return at;
}

}  // namespace

bool valid_job_id(std::string_view id) {
  if (id.empty() || id.size() > 64 || id.front() == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '.' ||
           c == '-';
  });
}

namespace {

// The mapping directory, opened for reading when it is one root (or this user) keeps: its owner
// root's or this user's, writable by no one else. Anything else is read as no mapping: a directory
// others can write would let them attribute GPUs to jobs, and forge users, in root's records.
util::Fd open_trusted_map(const std::string& dir) {
  util::Fd dir_fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat st{};
  if (!dir_fd || fstat(dir_fd.get(), &st) != 0 || !trusted_dir(st, true)) return util::Fd();
  return dir_fd;
}

// Calls `each(dir_fd, name)` for the entries of the trusted mapping directory (at most 4096 names
// read: a directory flooded with names is not read to its end).
template <typename Each>
void for_each_entry(const std::string& dir, Each each) {
  util::Fd dir_fd = open_trusted_map(dir);
  if (!dir_fd) return;
  DIR* d = fdopendir(dup(dir_fd.get()));
  if (d == nullptr) return;
  std::size_t seen = 0;
  while (const dirent* e = readdir(d)) {
    if (++seen > 4096) break;
    each(dir_fd.get(), std::string_view(e->d_name));
  }
  closedir(d);
}

}  // namespace

JobMap read_job_map(const std::string& dir) {
  JobMap out;
  for_each_entry(dir, [&out](int dir_fd, std::string_view name) {
    const auto index = gpu_index(name);
    if (!index) return;
    if (const auto text = read_at(dir_fd, std::string(name))) {
      auto jobs = jobs_in(*text);
      if (!jobs.empty()) out[*index] = std::move(jobs);
    }
  });
  return out;
}

JobInfos read_job_infos(const std::string& dir) {
  JobInfos out;
  for_each_entry(dir, [&out](int dir_fd, std::string_view name) {
    if (!name.starts_with(kInfoPrefix) || !valid_job_id(name.substr(kInfoPrefix.size()))) return;
    if (const auto text = read_at(dir_fd, std::string(name))) out[std::string(name.substr(kInfoPrefix.size()))] = info_in(*text);
  });
  return out;
}

namespace {

// Replaces `name` under `dir_fd` with `text` (0644) through a randomly named temporary file, so a
// reader sees the old file or the new one, whole.
Result<void> replace_at(int dir_fd, const std::string& dir, const std::string& name, const std::string& text) {
  unsigned long long salt = 0;
  if (getrandom(&salt, sizeof salt, 0) != static_cast<ssize_t>(sizeof salt)) salt = static_cast<unsigned long long>(util::monotonic_ms());
  const std::string tmp = fmt::format(".{}.{:016x}.tmp", name, salt);
  util::Fd out(openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!out) return io_error("cannot write " + dir + "/" + tmp);
  const bool written = write(out.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       fchmod(out.get(), 0644) == 0;
  out.reset();
  if (!written || renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
    const Error e = io_error("cannot write " + dir + "/" + name);
    unlinkat(dir_fd, tmp.c_str(), 0);
    return e;
  }
  return {};
}

}  // namespace

Result<void> change_job_map(const std::string& dir, const std::vector<unsigned>& gpus, const std::string& job,
                            JobMapChange change, const JobInfo* info) {
  if (!valid_job_id(job)) return make_error(Error::Code::Invalid, fmt::format("\"{}\" is not a job id", job));
  TARMAC_TRY_ASSIGN(util::Fd dir_fd, open_private_dir(dir));
  // The lock is a file of its own beside the directory, readable by its owner alone: a user who
  // could open what is locked could hold the lock and hang every prolog and epilog.
  util::Fd lock(open((dir + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
  struct stat lst{};
  if (!lock || fstat(lock.get(), &lst) != 0 || !S_ISREG(lst.st_mode) || lst.st_uid != geteuid() ||
      (lst.st_mode & 077) != 0) {
    return make_error(Error::Code::Invalid, fmt::format("{}.lock must be a regular file of this user that no one "
                                                        "else can open",
                                                        dir));
  }
  const long long deadline = util::monotonic_ms() + kLockWaitMs;
  while (flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return io_error("cannot lock " + dir + ".lock");
    if (util::monotonic_ms() >= deadline) {
      return make_error(Error::Code::Io, fmt::format("{}.lock is held by another process for over {} s", dir,
                                                     kLockWaitMs / 1000));
    }
    usleep(10'000);
  }
  for (const unsigned gpu : gpus) {
    const std::string name = std::to_string(gpu);
    auto jobs = jobs_in(read_at(dir_fd.get(), name).value_or(""));
    std::erase(jobs, job);
    if (change == JobMapChange::Add) jobs.push_back(job);
    if (jobs.empty()) {
      if (unlinkat(dir_fd.get(), name.c_str(), 0) != 0 && errno != ENOENT) return io_error("cannot remove " + dir + "/" + name);
      continue;
    }
    std::string text;
    for (const auto& j : jobs) text += j + "\n";
    TARMAC_TRY(replace_at(dir_fd.get(), dir, name, text));
  }
  const std::string info_name = std::string(kInfoPrefix) + job;
  if (change == JobMapChange::Remove) {
    if (unlinkat(dir_fd.get(), info_name.c_str(), 0) != 0 && errno != ENOENT) return io_error("cannot remove " + dir + "/" + info_name);
  } else if (info != nullptr) {
    std::string text;
    if (plain_name(info->user)) text += "user=" + info->user + "\n";
    if (plain_name(info->partition)) text += "partition=" + info->partition + "\n";
    TARMAC_TRY(replace_at(dir_fd.get(), dir, info_name, text));
  }
  return {};
}

}  // namespace tarmac::host
