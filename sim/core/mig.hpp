// Multi-Instance GPU: NVIDIA's GPU-instance profiles for the boards the simulator models (names,
// NVML profile numbers and ids, slices, memory, engines, placements, as `nvidia-smi mig -lgip` and
// `-lgipp` print them on a real driver), and the layout of one GPU: its GPU instances, each with
// one compute instance of its whole size, placed and numbered as the driver places and numbers
// them. docs/mig.md.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tarmac::sim {

struct MigProfile {
  const char* name;          // "1g.18gb"
  unsigned nvml_profile;     // NVML_GPU_INSTANCE_PROFILE_*: the argument of the profile queries
  unsigned id;               // the profile's id in nvmlGpuInstanceProfileInfo_t (nvidia-smi's "ID")
  unsigned slices;           // compute slices (the "g" of the name)
  unsigned memory_slices;    // placement size, in eighths of the board's memory
  unsigned instances;        // how many fit on an empty board
  unsigned long long memory_mib;
  unsigned multiprocessors;
  unsigned copy_engines, decoders, encoders, jpegs, ofas;
  std::vector<unsigned> starts;  // possible placements' first memory slice
};

// The profiles of a board, or empty for one without MIG (chosen by name and memory size: the
// A100 40GB and 80GB, the H100 80GB and the H200 141GB).
[[nodiscard]] std::span<const MigProfile> mig_profiles(const std::string& gpu_name, unsigned long long memory_mib);
[[nodiscard]] const MigProfile* find_mig_profile(std::span<const MigProfile> profiles, const std::string& name);

// NVML_COMPUTE_INSTANCE_PROFILE_* of a compute instance of `slices` compute slices.
[[nodiscard]] unsigned compute_profile_of_slices(unsigned slices);

// One GPU instance with its one compute instance (CI 0, the whole instance: `nvidia-smi mig -cgi P -C`).
struct MigInstance {
  const MigProfile* profile = nullptr;
  unsigned start = 0;  // first memory slice
  unsigned gi_id = 0;  // the driver's GPU instance id: its node in the memory slices' binary tree
  unsigned ci_id = 0;
  std::string uuid;  // "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
};

// The driver's GPU instance id of a placement (size 8: 0; size 4: 1-2; size 2: 3-6; size 1: 7-14).
[[nodiscard]] unsigned gpu_instance_id(unsigned start, unsigned memory_slices);

// Places the named profiles, each at its first placement that leaves room for the ones after it
// (so that 3g+2g+1g+1g fits, as `nvidia-smi mig -cgi 9,14,19,19` does); the instances come back
// in the driver's order (by GPU instance id). An error names a profile that does not exist, or
// says the set does not fit.
struct MigLayoutResult {
  std::vector<MigInstance> instances;
  std::string error;
};
[[nodiscard]] MigLayoutResult place_mig_instances(std::span<const MigProfile> profiles,
                                                  const std::vector<std::string>& names, const std::string& gpu_uuid);

}  // namespace tarmac::sim
