// What the recorder stores, one struct per table (docs/recorder.md has the schema). Values keep the
// model's "optional = not supported" rule: a missing value is stored as NULL.
#pragma once

#include <optional>
#include <string>

#include "tarmac/gpu/activity.hpp"

namespace tarmac::store {

// One GPU as the agent last saw it (table gpu).
struct GpuInfo {
  unsigned gpu = 0;
  std::string uuid;
  std::string name;
  std::string pci_bus_id;
  std::optional<long long> mem_total_mib;
};

// One fast sample of one GPU (table gpu_sample; rolled up into gpu_minute and gpu_hour).
struct GpuSample {
  long long ts_ms = 0;
  unsigned gpu = 0;
  std::optional<long long> util_pct;
  std::optional<long long> mem_util_pct;
  std::optional<long long> mem_used_mib;
  std::optional<long long> power_w;
  std::optional<long long> temp_c;
  std::optional<long long> sm_mhz;
  std::optional<long long> mem_mhz;
  std::optional<long long> enc_pct;
  std::optional<long long> dec_pct;
  gpu::Activity activity = gpu::Activity::Idle;
};

// The slow values of one GPU (table gpu_slow_sample): PCIe throughput and, on Hopper and later, GPM.
struct SlowSample {
  long long ts_ms = 0;
  unsigned gpu = 0;
  std::optional<long long> pcie_tx_kbps;
  std::optional<long long> pcie_rx_kbps;
  std::optional<double> sm_active_pct;
  std::optional<double> sm_occupancy_pct;
  std::optional<double> tensor_active_pct;
  std::optional<double> dram_bw_pct;
};

// One process on one GPU at one moment (table process_sample). The utilizations keep the model's
// contract (gpu/model.hpp, GpuProcess): NULL is unknown, 0 is known idle.
struct ProcessSample {
  long long ts_ms = 0;
  unsigned gpu = 0;
  unsigned pid = 0;
  std::optional<long long> mem_used_mib;
  std::optional<long long> sm_util_pct;
  std::optional<long long> mem_util_pct;  // NULL in rows a version 1 store recorded
  // The busiest of the encoder, decoder, JPEG and OFA (NULL when none is known; NULL in rows a
  // store before version 3 recorded): one column, since whichever engine it is, it is work.
  std::optional<long long> other_util_pct;
};

// A process's stay on one GPU, from first to last sample that saw it (table process).
struct ProcessSpan {
  unsigned gpu = 0;
  unsigned pid = 0;
  long long first_ms = 0;
  long long last_ms = 0;
  std::optional<long long> start_unix;
  std::string user;
  std::string command;
  std::string container;
  std::string slurm_job;
  long long mem_used_mib_max = 0;
  // Whether the agent saw the driver's listing of this pid on this GPU begin while this process
  // had the pid: a process sample of the GPU, read in full and after the process had started,
  // did not list it, and no gap in sampling since. Only then is the listing proven to be this
  // process's own context and not a stale one left under a pid that changed hands (reap's N1 and
  // its third review's H1: docs/reap.md "Safety checks"). NULL in a store of schema 3 or older.
  bool listed_after_start = false;
};

// One GPU in one activity class without a break (table activity). end_ms is the last sample's
// time, or the time of the sample that started the next class.
struct ActivitySpan {
  unsigned gpu = 0;
  gpu::Activity activity = gpu::Activity::Idle;
  long long start_ms = 0;
  long long end_ms = 0;
};

// A MIG device's class over time (table mig_activity; docs/mig.md): its GPU and GPU instance, its
// profile and compute slices (its share of the board), and whether GPM measured the class or it
// comes from process presence.
struct MigSpan {
  unsigned gpu = 0;
  unsigned gpu_instance = 0;
  std::string profile;
  unsigned slices = 0;
  gpu::Activity activity = gpu::Activity::Idle;
  bool measured = true;
  long long start_ms = 0;
  long long end_ms = 0;
};

// A Slurm job's hold on one GPU, from the first to the last sample that found the GPU mapped to it
// in the HPC job mapping (table job_gpu), with what its prolog recorded of it. The GPU's classes
// over the same time (table activity) say how the job used it.
struct JobSpan {
  std::string job;
  unsigned gpu = 0;
  long long first_ms = 0;
  long long last_ms = 0;
  std::string user;       // "" when unknown
  std::string partition;  // "" when unknown
};

// Something that happened (table event): process-start, process-end, throttle-start, throttle-end,
// fault, fault-cleared, lost, agent-start, agent-stop, recording-gap.
struct Event {
  long long ts_ms = 0;
  std::optional<unsigned> gpu;
  std::string kind;
  std::string detail;
};

// Aggregates of the samples of one GPU over one minute or one hour (tables gpu_minute, gpu_hour).
struct Rollup {
  long long ts_ms = 0;  // the bucket's start
  unsigned gpu = 0;
  long long samples = 0;
  double util_avg = 0;
  long long util_max = 0;
  double mem_util_avg = 0;
  double mem_used_mib_avg = 0;
  long long mem_used_mib_max = 0;
  double power_w_avg = 0;
  long long temp_c_max = 0;
};

// The activity class's code in gpu_sample.class (table activity_class names them).
[[nodiscard]] int activity_code(gpu::Activity activity);
[[nodiscard]] std::optional<gpu::Activity> activity_from_code(long long code);
[[nodiscard]] std::optional<gpu::Activity> activity_from_name(std::string_view name);

}  // namespace tarmac::store
