// Who has the GPU driver's device files open, as `fuser -v /dev/nvidia*` finds them: NVML lists
// the processes with a context, but a DataLoader worker or another child that inherited the
// descriptors keeps the device (and its memory) without being listed.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tarmac::host {

// One process with at least one /dev/nvidia* file open.
struct DeviceFileHolder {
  unsigned pid = 0;
  std::vector<std::string> devices;  // "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", sorted, each once
};

// Every process under `proc_root` with a /dev/nvidia* file open, by ascending pid. A process whose
// fd directory cannot be read (another user's, when not root) or that exits meanwhile is left out:
// the list is a lower bound, never a guess. At most kMaxFdsPerProcess descriptors are read a
// process, at most kMaxScannedProcesses processes, and the scan stops after kMaxScanMs (a lower
// bound still: what it shows is never what decides a kill). `which`, when given, chooses the
// processes whose descriptors are read (a caller that shows only some processes' holders need not
// read every process's descriptors: the costly part of the scan).
inline constexpr unsigned kMaxFdsPerProcess = 1U << 16;
inline constexpr unsigned kMaxScannedProcesses = 1U << 22;  // the kernel's largest pid_max
inline constexpr long long kMaxScanMs = 5000;
[[nodiscard]] std::vector<DeviceFileHolder> device_file_holders(const std::string& proc_root = "/proc",
                                                                const std::function<bool(unsigned)>& which = {});

// A character device's numbers (st_rdev): an NVIDIA GPU's own file is (kNvidiaMajor, its minor).
struct DeviceNumber {
  unsigned major = 0;
  unsigned minor = 0;
  friend bool operator==(const DeviceNumber&, const DeviceNumber&) = default;
};
inline constexpr unsigned kNvidiaMajor = 195;

// Whether a process has a device open, as fstat of its descriptors proves it.
enum class Holding {
  Holds,    // a descriptor is that character device
  NotHeld,  // every descriptor was looked at: none is
  Unknown,  // not proven either way: the fd directory unreadable, or a bound reached first
};

// The bounds of one process's descriptor scan: a process with a million descriptors must not
// stall a pass, and "a bound reached without finding it" is Unknown, never NotHeld.
struct FdScanBounds {
  unsigned max_fds = kMaxFdsPerProcess;
  long long max_ms = 1000;
};

// Whether a descriptor whose link reads `link` is one holds_device may stat: exactly
// /dev/nvidia<N>, /dev/nvidiactl or /dev/nvidia-uvm*, or `test_device_path` when it is not empty
// (TARMAC_REAP_TEST_DEVICE_FILE, honoured only while reap's preview gate is open). Any other
// path, /dev/shm and the rest of /dev among them, is never stat'ed: a user's FUSE file there whose
// daemon never answers GETATTR would stall root's pass (N3 of the second review).
[[nodiscard]] bool statable_device_link(std::string_view link, std::string_view test_device_path = {});

// Whether `pid` (under `proc_root`) has the character device `device` open: statx of
// /proc/PID/fd/N (AT_STATX_DONT_SYNC), only for descriptors statable_device_link accepts. A user
// can still mount FUSE on a file named /dev/nvidia0 in their own mount namespace; the magic link
// then reads that name, and the bounds below cap what such a stall costs.
[[nodiscard]] Holding holds_device(const std::string& proc_root, unsigned pid, DeviceNumber device,
                                   FdScanBounds bounds = {}, std::string_view test_device_path = {});
// The same over the fd directory `fd_dir` (/proc/PID/task/TID/fd for one thread).
[[nodiscard]] Holding holds_device_in(const std::string& fd_dir, DeviceNumber device, FdScanBounds bounds = {},
                                      std::string_view test_device_path = {});

// The device numbers of the character device at `path` (stat), nullopt when it is none.
[[nodiscard]] std::optional<DeviceNumber> char_device_of(const std::string& path);

// The minor number in "/dev/nvidia<N>" (a GPU's own file; DeviceIdentity::minor_number), nullopt
// for nvidiactl, nvidia-uvm and the others that every CUDA process opens.
[[nodiscard]] std::optional<unsigned> gpu_minor_of(const std::string& device_path);

}  // namespace tarmac::host
