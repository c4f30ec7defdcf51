#include "tarmac/util/fs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace tarmac::util {

namespace {

// Reads `fd` to its end and closes it.
std::optional<std::string> read_and_close(int fd) {
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

}  // namespace

std::optional<std::string> read_file(const std::string& path) {
  // Plain syscalls: this runs for every GPU process on every sample, and iostreams cost more
  // than the read itself for the small files of /proc.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  return read_and_close(fd);
}

std::optional<std::string> read_file_at(int dir_fd, const char* relative) {
  const int fd = ::openat(dir_fd, relative, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  return read_and_close(fd);
}

bool write_file_atomically(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (written && closed && std::rename(tmp.c_str(), path.c_str()) == 0) return true;
  std::remove(tmp.c_str());
  return false;
}

}  // namespace tarmac::util
