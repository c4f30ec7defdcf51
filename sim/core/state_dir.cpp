#include "state_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "tarmac/util/strings.hpp"

namespace tarmac::sim {

namespace fs = std::filesystem;

namespace {

Error io_error(const fs::path& path, const char* what) {
  return make_error(Error::Code::Io, fmt::format("{}: cannot {}: {}", path.string(), what, std::strerror(errno)));
}

}  // namespace

Result<void> StateDir::create() const {
  std::error_code ec;
  for (const fs::path& dir : {root_, procs(), uses(), bin()}) {
    fs::create_directories(dir, ec);
    if (ec) return make_error(Error::Code::Io, fmt::format("{}: cannot create: {}", dir.string(), ec.message()));
  }
  ::chmod(root_.c_str(), 0755);
  ::chmod(procs().c_str(), 0755);
  ::chmod(bin().c_str(), 0755);
  ::chmod(uses().c_str(), 01777);  // any process of the simulation may count a fault's uses
  return {};
}

Result<void> write_file_atomic(const fs::path& path, const std::string& content) {
  const fs::path tmp = path.string() + fmt::format(".tmp{}", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(tmp, "create");
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return io_error(tmp, "write");
    }
    done += static_cast<std::size_t>(n);
  }
  ::fchmod(fd, 0644);  // whatever the umask: every process of the simulation reads it
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return io_error(path, "replace");
  }
  return {};
}

Result<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Error::Code::NotFound, fmt::format("{}: cannot read", path.string()));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

Result<std::vector<std::pair<std::string, std::string>>> read_key_values(const fs::path& path) {
  TARMAC_TRY_ASSIGN(std::string text, read_file(path));
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& raw : util::split(text, '\n')) {
    const std::string_view line = util::trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    out.emplace_back(std::string(util::trim(line.substr(0, eq))), std::string(util::trim(line.substr(eq + 1))));
  }
  return out;
}

FileLock::FileLock(const fs::path& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0) return;
  ::fchmod(fd_, 0666);
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace tarmac::sim
