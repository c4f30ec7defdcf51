// Who has the GPU driver's device files open, as `fuser -v /dev/nvidia*` finds them: NVML lists
// the processes with a context, but a DataLoader worker or another child that inherited the
// descriptors keeps the device (and its memory) without being listed.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tarmac::host {

// One process with at least one /dev/nvidia* file open.
struct DeviceFileHolder {
  unsigned pid = 0;
  std::vector<std::string> devices;  // "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", sorted, each once
};

// Every process under `proc_root` with a /dev/nvidia* file open, by ascending pid. A process whose
// fd directory cannot be read (another user's, when not root) or that exits meanwhile is left out:
// the list is a lower bound, never a guess. At most kMaxFdsPerProcess descriptors are read a process.
inline constexpr unsigned kMaxFdsPerProcess = 1U << 16;
[[nodiscard]] std::vector<DeviceFileHolder> device_file_holders(const std::string& proc_root = "/proc");

// The minor number in "/dev/nvidia<N>" (a GPU's own file; DeviceIdentity::minor_number), nullopt
// for nvidiactl, nvidia-uvm and the others that every CUDA process opens.
[[nodiscard]] std::optional<unsigned> gpu_minor_of(const std::string& device_path);

}  // namespace tarmac::host
