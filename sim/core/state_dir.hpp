// The state directory of a running simulation (TARMAC_SIM_STATE): the files every process of the
// simulation reads, and the small file helpers they are written with.
//
//   scenario.toml   the scenario, copied at start
//   clock           start_real_ns, speed, epoch_ns (clock.hpp)
//   procs/PID       one file per live GPU process (registry.hpp)
//   faults          runtime fault specs, one a line (faults.hpp), re-read when it changes
//   uses/ID         how many calls a counted fault has answered, shared by all processes
//   bin/NAME        links to the load program, so scenario processes get their name at exec
//   ready           written when every scenario process has started
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tarmac/util/result.hpp"

namespace tarmac::sim {

class StateDir {
 public:
  explicit StateDir(std::filesystem::path root) : root_(std::move(root)) {}
  [[nodiscard]] const std::filesystem::path& root() const { return root_; }
  [[nodiscard]] std::filesystem::path scenario() const { return root_ / "scenario.toml"; }
  [[nodiscard]] std::filesystem::path clock() const { return root_ / "clock"; }
  [[nodiscard]] std::filesystem::path procs() const { return root_ / "procs"; }
  [[nodiscard]] std::filesystem::path faults() const { return root_ / "faults"; }
  [[nodiscard]] std::filesystem::path faults_lock() const { return root_ / "faults.lock"; }
  [[nodiscard]] std::filesystem::path uses() const { return root_ / "uses"; }
  [[nodiscard]] std::filesystem::path bin() const { return root_ / "bin"; }
  [[nodiscard]] std::filesystem::path ready() const { return root_ / "ready"; }

  // Creates the directory and its sub-directories, readable (and the shared counters writable)
  // by every user, since scenario processes may run as other users.
  [[nodiscard]] Result<void> create() const;

 private:
  std::filesystem::path root_;
};

// Writes a file so that readers see the old or the new content, never a part (temp + rename).
[[nodiscard]] Result<void> write_file_atomic(const std::filesystem::path& path, const std::string& content);
[[nodiscard]] Result<std::string> read_file(const std::filesystem::path& path);
// "key=value" lines (blank lines and # comments skipped).
[[nodiscard]] Result<std::vector<std::pair<std::string, std::string>>> read_key_values(const std::filesystem::path& path);

// An exclusive flock on a file, released when it goes out of scope.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  [[nodiscard]] bool locked() const { return fd_ >= 0; }
  [[nodiscard]] int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace tarmac::sim
