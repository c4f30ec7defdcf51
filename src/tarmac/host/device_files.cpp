#include "tarmac/host/device_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>

#include "tarmac/host/proc_parse.hpp"
#include "tarmac/util/fd.hpp"

namespace tarmac::host {
namespace {

constexpr std::string_view kDevicePrefix = "/dev/nvidia";

// A directory stream that closes itself.
struct Dir {
  DIR* d = nullptr;
  explicit Dir(int fd) : d(fd >= 0 ? fdopendir(fd) : nullptr) {
    if (d == nullptr && fd >= 0) ::close(fd);
  }
  ~Dir() {
    if (d != nullptr) closedir(d);
  }
  Dir(const Dir&) = delete;
  Dir& operator=(const Dir&) = delete;
};

// The /dev/nvidia* targets among the descriptors of the fd directory `fd_dir` (read through
// readlinkat on the directory's descriptor, so a process exiting meanwhile only ends the list).
std::vector<std::string> nvidia_targets(int proc_dir_fd, const std::string& pid_name) {
  std::vector<std::string> out;
  Dir fds(::openat(proc_dir_fd, (pid_name + "/fd").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fds.d == nullptr) return out;
  unsigned seen = 0;
  while (const dirent* entry = readdir(fds.d)) {
    if (entry->d_name[0] == '.') continue;
    if (++seen > kMaxFdsPerProcess) break;
    char target[256];
    const ssize_t n = ::readlinkat(dirfd(fds.d), entry->d_name, target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string_view path(target, static_cast<std::size_t>(n));
    if (!path.starts_with(kDevicePrefix)) continue;
    std::string text(path);
    if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(std::move(text));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<DeviceFileHolder> device_file_holders(const std::string& proc_root) {
  std::vector<DeviceFileHolder> out;
  util::Fd root(::open(proc_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return out;
  Dir procs(::dup(root.get()));
  if (procs.d == nullptr) return out;
  while (const dirent* entry = readdir(procs.d)) {
    const auto pid = pid_of_proc_entry(entry->d_name);
    if (!pid) continue;
    auto devices = nvidia_targets(root.get(), entry->d_name);
    if (!devices.empty()) out.push_back({*pid, std::move(devices)});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  return out;
}

std::optional<unsigned> gpu_minor_of(const std::string& device_path) {
  const std::string_view path(device_path);
  if (!path.starts_with(kDevicePrefix)) return std::nullopt;
  return parse_digits(path.substr(kDevicePrefix.size()), 4);
}

}  // namespace tarmac::host
