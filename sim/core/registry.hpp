// The registry of live GPU processes: one file per process in the state directory's procs/,
// written by the launcher (scenario processes) or by the load program itself. A process counts
// as long as the pid still names the process that started at the recorded starttime, so a
// killed process disappears from its GPUs at once and a reused pid is never mistaken for it.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <vector>

#include "scenario.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::sim {

struct LiveProcess {
  pid_t pid = 0;
  unsigned long long starttime = 0;
  std::vector<unsigned> gpus;         // NVML indices
  unsigned long long memory_mib = 0;  // on each GPU
  unsigned sm_util = 0;
  unsigned mem_util = 0;
  unsigned enc_util = 0;  // a load's video encoder utilization (a transcoder at SM 0 %)
  UtilSample util_sample = UtilSample::Normal;  // a load's: what its utilization samples say
  std::optional<unsigned> scenario_process;  // index into Scenario::processes; none for loads
  std::optional<unsigned> mig_device;        // the MIG device of gpus[0] it runs on
  ProcessType type = ProcessType::Compute;
};

// Writes procs/PID (atomically). The starttime is read from /proc when `p.starttime` is 0.
[[nodiscard]] Result<void> register_process(const std::filesystem::path& procs_dir, LiveProcess p);
void unregister_process(const std::filesystem::path& procs_dir, pid_t pid);

// Every registered process that is still alive; `stale`, when given, receives the pids of
// entries whose process is gone (the launcher removes their files).
[[nodiscard]] std::vector<LiveProcess> read_live_processes(const std::filesystem::path& procs_dir,
                                                           std::vector<pid_t>* stale = nullptr);

}  // namespace tarmac::sim
