// Test helpers: a realistic /proc/<pid>/stat line and a throwaway fake /proc tree.
#pragma once

#include <fcntl.h>
#include <stdlib.h>  // mkdtemp
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace tarmac::host::test_support {

// A container id as Docker and containerd write it in a cgroup path.
inline const std::string kContainerId = "3f4e8c2b9a1d7e6f5c4b3a2918f7e6d5c4b3a29180f7e6d5c4b3a2918f7e6d5c";

// A /proc/<pid>/stat line with all 52 fields, `comm`, `state`, `ppid` and `starttime` chosen.
inline std::string stat_line(unsigned pid, const std::string& comm, char state, unsigned ppid,
                             unsigned long long starttime) {
  return std::to_string(pid) + " (" + comm + ") " + state + " " + std::to_string(ppid) +
         " 4242 4242 0 -1 4194560 2395 0 0 0 12 3 0 0 20 0 1 0 " + std::to_string(starttime) +
         " 12345678 456 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
}

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class FakeProc {
 public:
  FakeProc() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tarmac-proc-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) root_ = pattern;
  }
  ~FakeProc() {
    std::error_code ec;
    if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  }
  FakeProc(const FakeProc&) = delete;
  FakeProc& operator=(const FakeProc&) = delete;

  [[nodiscard]] const std::string& root() const { return root_; }

  // Writes `content` (NULs included) to root/relative, creating folders on the way.
  void write(const std::string& relative, const std::string& content) const {
    const std::filesystem::path path = std::filesystem::path(root_) / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << content;
  }

  // Makes root/relative (in place of the file there) a FIFO that nobody writes: a read of it
  // blocks (in open, then in read) as a read of /proc/PID/cmdline or environ blocks while a thread
  // of PID holds its memory map locked. release_fifo lets such a reader go.
  [[nodiscard]] bool make_fifo(const std::string& relative) const {
    const std::filesystem::path path = std::filesystem::path(root_) / relative;
    std::error_code ec;
    std::filesystem::remove(path, ec);
    std::filesystem::create_directories(path.parent_path());
    return ::mkfifo(path.c_str(), 0600) == 0;
  }
  // Opens the FIFO for writing and closes it, so that a reader blocked on it sees its end: waits
  // (yielding) for that reader to be there, at most `wait`; false when none came.
  [[nodiscard]] bool release_fifo(const std::string& relative,
                                  std::chrono::milliseconds wait = std::chrono::seconds(30)) const {
    const std::string path = (std::filesystem::path(root_) / relative).string();
    const auto give_up = std::chrono::steady_clock::now() + wait;
    for (;;) {
      // Non-blocking: succeeds only while a reader has the FIFO open (or waits in open).
      const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) {
        ::close(fd);
        return true;
      }
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::yield();
    }
  }

 private:
  std::string root_;
};

}  // namespace tarmac::host::test_support
