// What process_test starts: reports, on its stdout, what it was started with, so that the test can
// compare it with the spec. One mode per argument:
//   fds      one line per open descriptor: "N TARGET" (readlink of /proc/self/fd/N)
//   env      each environment entry followed by a NUL byte
//   ids      "pid sid pgid"
//   signals  the SigBlk and SigIgn lines of /proc/self/status
//   cwd      the working directory
//   wait     reads its stdin to the end, then exits 0
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>

extern char** environ;

namespace {

int print_fds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 2;
  std::set<int> fds;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::stoi(entry->d_name);
    if (fd != ::dirfd(dir)) fds.insert(fd);
  }
  ::closedir(dir);
  for (const int fd : fds) {
    char target[4096] = {};
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    std::printf("%d %s\n", fd, n > 0 ? target : "?");
  }
  return 0;
}

int print_signals() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("SigBlk:") || line.starts_with("SigIgn:")) std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string mode = argv[1];
  if (mode == "fds") return print_fds();
  if (mode == "env") {
    for (char** e = environ; *e != nullptr; ++e) std::fwrite(*e, 1, std::strlen(*e) + 1, stdout);
    return 0;
  }
  if (mode == "ids") {
    std::printf("%d %d %d\n", ::getpid(), ::getsid(0), ::getpgid(0));
    return 0;
  }
  if (mode == "signals") return print_signals();
  if (mode == "cwd") {
    char cwd[4096] = {};
    std::printf("%s\n", ::getcwd(cwd, sizeof cwd) != nullptr ? cwd : "?");
    return 0;
  }
  if (mode == "wait") {
    char buffer[256];
    while (::read(STDIN_FILENO, buffer, sizeof buffer) > 0) {
    }
    return 0;
  }
  return 2;
}
