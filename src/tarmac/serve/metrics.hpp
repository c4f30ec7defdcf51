// /metrics in Prometheus's text format (0.0.4): dcgm-exporter's names, types, units and labels for
// every value tarmac reads, so dashboards built for dcgm-exporter work unchanged, and tarmac's own
// tarmac_* metrics. docs/metrics.md lists them all with their NVML sources.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/host/job_map.hpp"
#include "tarmac/serve/live.hpp"

namespace tarmac::serve {

// An alert that fires now (from the alerts module, through the CLI's wiring).
struct FiringAlert {
  std::string rule;      // "holding"
  std::string severity;  // "warning"
  std::optional<unsigned> gpu;
  std::string summary;
  long long since_ms = 0;
  std::string brief_summary;  // the summary with programs' names for command lines (Commands::ProgramOnly)
};

// A batch the agent's backfill sends on a GPU (docs/backfill.md), through the CLI's wiring: shown on
// the GPU's card and in /api/v1/gpus, which anyone who reaches the port reads: so not whose batch it
// is, its id or its name (another user's batch is "no batch N" on the socket), only what runs.
struct GpuBatch {
  std::string uuid;  // the GPU's
  std::string model;
  std::string server;
  long long answered = 0;
  long long requests = 0;
};

// The agent's reaper (docs/reap.md "As a service"), through the CLI's wiring: serve knows no reap.
struct ReaperMetrics {
  struct Reaped {
    unsigned gpu = 0;
    std::string uuid;
    std::string outcome;  // reap's words: "ended", "killed", "gone", "survived", ...
    long long count = 0;  // since the agent started
  };
  long long passes = 0;   // passes run since the agent started; 0: no tarmac_holding_processes yet
  // By GPU index: processes holding memory at a known 0 % for at least reaper.warn_after in the
  // last pass; a GPU of the live view missing here holds none.
  std::map<unsigned, unsigned> holding;
  std::vector<Reaped> reaped;  // one per (GPU, outcome) seen
};

// The agent's LLM batches (docs/backfill.md), through the CLI's wiring: serve knows no backfill.
struct BackfillMetrics {
  long long done = 0;         // requests answered and written, since the agent started
  long long failed = 0;       // ... written with an error
  long long retried = 0;      // sends tried again
  long long interrupted = 0;  // in flight when their batch was stopped: pending again
  long long prompt_tokens = 0;
  long long completion_tokens = 0;
  long long in_flight = 0;        // now
  long long batches_sending = 0;  // now
  long long yields = 0;           // managed servers preempted for normal jobs
  double yield_seconds = 0;       // ... their durations summed
};

// How much of a process's command line leaves the host (http.expose_command_lines): on a listener
// beyond loopback, by default only the program's name, since arguments often hold tokens and paths.
enum class Commands { Full, ProgramOnly };

// The command a process is shown with: its command line (or, without one, its name), or only
// argv[0]'s base name.
[[nodiscard]] std::string shown_command(const gpu::GpuProcess& p, Commands commands);

// How the sample's series are labelled.
struct SampleLabels {
  std::string hostname;
  // The host label's name on DCGM_FI_* series: "Hostname", as dcgm-exporter's releases spell it,
  // or "hostname", as its newer code does (http.hostname_label).
  std::string hostname_label = "Hostname";
  Commands commands = Commands::Full;
  // The jobs on each GPU from the HPC job mapping directory (slurm.job_map_dir); with the Slurm jobs
  // of its processes, each gets its own DCGM_FI_* series with hpc_job, as dcgm-exporter does.
  host::JobMap jobs;
  // The pods' containers the kubelet allocated each GPU to: each gets its own DCGM_FI_* series
  // with dcgm-exporter's pod, namespace and container labels.
  host::PodMap pods;
  // The kubelet has answered: the GPUs no pod has get those labels empty, as dcgm-exporter writes
  // them, so that a scrape that honors labels (the ServiceMonitor) does not give them the agent
  // pod's own.
  bool pods_listed = false;
};

// What /metrics says beyond the live view: the host, alerts, and the agent's own cost.
struct MetricsExtras {
  std::string hostname;
  std::vector<FiringAlert> alerts;
  double last_scrape_seconds = 0;  // how long the previous /metrics took to render
  long long resident_bytes = 0;
  long long http_requests = 0;
  long long http_rejected = 0;
  long long http_accept_failures = 0;
  long long now_unix_ms = 0;
  std::optional<ReaperMetrics> reaper;  // nullopt: no reaper runs (nothing written)
  std::optional<BackfillMetrics> backfill;  // nullopt: no batches are served (nothing written)
  long long http_tls_failures = 0;
  long long http_auth_failures = 0;
  std::string hostname_label = "Hostname";  // as SampleLabels
  Commands commands = Commands::Full;
  host::JobMap jobs;
  host::PodMap pods;
  bool pods_listed = false;
};

[[nodiscard]] std::string render_metrics(const LiveView& view, const MetricsExtras& extras);

// The two parts of render_metrics: what depends only on the sample and its alerts (rendered once
// per sample and reused by every scrape until the next one), and the agent's own metrics (fresh
// at every scrape).
[[nodiscard]] std::string render_sample_metrics(const LiveView& view, const SampleLabels& labels,
                                                const std::vector<FiringAlert>& alerts);
[[nodiscard]] std::string render_agent_metrics(const LiveView& view, const MetricsExtras& extras);

// The metric names render_metrics can emit, for docs/metrics.md's test and the dashboards' test.
[[nodiscard]] std::vector<std::string> metric_names();

}  // namespace tarmac::serve
