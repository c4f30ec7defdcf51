// Activity classes (PRODUCT.md §3): one word per GPU saying what it really does.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "tarmac/gpu/model.hpp"

namespace tarmac::gpu {

enum class Activity { Busy, Starved, Holding, Idle, ReservedIdle, Fault };

inline constexpr std::array<Activity, 6> kActivities = {Activity::Busy,         Activity::Starved,
                                                        Activity::Holding,      Activity::Idle,
                                                        Activity::ReservedIdle, Activity::Fault};

// The thresholds, all configuration with these documented defaults (docs/ARCHITECTURE.md).
struct ActivityThresholds {
  unsigned busy_util_pct = 30;          // at or above: busy
  unsigned starved_mem_pct = 50;        // memory held (of total) at or above, with utilization below busy: starved
  long long holding_after_s = 10 * 60;  // processes holding memory at 0 % for this long: holding
};

// The one definition of "starved", shared by the class (status, the dashboard, the store), the
// starvation alert and doctor: the GPU is not lost, has processes, its utilization is below
// busy_util_pct (unknown counts as 0, as for busy) and its memory used is at least starved_mem_pct
// of its total. In a class, fault and holding (at 0 % for holding_after) come before starved.
[[nodiscard]] bool is_starved(const Device& device, const ActivityThresholds& thresholds);

// Whether tarmac itself leased the GPU (scheduler); a leased GPU with nothing running is reserved-idle.
enum class Leased { No, Yes };

// busy: utilization at or above busy_util_pct. holding: processes at 0 % for holding_after_s.
// starved: processes hold at least starved_mem_pct of memory below busy. idle: no processes, or
// processes holding little memory below busy. fault: lost, slowed by heat or power, memory errors.
// Classifies one GPU from one snapshot. Without history, "how long at 0 %" is bounded below by
// the age of the GPU's youngest process: a process that started recently cannot have held its
// memory idle for longer than it has existed.
[[nodiscard]] Activity classify(const Device& device, const ActivityThresholds& thresholds, long long now_unix_s,
                                Leased leased = Leased::No);

// Classifies one GPU with history: `held_idle_s` is how long, as the caller measured it over its
// samples, the GPU has had processes at 0 % utilization (0 when it has not). Process ages do not
// matter here, so this works on any clock (the agent under a fast simulation).
[[nodiscard]] Activity classify_with_history(const Device& device, const ActivityThresholds& thresholds,
                                             long long held_idle_s, Leased leased = Leased::No);

// Since when a GPU has been in its class, as something that watched it over time measured (the
// agent: from its first sample at the earliest), on the watcher's clock in ms.
struct ActivitySince {
  long long class_ms = 0;                  // the class began
  std::optional<long long> held_idle_ms;   // its processes have been at 0 % utilization since
};

// A MIG device's class (docs/mig.md): idle without processes (reserved-idle when tarmac leased that
// MIG device to a job, `tarmac run --mig`); with its GPU instance's GPM (Hopper
// and later), its processes, memory and GPM SM activity classified as a GPU's; without GPM (MIG
// mode gives no utilization), busy by process presence, `measured` false, so that nothing shows
// a utilization NVML did not give. A GPU in MIG mode with MIG devices is classified (classify,
// classify_with_history) as its most active MIG device.
struct MigActivity {
  Activity activity = Activity::Idle;
  bool measured = true;  // from GPM or an empty slice; false: from process presence alone
};
[[nodiscard]] MigActivity classify_mig(const Device& device, std::size_t mig_index, const ActivityThresholds& thresholds,
                                       long long now_unix_s, Leased leased = Leased::No);

// Sets each process's MIG device (GpuProcess::mig: a position in `mig`) from the instance ids NVML
// listed it with, clearing what an older layout left: call again after putting processes of an
// earlier read beside newer MIG devices.
void match_mig_processes(const std::vector<MigDevice>& mig, std::vector<GpuProcess>& processes);

[[nodiscard]] const char* to_string(Activity activity);

// Why a device counts as a fault, or nullopt.
[[nodiscard]] std::optional<std::string> fault_reason(const Device& device);

}  // namespace tarmac::gpu
