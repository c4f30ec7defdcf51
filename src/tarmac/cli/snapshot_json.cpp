#include "tarmac/cli/snapshot_json.hpp"

#include "tarmac/gpu/clock_events.hpp"

namespace tarmac::cli {

using nlohmann::json;

namespace {

template <typename T>
json opt(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

// What the GPU is: names, PCI identity, architecture, board.
void add_identity(json& j, const gpu::Device& d) {
  const auto& id = d.id;
  j["index"] = id.index;
  j["uuid"] = opt(id.uuid);
  j["name"] = opt(id.name);
  j["serial"] = opt(id.serial);
  j["pci_bus_id"] = opt(id.pci_bus_id);
  j["pci_device_id"] = opt(id.pci_device_id);
  j["pci_subsystem_id"] = opt(id.pci_subsystem_id);
  j["minor_number"] = opt(id.minor_number);
  j["brand"] = opt(id.brand);
  j["architecture"] = opt(id.architecture);
  j["cuda_capability"] = opt(id.cuda_capability);
  j["vbios_version"] = opt(id.vbios_version);
  j["board_part_number"] = opt(id.board_part_number);
  j["gpm_supported"] = opt(id.gpm_supported);
  j["numa_node"] = opt(id.numa_node);
  j["cpu_affinity"] = id.cpu_affinity;
}

// Memory (framebuffer and BAR1) and utilization.
void add_memory_and_utilization(json& j, const gpu::Device& d) {
  const auto& id = d.id;
  const auto& s = d.sample;
  j["mem_total_bytes"] = opt(id.mem_total_bytes);
  j["mem_used_bytes"] = opt(s.mem_used_bytes);
  j["mem_free_bytes"] = opt(s.mem_free_bytes);
  j["mem_reserved_bytes"] = opt(s.mem_reserved_bytes);
  j["bar1_used_bytes"] = opt(s.bar1_used_bytes);
  j["bar1_total_bytes"] = opt(s.bar1_total_bytes);
  j["util_gpu_pct"] = opt(s.util_gpu_pct);
  j["util_mem_pct"] = opt(s.util_mem_pct);
  j["util_encoder_pct"] = opt(s.util_encoder_pct);
  j["util_decoder_pct"] = opt(s.util_decoder_pct);
}

// Temperatures, the fan, power and energy, with their limits.
void add_thermal_and_power(json& j, const gpu::Device& d) {
  const auto& id = d.id;
  const auto& m = d.modes;
  const auto& s = d.sample;
  j["temp_c"] = opt(s.temp_c);
  j["temp_slowdown_c"] = opt(id.temp_slowdown_c);
  j["temp_shutdown_c"] = opt(id.temp_shutdown_c);
  j["temp_gpu_max_c"] = opt(id.temp_gpu_max_c);
  j["temp_mem_max_c"] = opt(id.temp_mem_max_c);
  j["fan_pct"] = opt(s.fan_pct);
  j["power_mw"] = opt(s.power_mw);
  j["power_limit_mw"] = opt(m.power_limit_mw);
  j["enforced_power_limit_mw"] = opt(m.enforced_power_limit_mw);
  j["power_default_limit_mw"] = opt(id.power_default_limit_mw);
  j["power_min_limit_mw"] = opt(id.power_min_limit_mw);
  j["power_max_limit_mw"] = opt(id.power_max_limit_mw);
  j["energy_mj"] = opt(s.energy_mj);
}

// Clocks now, applications clocks and maxima, the performance state and why clocks are slowed.
void add_clocks(json& j, const gpu::Device& d) {
  const auto& id = d.id;
  const auto& s = d.sample;
  j["clock_sm_mhz"] = opt(s.clock_sm_mhz);
  j["clock_mem_mhz"] = opt(s.clock_mem_mhz);
  j["clock_graphics_mhz"] = opt(s.clock_graphics_mhz);
  j["clock_video_mhz"] = opt(s.clock_video_mhz);
  j["clock_sm_app_mhz"] = opt(s.clock_sm_app_mhz);
  j["clock_mem_app_mhz"] = opt(s.clock_mem_app_mhz);
  j["clock_sm_max_mhz"] = opt(id.clock_sm_max_mhz);
  j["clock_mem_max_mhz"] = opt(id.clock_mem_max_mhz);
  j["clock_graphics_max_mhz"] = opt(id.clock_graphics_max_mhz);
  j["clock_video_max_mhz"] = opt(id.clock_video_max_mhz);
  j["pstate"] = opt(s.pstate);
  j["clock_event_reasons"] = opt(s.clock_event_reasons);
  j["clock_event_reason_names"] =
      s.clock_event_reasons ? json(gpu::clock_event_keys(*s.clock_event_reasons)) : json(nullptr);
}

// The PCIe link, and the memory's health: ECC errors, retired pages, remapped rows.
void add_pcie_and_memory_health(json& j, const gpu::Device& d) {
  const auto& id = d.id;
  const auto& m = d.modes;
  const auto& s = d.sample;
  j["pcie_gen"] = opt(s.pcie_gen);
  j["pcie_gen_max"] = opt(id.pcie_gen_max);
  j["pcie_width"] = opt(s.pcie_width);
  j["pcie_width_max"] = opt(id.pcie_width_max);
  j["pcie_replay_count"] = opt(s.pcie_replay_count);
  j["ecc_mode_current"] = opt(m.ecc_mode_current);
  j["ecc_mode_pending"] = opt(m.ecc_mode_pending);
  j["ecc_corrected_volatile"] = opt(s.ecc_corrected_volatile);
  j["ecc_uncorrected_volatile"] = opt(s.ecc_uncorrected_volatile);
  j["ecc_corrected_aggregate"] = opt(s.ecc_corrected_aggregate);
  j["ecc_uncorrected_aggregate"] = opt(s.ecc_uncorrected_aggregate);
  j["retired_pages_sbe"] = opt(s.retired_pages_sbe);
  j["retired_pages_dbe"] = opt(s.retired_pages_dbe);
  j["retired_pages_pending"] = opt(s.retired_pages_pending);
  j["remapped_rows_correctable"] = opt(s.remapped_rows_correctable);
  j["remapped_rows_uncorrectable"] = opt(s.remapped_rows_uncorrectable);
  j["remapped_rows_pending"] = opt(s.remapped_rows_pending);
  j["remapped_rows_failure"] = opt(s.remapped_rows_failure);
}

// Modes: persistence, compute, MIG, display.
void add_modes(json& j, const gpu::Device& d) {
  const auto& m = d.modes;
  j["persistence_mode"] = opt(m.persistence_mode);
  j["compute_mode"] = opt(m.compute_mode);
  j["mig_mode_current"] = opt(m.mig_mode_current);
  j["mig_mode_pending"] = opt(m.mig_mode_pending);
  j["display_mode"] = opt(m.display_mode);
  j["display_active"] = opt(m.display_active);
}

}  // namespace

json to_json(const host::ProcessInfo& h) {
  json j;
  j["visible"] = h.visibility == host::PidVisibility::Visible;
  j["user"] = opt(h.user);
  j["uid"] = opt(h.uid);
  j["name"] = opt(h.name);
  j["command_line"] = opt(h.command_line);
  j["start_time_unix"] = opt(h.start_time_unix);
  j["parent_pid"] = opt(h.parent_pid);
  j["state"] = h.state ? json(std::string(1, *h.state)) : json(nullptr);
  if (h.container) {
    j["container"] = {{"runtime", h.container->runtime}, {"id", h.container->id}, {"pod_uid", opt(h.container->pod_uid)}};
  } else {
    j["container"] = nullptr;
  }
  j["slurm_job_id"] = opt(h.slurm_job_id);
  return j;
}

json to_json(const gpu::GpuProcess& p) {
  json j = to_json(p.host);
  j["pid"] = p.pid;
  j["type"] = gpu::to_string(p.type);
  j["used_mem_bytes"] = opt(p.used_mem_bytes);
  j["sm_util_pct"] = opt(p.sm_util_pct);
  j["mem_util_pct"] = opt(p.mem_util_pct);
  j["mig"] = opt(p.mig);
  j["gpu_instance_id"] = p.mig_instance ? json(p.mig_instance->first) : json(nullptr);
  j["compute_instance_id"] = p.mig_instance ? json(p.mig_instance->second) : json(nullptr);
  return j;
}

json to_json(const gpu::Device& d, gpu::Activity activity, const std::vector<gpu::MigActivity>& mig_classes) {
  json j;
  add_identity(j, d);
  j["activity"] = gpu::to_string(activity);
  j["lost"] = opt(d.lost);
  add_memory_and_utilization(j, d);
  add_thermal_and_power(j, d);
  add_clocks(j, d);
  add_pcie_and_memory_health(j, d);
  add_modes(j, d);
  if (d.slow) {
    j["pcie_tx_kbps"] = opt(d.slow->pcie_tx_kbps);
    j["pcie_rx_kbps"] = opt(d.slow->pcie_rx_kbps);
    j["gpm_sm_active_pct"] = opt(d.slow->gpm_sm_active_pct);
    j["gpm_sm_occupancy_pct"] = opt(d.slow->gpm_sm_occupancy_pct);
    j["gpm_tensor_active_pct"] = opt(d.slow->gpm_tensor_active_pct);
    j["gpm_dram_bw_pct"] = opt(d.slow->gpm_dram_bw_pct);
  }
  j["processes"] = json::array();
  for (const auto& p : d.processes) j["processes"].push_back(to_json(p));
  // MIG devices (docs/mig.md): no utilization field, since MIG mode has none; GPM where measured.
  j["mig"] = json::array();
  for (std::size_t k = 0; k < d.mig.size(); ++k) {
    const gpu::MigDevice& m = d.mig[k];
    json mj = {{"index", m.index},
               {"uuid", opt(m.uuid)},
               {"profile", opt(m.profile)},
               {"gpu_instance_id", opt(m.gpu_instance_id)},
               {"compute_instance_id", opt(m.compute_instance_id)},
               {"slices", opt(m.slices)},
               {"multiprocessors", opt(m.multiprocessors)},
               {"mem_total_bytes", opt(m.mem_total_bytes)},
               {"mem_used_bytes", opt(m.mem_used_bytes)},
               {"mem_free_bytes", opt(m.mem_free_bytes)},
               {"gpm_sm_active_pct", opt(m.gpm_sm_active_pct)},
               {"gpm_dram_bw_pct", opt(m.gpm_dram_bw_pct)},
               {"processes", json::array()}};
    for (const auto& p : d.processes) {
      if (p.mig == k) mj["processes"].push_back(p.pid);
    }
    if (k < mig_classes.size()) {
      mj["activity"] = gpu::to_string(mig_classes[k].activity);
      // "gpm": from its GPU instance's GPM; "processes": from whether processes run on it (MIG
      // mode gives no utilization; an empty slice is idle, one in use counts as busy).
      mj["activity_source"] = m.gpm_sm_active_pct ? "gpm" : "processes";
    } else {
      mj["activity"] = nullptr;
      mj["activity_source"] = nullptr;
    }
    j["mig"].push_back(std::move(mj));
  }
  j["errors"] = json::array();
  for (const auto& e : d.errors) j["errors"].push_back({{"value", e.what}, {"message", e.message}});
  return j;
}

json to_json(const gpu::Topology& t) {
  json links = json::array();
  for (std::size_t i = 0; i < t.links.size(); ++i) {
    json row = json::array();
    for (std::size_t j = 0; j < t.links[i].size(); ++j) {
      row.push_back(t.links[i][j] == gpu::Link::NvLink ? "NV" + std::to_string(t.nvlink_count[i][j])
                                                       : std::string(gpu::to_string(t.links[i][j])));
    }
    links.push_back(row);
  }
  return {{"links", links}, {"nvlink_count", t.nvlink_count}};
}

}  // namespace tarmac::cli
