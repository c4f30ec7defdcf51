// The scenario model: what a scenario file (sim/scenarios/*.toml, docs/simulator.md) describes,
// after parsing and validation. Plain data; evaluating it over simulated time is timeline.hpp's job.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fault_rule.hpp"
#include "mig.hpp"

namespace tarmac::sim {

// A PCI address, ordered the way NVML orders devices (domain, bus, device, function).
struct PciAddress {
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned device = 0;
  unsigned function = 0;
  auto operator<=>(const PciAddress&) const = default;
};

// When something is active, in simulated seconds since the scenario's start: [from, to), or,
// with `every`, [from, to) within each period of that length (a weekly pattern is every = 1w).
struct Window {
  double from = 0;
  std::optional<double> to;
  std::optional<double> every;

  [[nodiscard]] bool contains(double t) const;
  // The number of the period that contains t (0 when not periodic); nullopt when t is outside.
  [[nodiscard]] std::optional<long long> occurrence(double t) const;
};

// Clock rates in MHz, one per NVML clock type.
struct Clocks {
  unsigned graphics = 0;
  unsigned sm = 0;
  unsigned mem = 0;
  unsigned video = 0;
};
struct PartialClocks {
  std::optional<unsigned> graphics, sm, mem, video;
};

struct EccCounts {
  unsigned long long corrected_volatile = 0;
  unsigned long long uncorrected_volatile = 0;
  unsigned long long corrected_aggregate = 0;
  unsigned long long uncorrected_aggregate = 0;
};

struct RetiredPages {
  std::vector<unsigned long long> single_bit;  // page addresses
  std::vector<unsigned long long> double_bit;
  bool pending = false;
};

struct RemappedRows {
  unsigned correctable = 0;
  unsigned uncorrectable = 0;
  bool pending = false;
  bool failure = false;
};

// The static description of one GPU. Optional members are capabilities: absent means the
// simulated GPU answers NOT_SUPPORTED for them.
struct GpuSpec {
  int line = 0;  // where it was defined, for messages
  std::string name;
  std::string uuid;
  std::optional<std::string> serial;
  std::string pci_bus_id;  // normalised: "00000000:07:00.0"
  PciAddress pci;
  unsigned pci_device_id = 0;
  unsigned pci_subsystem_id = 0;
  unsigned minor_number = 0;
  unsigned architecture = 0;  // NVML_DEVICE_ARCH_*
  int cc_major = 0;
  int cc_minor = 0;
  unsigned multiprocessors = 0;  // only orders CUDA's FASTEST_FIRST enumeration
  int brand = 14;                // NVML_BRAND_NVIDIA
  std::optional<std::string> vbios_version;
  std::optional<std::string> board_part_number;
  std::optional<std::string> inforom_version;

  unsigned long long memory_mib = 0;
  unsigned long long memory_reserved_mib = 0;  // rounded up from memory_reserved_bytes when that is given
  std::optional<unsigned long long> memory_reserved_bytes;  // a real GPU's, which need not be whole MiB
  unsigned long long memory_overhead_mib = 0;  // driver/context memory counted as "used"
  std::optional<unsigned long long> bar1_mib;

  std::optional<double> power_limit_w;
  double power_default_limit_w = 0;
  double power_min_w = 0;
  double power_max_w = 0;
  double idle_power_w = 0;

  std::optional<Clocks> max_clocks;
  Clocks idle_clocks;
  Clocks app_clocks;
  Clocks default_app_clocks;

  std::optional<unsigned> temp_shutdown_c, temp_slowdown_c, temp_gpu_max_c, temp_mem_max_c;
  unsigned idle_temp_c = 30;

  unsigned fans = 0;
  unsigned idle_fan_pct = 0;

  std::optional<unsigned> pcie_max_gen;  // absent: no PCIe link information
  unsigned pcie_max_width = 0;
  unsigned pcie_gen = 0;
  unsigned pcie_width = 0;
  unsigned pcie_gpu_max_gen = 0;

  std::optional<unsigned> numa_node;
  std::vector<unsigned> cpus;

  std::optional<bool> ecc_enabled;
  EccCounts ecc;
  std::optional<RetiredPages> retired_pages;
  std::optional<RemappedRows> remapped_rows;

  bool persistence_mode = true;
  int compute_mode = 0;
  bool display_mode = false;    // a display is attached (nvidia-smi 580: display_attached)
  bool display_active = false;  // a display is initialised on the GPU
  std::optional<bool> mig_mode;          // current; absent: the GPU has no MIG (NOT_SUPPORTED)
  std::optional<bool> mig_mode_pending;  // after the next reset; absent: as current
  std::vector<MigInstance> mig;          // its GPU instances while MIG is on, in the driver's order

  unsigned nvlink_links = 0;  // 0: no NVLink
  unsigned nvlink_version = 0;

  unsigned long long supported_throttle_reasons = 0x1FF;
};

// Values a timeline segment sets; unset values fall back to earlier segments, then the idle state.
struct SegmentValues {
  std::optional<unsigned> util_gpu, util_mem, temp_c, fan_pct, pstate, encoder_util, decoder_util;
  std::optional<double> power_w;
  PartialClocks clocks;
  std::optional<unsigned long long> throttle_reasons;
  std::optional<unsigned> pcie_tx_kbps, pcie_rx_kbps;
  std::optional<double> gpm_sm_util, gpm_sm_occupancy, gpm_tensor_util, gpm_dram_bw_util;
};

struct Segment {
  int line = 0;
  std::vector<unsigned> gpus;  // empty: every GPU
  Window window;
  SegmentValues values;
};

enum class ProcessType { Compute, Graphics };

// What the driver's per-process utilization samples say of a process (docs/simulator.md):
// its values; a garbage sample (values above 100, as some drivers have returned); or nothing
// readable: both per-process functions fail on its GPUs while it runs (NVML cannot fail for one
// PID alone, so every process on those GPUs is then unreadable).
enum class UtilSample { Normal, Garbage, Unreadable };

// A stretch of a process's utilization ([[process.timeline]]): while `window` contains t it
// overrides the process's own keys, key by key; later entries override earlier ones.
struct ProcessUtilSegment {
  int line = 0;
  Window window;
  std::optional<unsigned> sm_util, mem_util;
  std::optional<UtilSample> util_sample;
};

// A process's utilization at one time, after its timeline.
struct ProcessUtil {
  std::optional<unsigned> sm_util, mem_util;  // unset: a share of the GPU's utilization
  UtilSample sample = UtilSample::Normal;
};

struct ProcessSpec {
  int line = 0;
  std::vector<unsigned> gpus;
  std::string name;               // /proc/<pid>/comm
  std::vector<std::string> argv;  // /proc/<pid>/cmdline
  std::string user;               // empty: whoever runs the simulation
  unsigned long long memory_mib = 0;  // on each of its GPUs
  std::optional<unsigned> sm_util, mem_util;
  UtilSample util_sample = UtilSample::Normal;
  std::vector<ProcessUtilSegment> util_timeline;
  ProcessType type = ProcessType::Compute;
  Window window;
  // A process of another PID namespace (another container's): the launcher starts nothing, and
  // the library lists it under this host PID, which no local process can have (> kMaxLinuxPid).
  std::optional<unsigned> host_pid;
  // The MIG device it runs on (an index of gpus[0]'s MIG devices, in nvidia-smi -L's order).
  std::optional<unsigned> mig_device;

  // The utilization its samples report at simulated time t.
  [[nodiscard]] ProcessUtil util_at(double t) const;
};

// The kernel's PID_MAX_LIMIT on 64-bit Linux: /proc/sys/kernel/pid_max can never exceed it, so a
// scenario's host_pid above it names no process of the machine that runs the simulation.
inline constexpr unsigned kMaxLinuxPid = 4'194'304;

// One GPU pair's path in the topology matrix.
struct Link {
  int level = 50;       // NVML_TOPOLOGY_* of the PCIe path
  unsigned nvlinks = 0;  // NV# in nvidia-smi's matrix
};

struct Scenario {
  std::string file;  // where it came from (for messages)
  std::string name;
  std::string description;
  std::string driver_version = "535.261.03";
  std::string nvml_version = "12.535.261.03";
  int cuda_version = 12020;
  // [driver] init_error: what nvmlInit, nvmlInit_v2 and nvmlInitWithFlags answer (an NVML return
  // code, never SUCCESS), as in a container started without GPU access. Such a scenario may have
  // no GPU at all.
  std::optional<int> init_error;
  std::optional<long long> epoch_ns;  // simulated wall clock at time 0 (default: the start)

  std::vector<GpuSpec> gpus;  // index order = PCI bus order
  std::vector<Segment> segments;
  std::vector<ProcessSpec> processes;
  std::vector<FaultRule> faults;
  std::vector<EventSpec> events;         // sorted by time
  std::vector<std::vector<Link>> topology;  // [i][j], i != j
  // NVLinks go through NVSwitch chips (DGX/HGX 8-GPU boards): every pair shows NV<links>, and a
  // link's remote end is a switch, not a GPU.
  bool nvswitch = false;

  // Processes of this scenario that run on `gpu` at some time.
  [[nodiscard]] bool gpu_has_processes(unsigned gpu) const;
};

}  // namespace tarmac::sim
