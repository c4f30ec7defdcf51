// One GPU at one moment: the timeline's values combined with the processes that really run on it
// (memory used, process lists, a workload that was killed, load programs' extra utilization).
#pragma once

#include <optional>
#include <vector>

#include "registry.hpp"
#include "scenario.hpp"
#include "timeline.hpp"

namespace tarmac::sim {

struct ProcessView {
  unsigned pid = 0;
  unsigned long long used_bytes = 0;
  ProcessType type = ProcessType::Compute;
  unsigned sm_util = 0;
  unsigned mem_util = 0;
  UtilSample util_sample = UtilSample::Normal;  // what its per-process utilization samples say
  unsigned enc_util = 0;
  std::optional<unsigned> mig;  // the MIG device it runs on (index of GpuSpec::mig)
};

// One MIG device: its memory, and what its processes make of its slices.
struct MigView {
  unsigned long long total_bytes = 0;
  unsigned long long used_bytes = 0;
  unsigned long long free_bytes = 0;
  unsigned sm_util = 0;   // its processes' SM utilization, summed and capped at 100 (its GPM values)
  unsigned mem_util = 0;  // the same of their memory utilization (DRAM bandwidth)
};

struct DeviceView {
  GpuSample sample;
  unsigned long long total_bytes = 0;
  unsigned long long reserved_bytes = 0;
  unsigned long long used_bytes = 0;  // overhead + processes (nvmlMemory_v2_t.used)
  unsigned long long free_bytes = 0;
  std::vector<ProcessView> processes;  // by pid
  std::vector<MigView> mig;             // one per GpuSpec::mig
};

// Live: scenario processes count while their registered process lives (launcher runs).
// Static: no state directory, no real processes: scenario processes count as running (memory
// and utilization as the scenario says) but none is listed, since no such PID exists.
enum class ProcessMode { Live, Static };

[[nodiscard]] DeviceView evaluate_device(const Scenario& scenario, unsigned gpu, double t,
                                         const std::vector<LiveProcess>& live, ProcessMode mode);

}  // namespace tarmac::sim
