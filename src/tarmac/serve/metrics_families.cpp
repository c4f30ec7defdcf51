#include "tarmac/serve/metrics_families.hpp"

#include <cstdlib>

#include "tarmac/util/units.hpp"

namespace tarmac::serve::detail {

namespace {

template <typename T>
std::optional<double> as_double(const std::optional<T>& v, double scale = 1.0) {
  if (!v) return std::nullopt;
  return static_cast<double>(*v) * scale;
}

std::optional<double> slow_ratio(const gpu::Device& d, std::optional<double> gpu::DeviceSlowSample::*member) {
  if (!d.slow || !((*d.slow).*member)) return std::nullopt;
  return *((*d.slow).*member) / 100.0;
}

}  // namespace

const std::vector<DcgmField>& dcgm_fields() {
  using D = gpu::Device;
  static const std::vector<DcgmField> fields = {
      {{"DCGM_FI_DEV_SM_CLOCK", Type::Gauge, "SM clock frequency (in MHz)."},
       [](const D& d) { return as_double(d.sample.clock_sm_mhz); }},
      {{"DCGM_FI_DEV_MEM_CLOCK", Type::Gauge, "Memory clock frequency (in MHz)."},
       [](const D& d) { return as_double(d.sample.clock_mem_mhz); }},
      {{"DCGM_FI_DEV_GPU_TEMP", Type::Gauge, "GPU temperature (in C)."},
       [](const D& d) { return as_double(d.sample.temp_c); }},
      {{"DCGM_FI_DEV_POWER_USAGE", Type::Gauge, "Power draw (in W)."},
       [](const D& d) { return as_double(d.sample.power_mw, 0.001); }},
      {{"DCGM_FI_DEV_POWER_MGMT_LIMIT", Type::Gauge, "Power management limit (in W)."},
       [](const D& d) { return as_double(d.modes.enforced_power_limit_mw, 0.001); }},
      {{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Type::Counter, "Total energy consumption since boot (in mJ)."},
       [](const D& d) { return as_double(d.sample.energy_mj); }},
      {{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", Type::Counter, "Total number of PCIe retries."},
       [](const D& d) { return as_double(d.sample.pcie_replay_count); }},
      {{"DCGM_FI_DEV_GPU_UTIL", Type::Gauge, "GPU utilization (in %)."},
       [](const D& d) { return as_double(d.sample.util_gpu_pct); }},
      {{"DCGM_FI_DEV_MEM_COPY_UTIL", Type::Gauge, "Memory utilization (in %)."},
       [](const D& d) { return as_double(d.sample.util_mem_pct); }},
      {{"DCGM_FI_DEV_ENC_UTIL", Type::Gauge, "Encoder utilization (in %)."},
       [](const D& d) { return as_double(d.sample.util_encoder_pct); }},
      {{"DCGM_FI_DEV_DEC_UTIL", Type::Gauge, "Decoder utilization (in %)."},
       [](const D& d) { return as_double(d.sample.util_decoder_pct); }},
      {{"DCGM_FI_DEV_FAN_SPEED", Type::Gauge, "Fan speed (in 0-100%)."},
       [](const D& d) { return as_double(d.sample.fan_pct); }},
      {{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", Type::Gauge, "Current clock throttle reasons (NVML's bitmask)."},
       [](const D& d) { return as_double(d.sample.clock_event_reasons); }},
      {{"DCGM_FI_DEV_FB_FREE", Type::Gauge, "Framebuffer memory free (in MiB)."},
       [](const D& d) { return as_double(d.sample.mem_free_bytes, 1.0 / util::kMiB); }},
      {{"DCGM_FI_DEV_FB_USED", Type::Gauge, "Framebuffer memory used (in MiB)."},
       [](const D& d) { return as_double(d.sample.mem_used_bytes, 1.0 / util::kMiB); }},
      {{"DCGM_FI_DEV_FB_RESERVED", Type::Gauge, "Framebuffer memory reserved (in MiB)."},
       [](const D& d) { return as_double(d.sample.mem_reserved_bytes, 1.0 / util::kMiB); }},
      {{"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", Type::Counter, "Total number of single-bit volatile ECC errors."},
       [](const D& d) { return as_double(d.sample.ecc_corrected_volatile); }},
      {{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Type::Counter, "Total number of double-bit volatile ECC errors."},
       [](const D& d) { return as_double(d.sample.ecc_uncorrected_volatile); }},
      {{"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", Type::Counter, "Total number of single-bit persistent ECC errors."},
       [](const D& d) { return as_double(d.sample.ecc_corrected_aggregate); }},
      {{"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", Type::Counter, "Total number of double-bit persistent ECC errors."},
       [](const D& d) { return as_double(d.sample.ecc_uncorrected_aggregate); }},
      {{"DCGM_FI_DEV_RETIRED_SBE", Type::Counter, "Total number of retired pages due to single-bit errors."},
       [](const D& d) { return as_double(d.sample.retired_pages_sbe); }},
      {{"DCGM_FI_DEV_RETIRED_DBE", Type::Counter, "Total number of retired pages due to double-bit errors."},
       [](const D& d) { return as_double(d.sample.retired_pages_dbe); }},
      {{"DCGM_FI_DEV_RETIRED_PENDING", Type::Counter, "Total number of pages pending retirement."},
       [](const D& d) {
         return d.sample.retired_pages_pending ? std::optional<double>(*d.sample.retired_pages_pending ? 1 : 0)
                                               : std::nullopt;
       }},
      {{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", Type::Counter,
        "Number of remapped rows for uncorrectable errors."},
       [](const D& d) { return as_double(d.sample.remapped_rows_uncorrectable); }},
      {{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", Type::Counter, "Number of remapped rows for correctable errors."},
       [](const D& d) { return as_double(d.sample.remapped_rows_correctable); }},
      {{"DCGM_FI_DEV_ROW_REMAP_FAILURE", Type::Gauge, "Whether remapping of rows has failed."},
       [](const D& d) {
         return d.sample.remapped_rows_failure ? std::optional<double>(*d.sample.remapped_rows_failure ? 1 : 0)
                                               : std::nullopt;
       }},
      {{"DCGM_FI_DEV_XID_ERRORS", Type::Gauge, "Value of the last XID error encountered."},
       [](const D& d) { return as_double(d.last_xid); }},
      {{"DCGM_FI_PROF_SM_ACTIVE", Type::Gauge,
        "The ratio of cycles an SM has at least 1 warp assigned (in %, from NVML's GPM)."},
       [](const D& d) { return slow_ratio(d, &gpu::DeviceSlowSample::gpm_sm_active_pct); }},
      {{"DCGM_FI_PROF_SM_OCCUPANCY", Type::Gauge,
        "The ratio of number of warps resident on an SM (from NVML's GPM)."},
       [](const D& d) { return slow_ratio(d, &gpu::DeviceSlowSample::gpm_sm_occupancy_pct); }},
      {{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", Type::Gauge,
        "Ratio of cycles the tensor (HMMA) pipe is active (from NVML's GPM)."},
       [](const D& d) { return slow_ratio(d, &gpu::DeviceSlowSample::gpm_tensor_active_pct); }},
      {{"DCGM_FI_PROF_DRAM_ACTIVE", Type::Gauge,
        "Ratio of cycles the device memory interface is active sending or receiving data (from NVML's GPM)."},
       [](const D& d) { return slow_ratio(d, &gpu::DeviceSlowSample::gpm_dram_bw_pct); }},
      {{"DCGM_FI_PROF_PCIE_TX_BYTES", Type::Gauge, "The rate of data transmitted over the PCIe bus (bytes/s)."},
       [](const D& d) { return d.slow ? as_double(d.slow->pcie_tx_kbps, 1024.0) : std::nullopt; }},
      {{"DCGM_FI_PROF_PCIE_RX_BYTES", Type::Gauge, "The rate of data received over the PCIe bus (bytes/s)."},
       [](const D& d) { return d.slow ? as_double(d.slow->pcie_rx_kbps, 1024.0) : std::nullopt; }},
  };
  return fields;
}

const std::vector<Family>& own_families() {
  static const std::vector<Family> families = {
      {"tarmac_gpu_activity", Type::Gauge,
       "1 for the GPU's activity class now (busy, starved, holding, idle, reserved-idle, fault), 0 for the others."},
      {"tarmac_gpu_activity_seconds_total", Type::Counter,
       "Seconds the GPU spent in each activity class since the agent started (agent clock)."},
      {"tarmac_gpu_idle_seconds", Type::Gauge, "Seconds the GPU has been idle (or reserved-idle) without a break."},
      {"tarmac_gpu_lost", Type::Gauge, "1 when the GPU stopped answering (fell off the bus)."},
      {"tarmac_gpu_clock_events_thermal", Type::Gauge, "1 while a thermal slowdown (SW or HW) holds the clocks down."},
      {"tarmac_gpu_processes", Type::Gauge, "Processes using the GPU."},
      {"tarmac_mig_activity", Type::Gauge,
       "1 for the MIG device's activity class now, 0 for the others; source: gpm (measured) or processes (MIG "
       "mode gives no utilization: a MIG device in use counts as busy)."},
      {"tarmac_mig_slices", Type::Gauge, "Compute slices of the MIG device, of its board's seven."},
      {"tarmac_gpu_holding_processes", Type::Gauge, "Processes holding memory at 0 % on a GPU in class holding."},
      {"tarmac_process_info", Type::Gauge, "1 for each process on a GPU, with its user, command, container and job."},
      {"tarmac_process_memory_used_bytes", Type::Gauge, "GPU memory the process uses (bytes)."},
      {"tarmac_process_sm_util_percent", Type::Gauge, "The process's SM utilization (in %), where NVML gives it."},
      {"tarmac_process_holding", Type::Gauge, "Bytes held by a process on a GPU in class holding (memory at 0 %)."},
      {"tarmac_alert_firing", Type::Gauge, "1 for each alert that fires now (docs/alerts.md)."},
      {"tarmac_holding_processes", Type::Gauge,
       "Processes holding memory at a known 0 % for at least reaper.warn_after in the reaper's last pass."},
      {"tarmac_reaper_passes_total", Type::Counter, "Passes (surveys) the agent's reaper has run since it started."},
      {"tarmac_reaped_processes_total", Type::Counter,
       "Holders the agent's reaper acted on since it started, by outcome (docs/reap.md)."},
      {"tarmac_backfill_requests_total", Type::Counter,
       "Backfill requests since the agent started, by state: done, failed (written with an error), retried (sent "
       "again), interrupted (back to pending when their batch stopped)."},
      {"tarmac_backfill_tokens_total", Type::Counter,
       "Tokens of the backfill answers written since the agent started, by kind (prompt, completion)."},
      {"tarmac_backfill_requests_in_flight", Type::Gauge, "Backfill requests being answered by their servers now."},
      {"tarmac_backfill_batches_sending", Type::Gauge, "Backfill batches whose requests are being sent now."},
      {"tarmac_backfill_yields_total", Type::Counter,
       "Managed backfill servers that gave their GPUs back to a normal job since the agent started."},
      {"tarmac_backfill_yield_seconds_total", Type::Counter,
       "Seconds those yields took, from the batches' stop to the server's end, summed."},
      {"tarmac_agent_start_time_seconds", Type::Gauge, "When the agent started (Unix time)."},
      {"tarmac_agent_samples_total", Type::Counter, "GPU-samples taken since the agent started."},
      {"tarmac_agent_nvml_errors_total", Type::Counter, "NVML reads that failed since the agent started."},
      {"tarmac_agent_sample_duration_seconds", Type::Gauge, "Real time the last snapshot of every GPU took."},
      {"tarmac_agent_sample_lag_seconds", Type::Gauge, "Age of the newest sample at this scrape (real time)."},
      {"tarmac_agent_scrape_duration_seconds", Type::Gauge, "Real time the previous /metrics took to render."},
      {"tarmac_agent_resident_memory_bytes", Type::Gauge, "The agent's resident memory (bytes)."},
      {"tarmac_agent_http_requests_total", Type::Counter, "HTTP requests the agent answered."},
      {"tarmac_agent_http_rejected_total", Type::Counter, "HTTP requests answered with 4xx or 5xx (malformed, too big)."},
      {"tarmac_agent_http_accept_failures_total", Type::Counter,
       "Connections the HTTP server could not accept for want of descriptors or memory (each pauses accepting)."},
      {"tarmac_gpu_job_info", Type::Gauge,
       "1 for each Slurm job that uses a GPU (the HPC job mapping directory, and its processes' jobs): join on gpu "
       "for slurm_job."},
      {"tarmac_gpu_pod_info", Type::Gauge,
       "1 for each Kubernetes pod's container the kubelet allocated a GPU to (its pod-resources socket): join on "
       "gpu for pod, namespace and container."},
      {"tarmac_agent_http_tls_failures_total", Type::Counter,
       "TLS handshakes that failed (no or a wrong client certificate, plain HTTP on the TLS port) or timed out."},
      {"tarmac_agent_http_auth_failures_total", Type::Counter,
       "HTTP requests refused with 401: no, a malformed, or a wrong user name and password."},
  };
  return families;
}

const Family& own_family(std::string_view name) {
  for (const auto& f : own_families()) {
    if (name == f.name) return f;
  }
  std::abort();  // a name missing from own_families() is a bug the unit tests catch at once
}

}  // namespace tarmac::serve::detail
