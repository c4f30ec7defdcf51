#include "tarmac/host/device_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>

#include "tarmac/host/proc_parse.hpp"
#include "tarmac/util/clock.hpp"
#include "tarmac/util/fd.hpp"

namespace tarmac::host {
namespace {

constexpr std::string_view kDevicePrefix = "/dev/nvidia";
constexpr std::string_view kControlFile = "/dev/nvidiactl";
constexpr std::string_view kUvmPrefix = "/dev/nvidia-uvm";

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

// The path the descriptor `name` of the fd directory `dir` names ("" when unreadable).
std::string link_text(int dir, const char* name) {
  char target[256];
  const ssize_t n = ::readlinkat(dir, name, target, sizeof target - 1);
  return n > 0 ? std::string(target, static_cast<std::size_t>(n)) : std::string();
}

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
    std::string text = link_text(dirfd(fds.d), entry->d_name);
    if (!std::string_view(text).starts_with(kDevicePrefix)) continue;
    if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(std::move(text));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<DeviceFileHolder> device_file_holders(const std::string& proc_root, const std::function<bool(unsigned)>& which) {
  std::vector<DeviceFileHolder> out;
  util::Fd root(::open(proc_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return out;
  Dir procs(::dup(root.get()));
  if (procs.d == nullptr) return out;
  const long long deadline = util::monotonic_ms() + kMaxScanMs;
  unsigned scanned = 0;
  while (const dirent* entry = readdir(procs.d)) {
    const auto pid = pid_of_proc_entry(entry->d_name);
    if (!pid) continue;
    if (++scanned > kMaxScannedProcesses || util::monotonic_ms() > deadline) break;
    if (which && !which(*pid)) continue;
    auto devices = nvidia_targets(root.get(), entry->d_name);
    if (!devices.empty()) out.push_back({*pid, std::move(devices)});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  return out;
}

bool statable_device_link(std::string_view link, std::string_view test_device_path) {
  if (!test_device_path.empty() && link == test_device_path) return true;
  if (link == kControlFile) return true;
  if (link.starts_with(kUvmPrefix)) return link.find('/', kUvmPrefix.size()) == std::string_view::npos;
  return gpu_minor_of(std::string(link)).has_value();
}

Holding holds_device(const std::string& proc_root, unsigned pid, DeviceNumber device, FdScanBounds bounds,
                     std::string_view test_device_path) {
  return holds_device_in(proc_root + "/" + std::to_string(pid) + "/fd", device, bounds, test_device_path);
}

Holding holds_device_in(const std::string& fd_dir, DeviceNumber device, FdScanBounds bounds,
                        std::string_view test_device_path) {
  Dir fds(::open(fd_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fds.d == nullptr) return Holding::Unknown;
  const long long deadline = util::monotonic_ms() + bounds.max_ms;
  unsigned seen = 0;
  while (const dirent* entry = readdir(fds.d)) {
    if (entry->d_name[0] == '.') continue;
    if (++seen > bounds.max_fds || util::monotonic_ms() > deadline) return Holding::Unknown;
    if (!statable_device_link(link_text(dirfd(fds.d), entry->d_name), test_device_path)) continue;
    struct statx st {};
    // Follows the descriptor's magic link to the open file itself: its rdev is the device's,
    // whatever path it was opened by. DONT_SYNC: a network or FUSE file system is not asked to
    // bring its attributes up to date.
    if (::statx(dirfd(fds.d), entry->d_name, AT_STATX_DONT_SYNC, STATX_TYPE, &st) != 0 || !S_ISCHR(st.stx_mode)) continue;
    if (st.stx_rdev_major == device.major && st.stx_rdev_minor == device.minor) return Holding::Holds;
  }
  return Holding::NotHeld;
}

std::optional<DeviceNumber> char_device_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return std::nullopt;
  return DeviceNumber{::major(st.st_rdev), ::minor(st.st_rdev)};
}

std::optional<unsigned> gpu_minor_of(const std::string& device_path) {
  const std::string_view path(device_path);
  if (!path.starts_with(kDevicePrefix)) return std::nullopt;
  return parse_digits(path.substr(kDevicePrefix.size()), 4);
}

}  // namespace tarmac::host
