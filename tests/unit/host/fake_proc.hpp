// Test helpers: a realistic /proc/<pid>/stat line and a throwaway fake /proc tree.
#pragma once

#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <fstream>
#include <string>

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

 private:
  std::string root_;
};

}  // namespace tarmac::host::test_support
