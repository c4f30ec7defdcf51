// The fields of the device model (model.hpp), each named once, as member pointers: what the agent
// sends to a local command (serve/live_wire.hpp) and how an older full read fills what a fast read
// left unread (fill_unread) both come from these lists, so a field added to the model is added here
// once. `f(name, &Struct::member)` for every field that is a value (not a list of records).
#pragma once

#include <optional>
#include <type_traits>

#include "tarmac/gpu/model.hpp"

namespace tarmac::gpu {

// Whether a field's type is std::optional (a value that may be unread), for code over the lists.
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class F>
constexpr void identity_fields(F&& f) {
  f("index", &DeviceIdentity::index);
  f("uuid", &DeviceIdentity::uuid);
  f("name", &DeviceIdentity::name);
  f("serial", &DeviceIdentity::serial);
  f("pci_bus_id", &DeviceIdentity::pci_bus_id);
  f("pci_device_id", &DeviceIdentity::pci_device_id);
  f("pci_subsystem_id", &DeviceIdentity::pci_subsystem_id);
  f("minor_number", &DeviceIdentity::minor_number);
  f("brand", &DeviceIdentity::brand);
  f("architecture", &DeviceIdentity::architecture);
  f("cuda_capability", &DeviceIdentity::cuda_capability);
  f("vbios_version", &DeviceIdentity::vbios_version);
  f("board_part_number", &DeviceIdentity::board_part_number);
  f("mem_total_bytes", &DeviceIdentity::mem_total_bytes);
  f("power_default_limit_mw", &DeviceIdentity::power_default_limit_mw);
  f("power_min_limit_mw", &DeviceIdentity::power_min_limit_mw);
  f("power_max_limit_mw", &DeviceIdentity::power_max_limit_mw);
  f("temp_slowdown_c", &DeviceIdentity::temp_slowdown_c);
  f("temp_shutdown_c", &DeviceIdentity::temp_shutdown_c);
  f("temp_gpu_max_c", &DeviceIdentity::temp_gpu_max_c);
  f("temp_mem_max_c", &DeviceIdentity::temp_mem_max_c);
  f("clock_sm_max_mhz", &DeviceIdentity::clock_sm_max_mhz);
  f("clock_mem_max_mhz", &DeviceIdentity::clock_mem_max_mhz);
  f("clock_graphics_max_mhz", &DeviceIdentity::clock_graphics_max_mhz);
  f("clock_video_max_mhz", &DeviceIdentity::clock_video_max_mhz);
  f("pcie_gen_max", &DeviceIdentity::pcie_gen_max);
  f("pcie_width_max", &DeviceIdentity::pcie_width_max);
  f("fan_count", &DeviceIdentity::fan_count);
  f("supported_clock_event_reasons", &DeviceIdentity::supported_clock_event_reasons);
  f("gpm_supported", &DeviceIdentity::gpm_supported);
  f("numa_node", &DeviceIdentity::numa_node);
  f("cpu_affinity", &DeviceIdentity::cpu_affinity);
}

template <class F>
constexpr void modes_fields(F&& f) {
  f("persistence_mode", &DeviceModes::persistence_mode);
  f("compute_mode", &DeviceModes::compute_mode);
  f("mig_mode_current", &DeviceModes::mig_mode_current);
  f("mig_mode_pending", &DeviceModes::mig_mode_pending);
  f("ecc_mode_current", &DeviceModes::ecc_mode_current);
  f("ecc_mode_pending", &DeviceModes::ecc_mode_pending);
  f("display_mode", &DeviceModes::display_mode);
  f("display_active", &DeviceModes::display_active);
  f("power_limit_mw", &DeviceModes::power_limit_mw);
  f("enforced_power_limit_mw", &DeviceModes::enforced_power_limit_mw);
}

template <class F>
constexpr void sample_fields(F&& f) {
  f("mem_used_bytes", &DeviceSample::mem_used_bytes);
  f("mem_free_bytes", &DeviceSample::mem_free_bytes);
  f("mem_reserved_bytes", &DeviceSample::mem_reserved_bytes);
  f("bar1_used_bytes", &DeviceSample::bar1_used_bytes);
  f("bar1_total_bytes", &DeviceSample::bar1_total_bytes);
  f("util_gpu_pct", &DeviceSample::util_gpu_pct);
  f("util_mem_pct", &DeviceSample::util_mem_pct);
  f("util_encoder_pct", &DeviceSample::util_encoder_pct);
  f("util_decoder_pct", &DeviceSample::util_decoder_pct);
  f("temp_c", &DeviceSample::temp_c);
  f("fan_pct", &DeviceSample::fan_pct);
  f("power_mw", &DeviceSample::power_mw);
  f("energy_mj", &DeviceSample::energy_mj);
  f("clock_sm_mhz", &DeviceSample::clock_sm_mhz);
  f("clock_mem_mhz", &DeviceSample::clock_mem_mhz);
  f("clock_graphics_mhz", &DeviceSample::clock_graphics_mhz);
  f("clock_video_mhz", &DeviceSample::clock_video_mhz);
  f("clock_sm_app_mhz", &DeviceSample::clock_sm_app_mhz);
  f("clock_mem_app_mhz", &DeviceSample::clock_mem_app_mhz);
  f("pstate", &DeviceSample::pstate);
  f("clock_event_reasons", &DeviceSample::clock_event_reasons);
  f("pcie_gen", &DeviceSample::pcie_gen);
  f("pcie_width", &DeviceSample::pcie_width);
  f("pcie_replay_count", &DeviceSample::pcie_replay_count);
  f("ecc_corrected_volatile", &DeviceSample::ecc_corrected_volatile);
  f("ecc_uncorrected_volatile", &DeviceSample::ecc_uncorrected_volatile);
  f("ecc_corrected_aggregate", &DeviceSample::ecc_corrected_aggregate);
  f("ecc_uncorrected_aggregate", &DeviceSample::ecc_uncorrected_aggregate);
  f("retired_pages_sbe", &DeviceSample::retired_pages_sbe);
  f("retired_pages_dbe", &DeviceSample::retired_pages_dbe);
  f("retired_pages_pending", &DeviceSample::retired_pages_pending);
  f("remapped_rows_correctable", &DeviceSample::remapped_rows_correctable);
  f("remapped_rows_uncorrectable", &DeviceSample::remapped_rows_uncorrectable);
  f("remapped_rows_pending", &DeviceSample::remapped_rows_pending);
  f("remapped_rows_failure", &DeviceSample::remapped_rows_failure);
}

template <class F>
constexpr void slow_fields(F&& f) {
  f("pcie_tx_kbps", &DeviceSlowSample::pcie_tx_kbps);
  f("pcie_rx_kbps", &DeviceSlowSample::pcie_rx_kbps);
  f("gpm_sm_active_pct", &DeviceSlowSample::gpm_sm_active_pct);
  f("gpm_sm_occupancy_pct", &DeviceSlowSample::gpm_sm_occupancy_pct);
  f("gpm_tensor_active_pct", &DeviceSlowSample::gpm_tensor_active_pct);
  f("gpm_dram_bw_pct", &DeviceSlowSample::gpm_dram_bw_pct);
}

template <class F>
constexpr void mig_fields(F&& f) {
  f("index", &MigDevice::index);
  f("uuid", &MigDevice::uuid);
  f("profile", &MigDevice::profile);
  f("gpu_instance_id", &MigDevice::gpu_instance_id);
  f("compute_instance_id", &MigDevice::compute_instance_id);
  f("slices", &MigDevice::slices);
  f("multiprocessors", &MigDevice::multiprocessors);
  f("mem_total_bytes", &MigDevice::mem_total_bytes);
  f("mem_used_bytes", &MigDevice::mem_used_bytes);
  f("mem_free_bytes", &MigDevice::mem_free_bytes);
  f("gpm_sm_active_pct", &MigDevice::gpm_sm_active_pct);
  f("gpm_sm_occupancy_pct", &MigDevice::gpm_sm_occupancy_pct);
  f("gpm_tensor_active_pct", &MigDevice::gpm_tensor_active_pct);
  f("gpm_dram_bw_pct", &MigDevice::gpm_dram_bw_pct);
}

// Every value `from` has and `into` lacks, copied (identity, modes, sample; not processes, MIG
// devices or slow values): a fast read completed by the last full one of the same GPU.
void fill_unread(Device& into, const Device& from);

}  // namespace tarmac::gpu
