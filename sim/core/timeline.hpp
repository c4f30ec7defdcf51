// Evaluating a GPU's timeline: the layered [[timeline]] segments at a simulated time, resolved
// with the GPU's idle state and what runs on it into the numbers NVML reports.
#pragma once

#include "scenario.hpp"

namespace tarmac::sim {

// What one GPU reports at one moment (before memory and processes, which device_model adds).
struct GpuSample {
  unsigned util_gpu = 0;
  unsigned util_mem = 0;
  unsigned temp_c = 0;
  double power_w = 0;
  Clocks clocks;
  unsigned pstate = 8;
  unsigned long long throttle_reasons = 0;
  unsigned fan_pct = 0;
  unsigned pcie_tx_kbps = 0;
  unsigned pcie_rx_kbps = 0;
  unsigned encoder_util = 0;
  unsigned decoder_util = 0;
  double gpm_sm_util = 0;
  double gpm_sm_occupancy = 0;
  double gpm_tensor_util = 0;
  double gpm_dram_bw_util = 0;
};

// What runs on the GPU besides the timeline.
struct Activity {
  bool workload_gone = false;  // the GPU's scenario processes were all killed: it falls idle
  bool any_process = false;    // some process holds memory on it (keeps it in P0)
  unsigned load_util = 0;      // summed --util of load programs on it
};

// The timeline's values at t: later segments override earlier ones, key by key.
[[nodiscard]] SegmentValues merged_values(const Scenario& scenario, unsigned gpu, double t);

// Fills what the segments leave unset from the idle state and simple rules (docs/simulator.md).
[[nodiscard]] GpuSample resolve_sample(const GpuSpec& gpu, const SegmentValues& values, const Activity& activity);

// Energy in joules that the timeline's power draws over [from, to) simulated seconds.
[[nodiscard]] double timeline_energy_j(const Scenario& scenario, unsigned gpu, double from, double to);

}  // namespace tarmac::sim
