#include "tarmac/util/fs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace tarmac::util {

std::optional<std::string> read_file(const std::string& path) {
  // Plain syscalls: this runs for every GPU process on every sample, and iostreams cost more
  // than the read itself for the small files of /proc.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      text.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    ::close(fd);
    if (n < 0) return std::nullopt;  // e.g. EACCES on read, or the process exited mid-read
    return text;
  }
}

}  // namespace tarmac::util
