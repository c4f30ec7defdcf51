// The vendor-neutral GPU model (PRODUCT.md §3): what tarmac knows about each GPU, its processes
// and the topology. Every measured value is optional, with its unit in its name: "not supported"
// and "could not be read this time" are data, never exceptions. Nothing here sees an NVML type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tarmac/host/process_info.hpp"

namespace tarmac::gpu {

// What the device is: read once per device, when it is first opened.
struct DeviceIdentity {
  unsigned index = 0;  // NVML index = PCI bus order
  std::optional<std::string> uuid;
  std::optional<std::string> name;
  std::optional<std::string> serial;
  std::optional<std::string> pci_bus_id;  // "00000000:07:00.0"
  std::optional<std::uint32_t> pci_device_id;
  std::optional<std::uint32_t> pci_subsystem_id;
  std::optional<unsigned> minor_number;
  std::optional<std::string> brand;
  std::optional<std::string> architecture;  // "Ampere", "Hopper", ...
  std::optional<std::string> cuda_capability;  // "8.0"
  std::optional<std::string> vbios_version;
  std::optional<std::string> board_part_number;
  std::optional<std::uint64_t> mem_total_bytes;
  std::optional<unsigned> power_default_limit_mw;
  std::optional<unsigned> power_min_limit_mw;
  std::optional<unsigned> power_max_limit_mw;
  std::optional<unsigned> temp_slowdown_c;
  std::optional<unsigned> temp_shutdown_c;
  std::optional<unsigned> temp_gpu_max_c;
  std::optional<unsigned> temp_mem_max_c;
  std::optional<unsigned> clock_sm_max_mhz;
  std::optional<unsigned> clock_mem_max_mhz;
  std::optional<unsigned> clock_graphics_max_mhz;
  std::optional<unsigned> clock_video_max_mhz;
  std::optional<unsigned> pcie_gen_max;
  std::optional<unsigned> pcie_width_max;
  std::optional<unsigned> fan_count;
  std::optional<std::uint64_t> supported_clock_event_reasons;
  std::optional<bool> gpm_supported;
  std::optional<int> numa_node;
  std::vector<unsigned> cpu_affinity;  // CPUs close to the GPU; empty when unknown
};

// Settings that rarely change but can (modes, limits): read with every full sample.
struct DeviceModes {
  std::optional<bool> persistence_mode;
  std::optional<std::string> compute_mode;  // "Default", "Exclusive_Process", "Prohibited"
  std::optional<bool> mig_mode_current;
  std::optional<bool> mig_mode_pending;
  std::optional<bool> ecc_mode_current;
  std::optional<bool> ecc_mode_pending;
  std::optional<bool> display_mode;
  std::optional<bool> display_active;
  std::optional<unsigned> power_limit_mw;
  std::optional<unsigned> enforced_power_limit_mw;
};

// What the device is doing now.
struct DeviceSample {
  std::optional<std::uint64_t> mem_used_bytes;
  std::optional<std::uint64_t> mem_free_bytes;
  std::optional<std::uint64_t> mem_reserved_bytes;
  std::optional<std::uint64_t> bar1_used_bytes;
  std::optional<std::uint64_t> bar1_total_bytes;
  std::optional<unsigned> util_gpu_pct;
  std::optional<unsigned> util_mem_pct;
  std::optional<unsigned> util_encoder_pct;
  std::optional<unsigned> util_decoder_pct;
  std::optional<unsigned> temp_c;
  std::optional<unsigned> fan_pct;
  std::optional<unsigned> power_mw;
  std::optional<std::uint64_t> energy_mj;
  std::optional<unsigned> clock_sm_mhz;
  std::optional<unsigned> clock_mem_mhz;
  std::optional<unsigned> clock_graphics_mhz;
  std::optional<unsigned> clock_video_mhz;
  std::optional<unsigned> clock_sm_app_mhz;
  std::optional<unsigned> clock_mem_app_mhz;
  std::optional<unsigned> pstate;  // 0..15
  std::optional<std::uint64_t> clock_event_reasons;  // NVML's bitmask; see clock_events.hpp
  std::optional<unsigned> pcie_gen;
  std::optional<unsigned> pcie_width;
  std::optional<unsigned> pcie_replay_count;
  std::optional<std::uint64_t> ecc_corrected_volatile;
  std::optional<std::uint64_t> ecc_uncorrected_volatile;
  std::optional<std::uint64_t> ecc_corrected_aggregate;
  std::optional<std::uint64_t> ecc_uncorrected_aggregate;
  std::optional<unsigned> retired_pages_sbe;
  std::optional<unsigned> retired_pages_dbe;
  std::optional<bool> retired_pages_pending;
  std::optional<unsigned> remapped_rows_correctable;
  std::optional<unsigned> remapped_rows_uncorrectable;
  std::optional<bool> remapped_rows_pending;
  std::optional<bool> remapped_rows_failure;
};

// Slow values (tens of ms per GPU on real hardware): read on their own cadence, off the fast path.
struct DeviceSlowSample {
  std::optional<unsigned> pcie_tx_kbps;
  std::optional<unsigned> pcie_rx_kbps;
  // GPM (Hopper and later), percentages over the interval between two GPM samples.
  std::optional<double> gpm_sm_active_pct;
  std::optional<double> gpm_sm_occupancy_pct;
  std::optional<double> gpm_tensor_active_pct;
  std::optional<double> gpm_dram_bw_pct;
};

// Mps: listed by the MPS family (an MPS client), whatever other family also lists it.
enum class ProcessType { Compute, Graphics, Mps };

// One process using a GPU, as NVML reports it, with what the host knows about it.
//
// The *_util_pct values (SM, memory, encoder, decoder, JPEG, OFA) are the busiest sample since the
// previous read of the device's per-process samples, and over at least the last 5 s
// (kMinUtilizationWindowUs: a read right after another must not find "no samples" and call a busy
// process idle), so no read waits:
// - a value (0..100): the driver answered for that period; 0 is KNOWN IDLE: the call succeeded, or
//   answered "no samples" (NVML_ERROR_NOT_FOUND), and this process had no sample in the period
//   (the driver keeps samples only of processes that used the GPU);
// - std::nullopt: UNKNOWN: the functions are missing or not supported, the GPU is in MIG mode, the
//   call failed in any other way, the per-process group was not read, this process's sample was
//   garbage (a value above 100), or it had no sample of its own where that proves nothing: the GPU
//   runs MPS (the server may be charged with its clients' work) or the read filled its whole
//   buffer (gpu/process_utilization.hpp). Unknown is never idle: nothing may treat it as 0 (a reaper that
//   did would kill a busy process whose numbers it could not read).
struct GpuProcess {
  unsigned pid = 0;
  ProcessType type = ProcessType::Compute;
  std::optional<std::uint64_t> used_mem_bytes;
  std::optional<unsigned> sm_util_pct;   // SM (3D/compute) utilization; see above
  std::optional<unsigned> mem_util_pct;  // memory (frame buffer) utilization; see above
  std::optional<unsigned> enc_util_pct;  // video encoder (NVENC)
  std::optional<unsigned> dec_util_pct;  // video decoder (NVDEC)
  std::optional<unsigned> jpg_util_pct;  // JPEG decoder: nullopt also where only the older function answers
  std::optional<unsigned> ofa_util_pct;  // optical flow accelerator: likewise
  host::ProcessInfo host;
  // On a GPU in MIG mode: the GPU and compute instance ids NVML lists it in, and the MIG device
  // they name (an index of Device::mig).
  std::optional<std::pair<unsigned, unsigned>> mig_instance;
  std::optional<unsigned> mig;
};

// One MIG device of a GPU in MIG mode (docs/mig.md): a GPU instance and its compute instance, as
// CUDA sees it (CUDA_VISIBLE_DEVICES=MIG-<uuid>). Utilization is never read as a number NVML does
// not give: in MIG mode only GPM (Hopper and later) measures a slice's activity.
struct MigDevice {
  unsigned index = 0;  // under its parent, as nvidia-smi -L numbers it
  std::optional<std::string> uuid;     // "MIG-..."
  std::optional<std::string> profile;  // "1g.18gb", from its name ("NVIDIA H200 MIG 1g.18gb")
  std::optional<unsigned> gpu_instance_id;
  std::optional<unsigned> compute_instance_id;
  std::optional<unsigned> slices;  // compute slices of the board's seven (its share of it)
  std::optional<unsigned> multiprocessors;
  std::optional<std::uint64_t> mem_total_bytes;
  std::optional<std::uint64_t> mem_used_bytes;
  std::optional<std::uint64_t> mem_free_bytes;
  // GPM of its GPU instance over the interval between two slow reads (DeviceSlowSample's meaning).
  std::optional<double> gpm_sm_active_pct;
  std::optional<double> gpm_sm_occupancy_pct;
  std::optional<double> gpm_tensor_active_pct;
  std::optional<double> gpm_dram_bw_pct;
};

// A value that failed with something other than "not supported": shown as an error, kept trying.
struct ReadError {
  std::string what;     // the value, e.g. "power"
  std::string message;  // the NVML message
};

struct Device {
  DeviceIdentity id;
  DeviceModes modes;
  DeviceSample sample;
  std::optional<DeviceSlowSample> slow;  // present when slow fields were asked for
  std::vector<GpuProcess> processes;
  std::vector<MigDevice> mig;  // its MIG devices, when it is in MIG mode and MigMode is read
  // The GPU stopped answering (fallen off the bus): the identity is what was known before.
  std::optional<std::string> lost;
  std::vector<ReadError> errors;
  // XID (critical error) events, where the snapshot watches them (SnapshotOptions::xid_events):
  // those that arrived since the previous snapshot, and the last one seen since watching began.
  std::vector<unsigned> new_xids;
  std::optional<unsigned> last_xid;
};

// How two GPUs are connected, as nvidia-smi topo -m names it.
enum class Link { Self, NvLink, Internal, Pix, Pxb, Phb, Node, Sys, Unknown };

struct Topology {
  // links[i][j] and nvlink_count[i][j] for device indices i, j.
  std::vector<std::vector<Link>> links;
  std::vector<std::vector<unsigned>> nvlink_count;
};

struct Snapshot {
  long long timestamp_unix_ms = 0;
  std::optional<std::string> driver_version;
  std::optional<std::string> nvml_version;
  std::optional<int> cuda_driver_version;  // e.g. 12020
  std::vector<Device> devices;
  std::optional<Topology> topology;  // present when asked for
};

// Human names for the enums above (for tables and JSON).
[[nodiscard]] const char* to_string(ProcessType type);
[[nodiscard]] const char* to_string(Link link);

}  // namespace tarmac::gpu
