#include "tarmac/serve/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>

#include "tarmac/gpu/clock_events.hpp"
#include "tarmac/host/process_info.hpp"
#include "tarmac/serve/metrics_families.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::serve {

namespace {

using detail::dcgm_fields;
using detail::Family;
using detail::own_families;
using detail::own_family;
using detail::Type;

constexpr std::size_t kMaxCommandLabel = 128;  // command lines can be huge; labels should not be

void put_number(std::string& out, double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    fmt::format_to(std::back_inserter(out), "{}", static_cast<long long>(v));
  } else {
    fmt::format_to(std::back_inserter(out), "{}", v);
  }
}

class Writer {
 public:
  void begin(const Family& f) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name,
                   f.type == Type::Gauge ? "gauge" : "counter");
  }
  void sample(const char* name, std::string_view labels, double value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    out_ += ' ';
    put_number(out_, value);
    out_ += '\n';
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Every label value goes through here, whoever chose it: valid UTF-8, cut at a character.
std::string label(std::string_view name, std::string_view value, std::size_t max_bytes = std::string_view::npos) {
  return fmt::format("{}=\"{}\"", name, util::prometheus_label_value(value, max_bytes));
}

// tarmac's own labels for one GPU: snake_case, as Prometheus's conventions (and promtool) want;
// `gpu` is common to both sets, so `on(instance, gpu)` joins them.
std::string own_labels(const gpu::Device& d, const std::string& hostname) {
  return fmt::format("{},{},{},{}", label("gpu", std::to_string(d.id.index)), label("uuid", d.id.uuid.value_or("")),
                     label("pci_bus_id", d.id.pci_bus_id.value_or("")), label("hostname", hostname));
}

// dcgm-exporter's labels for one GPU (its camelCase names, which its dashboards select on).
std::string gpu_labels(const gpu::Device& d, const SampleLabels& host, const std::string& driver) {
  const auto& id = d.id;
  std::string device = id.minor_number ? fmt::format("nvidia{}", *id.minor_number) : fmt::format("nvidia{}", id.index);
  std::string out = fmt::format("{},{},{},{},{},{}", label("gpu", std::to_string(id.index)),
                                label("UUID", id.uuid.value_or("")), label("pci_bus_id", id.pci_bus_id.value_or("")),
                                label("device", device), label("modelName", id.name.value_or("")),
                                label(host.hostname_label, host.hostname));
  if (!driver.empty()) out += "," + label("DCGM_FI_DRIVER_VERSION", driver);
  return out;
}

std::vector<host::PodRef> pods_of(const gpu::Device& d, const host::PodMap& map) {
  const auto it = map.find(d.id.index);
  return it == map.end() ? std::vector<host::PodRef>{} : it->second;
}

// The pod a process on a GPU belongs to: the one pod the kubelet allocated the GPU to, when the
// process runs in a Kubernetes pod's cgroup and every process of a pod on the GPU is of that one
// pod (UID). Not known when pods share the GPU (the kubelet names pods, a cgroup only a pod's
// UID), when processes of two pods use it (a privileged pod that sees every GPU), or for the
// host's processes.
const host::PodRef* pod_of(const gpu::GpuProcess& p, const gpu::Device& d, const std::vector<host::PodRef>& gpu_pods) {
  if (!p.host.container || !p.host.container->pod_uid || gpu_pods.empty()) return nullptr;
  for (const auto& other : gpu_pods) {
    if (other.name != gpu_pods.front().name || other.namespace_ != gpu_pods.front().namespace_) return nullptr;
  }
  for (const auto& other : d.processes) {
    if (other.host.container && other.host.container->pod_uid && *other.host.container->pod_uid != *p.host.container->pod_uid) {
      return nullptr;
    }
  }
  return &gpu_pods.front();
}

std::string process_labels(const std::string& base, const gpu::GpuProcess& p, const gpu::Device& d, Commands commands,
                           const std::vector<host::PodRef>& gpu_pods) {
  const std::string command = shown_command(p, commands);
  std::string container;
  if (p.host.container) {
    container = p.host.container->id.empty() ? p.host.container->runtime
                                             : p.host.container->runtime + ":" + p.host.container->id.substr(0, 12);
  }
  const host::PodRef* pod = pod_of(p, d, gpu_pods);
  return fmt::format("{},{},{},{},{},{},{},{}", base, label("pid", std::to_string(p.pid)),
                     label("user", p.host.user.value_or("")), label("command", command, kMaxCommandLabel),
                     label("container", container), label("slurm_job", p.host.slurm_job_id.value_or("")),
                     label("pod", pod ? pod->name : ""), label("namespace", pod ? pod->namespace_ : ""));
}

std::optional<gpu::Activity> class_of(const LiveView& view, const gpu::Device& d) {
  auto it = view.classes.find(d.id.index);
  return it == view.classes.end() ? std::optional<gpu::Activity>() : std::optional<gpu::Activity>(it->second);
}

// The jobs that use a GPU: the mapping's, written by root's prolog, as dcgm-exporter reads it. Not
// the processes' own claims (an environment variable, a cgroup a user can name): those are
// tarmac_process_info's slurm_job.
std::vector<std::string> jobs_of(const gpu::Device& d, const host::JobMap& map) {
  const auto it = map.find(d.id.index);
  return it == map.end() ? std::vector<std::string>{} : it->second;
}

std::string pod_labels(const host::PodRef& pod) {
  return fmt::format("{},{},{}", label("pod", pod.name), label("namespace", pod.namespace_),
                     label("container", pod.container));
}

// A GPU's label sets on DCGM_FI_* series: one per Slurm job and pod container that use it (both,
// on the odd GPU that has both), or the GPU's own labels alone (with empty pod labels once the
// kubelet has answered: SampleLabels::pods_listed).
std::vector<std::string> attributed_sets(const std::string& base, const std::vector<std::string>& jobs,
                                         const std::vector<host::PodRef>& pods, bool pods_listed) {
  std::vector<std::string> with_jobs;
  for (const auto& job : jobs) with_jobs.push_back(base + "," + label("hpc_job", job));
  if (with_jobs.empty()) with_jobs.push_back(base);
  if (pods.empty()) {
    if (pods_listed) {
      for (auto& set : with_jobs) set += "," + pod_labels({});
    }
    return with_jobs;
  }
  std::vector<std::string> sets;
  for (const auto& set : with_jobs) {
    for (const auto& pod : pods) sets.push_back(set + "," + pod_labels(pod));
  }
  return sets;
}

// The families a MIG device has of its own, as dcgm-exporter exports them per GPU instance (with
// GPU_I_PROFILE and GPU_I_ID): its memory and its GPM. A GPU in MIG mode has them only per MIG
// device, so that a sum over a GPU's series is the board's (no series counts twice).
bool per_mig_device(std::string_view family) {
  return family == "DCGM_FI_DEV_FB_FREE" || family == "DCGM_FI_DEV_FB_USED" || family.starts_with("DCGM_FI_PROF_SM_") ||
         family == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" || family == "DCGM_FI_PROF_DRAM_ACTIVE";
}

// A MIG device as the fields read a GPU: its memory, and its GPM as the slow sample.
gpu::Device mig_as_device(const gpu::MigDevice& m) {
  gpu::Device v;
  v.sample.mem_used_bytes = m.mem_used_bytes;
  v.sample.mem_free_bytes = m.mem_free_bytes;
  v.slow = gpu::DeviceSlowSample{};
  v.slow->gpm_sm_active_pct = m.gpm_sm_active_pct;
  v.slow->gpm_sm_occupancy_pct = m.gpm_sm_occupancy_pct;
  v.slow->gpm_tensor_active_pct = m.gpm_tensor_active_pct;
  v.slow->gpm_dram_bw_pct = m.gpm_dram_bw_pct;
  return v;
}

std::string mig_labels(const gpu::MigDevice& m) {
  return fmt::format("{},{}", label("GPU_I_PROFILE", m.profile.value_or("")),
                     label("GPU_I_ID", m.gpu_instance_id ? std::to_string(*m.gpu_instance_id) : std::string()));
}

// dcgm-exporter's families, each with the GPUs that have its value (`dcgm`: each GPU's label sets,
// one per job and pod on it, or one without either), and each MIG device of a GPU in MIG mode.
void write_dcgm_fields(Writer& w, const std::vector<gpu::Device>& devices,
                       const std::vector<std::vector<std::string>>& dcgm) {
  for (const auto& field : dcgm_fields()) {
    bool begun = false;
    const auto emit = [&](const std::vector<std::string>& sets, const std::string& extra, double v) {
      if (!begun) w.begin(field.family);
      begun = true;
      for (const auto& labels : sets) w.sample(field.family.name, extra.empty() ? labels : labels + "," + extra, v);
    };
    const bool sliced = per_mig_device(field.family.name);
    for (std::size_t i = 0; i < devices.size(); ++i) {
      const gpu::Device& d = devices[i];
      if (d.lost) continue;
      if (sliced && !d.mig.empty()) {
        for (const gpu::MigDevice& m : d.mig) {
          if (!m.gpu_instance_id) continue;  // two such would be one series twice
          if (const auto v = field.read(mig_as_device(m))) emit(dcgm[i], mig_labels(m), *v);
        }
        continue;
      }
      if (const auto v = field.read(d)) emit(dcgm[i], "", *v);
    }
  }
}

// tarmac's per-MIG-device families: the class of each (docs/mig.md) and its compute slices, the
// share of its board that the grounded-fleet numbers charge it.
void write_mig_families(Writer& w, const LiveView& view, const std::vector<std::string>& labels) {
  const auto& devices = view.snapshot.devices;
  w.begin(own_family("tarmac_mig_activity"));
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto it = view.mig_classes.find(devices[i].id.index);
    if (it == view.mig_classes.end()) continue;
    for (std::size_t k = 0; k < devices[i].mig.size() && k < it->second.size(); ++k) {
      const gpu::MigDevice& m = devices[i].mig[k];
      if (!m.gpu_instance_id) continue;
      const std::string base = labels[i] + "," + mig_labels(m) + "," + label("mig_uuid", m.uuid.value_or("")) + "," +
                               label("source", m.gpm_sm_active_pct ? "gpm" : "processes");
      for (auto a : gpu::kActivities) {
        w.sample("tarmac_mig_activity", base + "," + label("class", gpu::to_string(a)), a == it->second[k].activity ? 1 : 0);
      }
    }
  }
  w.begin(own_family("tarmac_mig_slices"));
  for (std::size_t i = 0; i < devices.size(); ++i) {
    for (const gpu::MigDevice& m : devices[i].mig) {
      if (!m.slices || !m.gpu_instance_id) continue;
      w.sample("tarmac_mig_slices", labels[i] + "," + mig_labels(m) + "," + label("mig_uuid", m.uuid.value_or("")),
               *m.slices);
    }
  }
}

// tarmac's per-GPU families: the class, time per class, idle time, lost, heat, processes.
void write_gpu_families(Writer& w, const LiveView& view, const std::vector<std::string>& labels) {
  const auto& devices = view.snapshot.devices;
  const auto begin = [&w](const char* name) { w.begin(own_family(name)); };
  begin("tarmac_gpu_activity");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto cls = class_of(view, devices[i]);
    if (!cls) continue;
    for (auto a : gpu::kActivities) {
      w.sample("tarmac_gpu_activity", labels[i] + "," + label("class", gpu::to_string(a)), a == *cls ? 1 : 0);
    }
  }
  begin("tarmac_gpu_activity_seconds_total");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto it = view.counters.find(devices[i].id.index);
    if (it == view.counters.end()) continue;
    for (auto a : gpu::kActivities) {
      w.sample("tarmac_gpu_activity_seconds_total", labels[i] + "," + label("class", gpu::to_string(a)),
               it->second.class_seconds[activity_slot(a)]);
    }
  }
  begin("tarmac_gpu_idle_seconds");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto it = view.counters.find(devices[i].id.index);
    const bool idle = it != view.counters.end() && it->second.idle_since_ms;
    w.sample("tarmac_gpu_idle_seconds", labels[i],
             idle ? static_cast<double>(view.ts_ms - *it->second.idle_since_ms) / 1000.0 : 0.0);
  }
  begin("tarmac_gpu_lost");
  for (std::size_t i = 0; i < devices.size(); ++i) w.sample("tarmac_gpu_lost", labels[i], devices[i].lost ? 1 : 0);
  begin("tarmac_gpu_clock_events_thermal");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto& reasons = devices[i].sample.clock_event_reasons;
    if (!reasons || devices[i].lost) continue;
    w.sample("tarmac_gpu_clock_events_thermal", labels[i], gpu::thermal_clock_events(*reasons) != 0 ? 1 : 0);
  }
  begin("tarmac_gpu_processes");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    w.sample("tarmac_gpu_processes", labels[i], static_cast<double>(devices[i].processes.size()));
  }
  begin("tarmac_gpu_holding_processes");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const bool holding = class_of(view, devices[i]) == gpu::Activity::Holding;
    w.sample("tarmac_gpu_holding_processes", labels[i],
             holding ? static_cast<double>(devices[i].processes.size()) : 0.0);
  }
}

// One process on one GPU: its labels, and whether that GPU is holding.
struct ProcessRow {
  std::string labels;
  const gpu::GpuProcess* process;
  bool on_holding;
};

// tarmac's per-process families.
void write_process_families(Writer& w, const LiveView& view, const std::vector<std::string>& labels,
                            Commands commands, const host::PodMap& pods) {
  const auto& devices = view.snapshot.devices;
  std::vector<ProcessRow> procs;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto gpu_pods = pods_of(devices[i], pods);
    for (const auto& p : devices[i].processes) {
      procs.push_back({process_labels(labels[i], p, devices[i], commands, gpu_pods), &p,
                       class_of(view, devices[i]) == gpu::Activity::Holding});
    }
  }
  const auto begin = [&w](const char* name) { w.begin(own_family(name)); };
  begin("tarmac_process_info");
  for (const auto& r : procs) w.sample("tarmac_process_info", r.labels, 1);
  begin("tarmac_process_memory_used_bytes");
  for (const auto& r : procs) {
    if (r.process->used_mem_bytes) {
      w.sample("tarmac_process_memory_used_bytes", r.labels, static_cast<double>(*r.process->used_mem_bytes));
    }
  }
  begin("tarmac_process_sm_util_percent");
  for (const auto& r : procs) {
    if (r.process->sm_util_pct) w.sample("tarmac_process_sm_util_percent", r.labels, *r.process->sm_util_pct);
  }
  begin("tarmac_process_holding");
  for (const auto& r : procs) {
    if (!r.on_holding) continue;
    w.sample("tarmac_process_holding", r.labels, static_cast<double>(r.process->used_mem_bytes.value_or(0)));
  }
}

void write_alerts(Writer& w, const std::vector<FiringAlert>& alerts, const std::string& hostname) {
  w.begin(own_family("tarmac_alert_firing"));
  for (const auto& a : alerts) {
    std::string l = label("alertname", a.rule) + "," + label("severity", a.severity) + "," +
                    label("gpu", a.gpu ? std::to_string(*a.gpu) : std::string()) + "," +
                    label("hostname", hostname);
    w.sample("tarmac_alert_firing", l, 1);
  }
}

void write_reaper(Writer& w, const LiveView& view, const ReaperMetrics& reaper, const std::string& hostname) {
  w.begin(own_family("tarmac_reaper_passes_total"));
  w.sample("tarmac_reaper_passes_total", "", static_cast<double>(reaper.passes));
  w.begin(own_family("tarmac_holding_processes"));
  for (const auto& d : reaper.passes > 0 ? view.snapshot.devices : std::vector<gpu::Device>{}) {
    const auto held = reaper.holding.find(d.id.index);
    w.sample("tarmac_holding_processes",
             label("gpu", std::to_string(d.id.index)) + "," + label("uuid", d.id.uuid.value_or("")) + "," +
                 label("hostname", hostname),
             held == reaper.holding.end() ? 0 : held->second);
  }
  w.begin(own_family("tarmac_reaped_processes_total"));
  for (const auto& r : reaper.reaped) {
    w.sample("tarmac_reaped_processes_total",
             label("gpu", std::to_string(r.gpu)) + "," + label("uuid", r.uuid) + "," + label("outcome", r.outcome) +
                 "," + label("hostname", hostname),
             static_cast<double>(r.count));
  }
}

void write_backfill(Writer& w, const BackfillMetrics& b, const std::string& hostname) {
  const std::string host = label("hostname", hostname);
  w.begin(own_family("tarmac_backfill_requests_total"));
  for (const auto& [state, n] : {std::pair{"done", b.done}, std::pair{"failed", b.failed},
                                 std::pair{"retried", b.retried}, std::pair{"interrupted", b.interrupted}}) {
    w.sample("tarmac_backfill_requests_total", label("state", state) + "," + host, static_cast<double>(n));
  }
  w.begin(own_family("tarmac_backfill_tokens_total"));
  w.sample("tarmac_backfill_tokens_total", label("kind", "prompt") + "," + host, static_cast<double>(b.prompt_tokens));
  w.sample("tarmac_backfill_tokens_total", label("kind", "completion") + "," + host,
           static_cast<double>(b.completion_tokens));
  w.begin(own_family("tarmac_backfill_requests_in_flight"));
  w.sample("tarmac_backfill_requests_in_flight", host, static_cast<double>(b.in_flight));
  w.begin(own_family("tarmac_backfill_batches_sending"));
  w.sample("tarmac_backfill_batches_sending", host, static_cast<double>(b.batches_sending));
  w.begin(own_family("tarmac_backfill_yields_total"));
  w.sample("tarmac_backfill_yields_total", host, static_cast<double>(b.yields));
  w.begin(own_family("tarmac_backfill_yield_seconds_total"));
  w.sample("tarmac_backfill_yield_seconds_total", host, b.yield_seconds);
}

}  // namespace

std::vector<std::string> metric_names() {
  std::vector<std::string> out;
  for (const auto& f : dcgm_fields()) out.emplace_back(f.family.name);
  for (const auto& f : own_families()) out.emplace_back(f.name);
  return out;
}

std::string shown_command(const gpu::GpuProcess& p, Commands commands) {
  if (!p.host.command_line || p.host.command_line->empty()) return p.host.name.value_or("");
  return commands == Commands::Full ? *p.host.command_line : host::program_name(p.host.command_line);
}

std::string render_sample_metrics(const LiveView& view, const SampleLabels& sample,
                                  const std::vector<FiringAlert>& alerts) {
  const std::string& hostname = sample.hostname;
  const auto& devices = view.snapshot.devices;
  const std::string driver = view.snapshot.driver_version.value_or("");
  std::vector<std::vector<std::string>> dcgm;
  std::vector<std::string> labels;
  std::vector<std::vector<std::string>> jobs;
  std::vector<std::vector<host::PodRef>> pods;
  dcgm.reserve(devices.size());
  labels.reserve(devices.size());
  for (const auto& d : devices) {
    jobs.push_back(jobs_of(d, sample.jobs));
    pods.push_back(pods_of(d, sample.pods));
    dcgm.push_back(attributed_sets(gpu_labels(d, sample, driver), jobs.back(), pods.back(), sample.pods_listed));
    labels.push_back(own_labels(d, hostname));
  }
  Writer w;
  write_dcgm_fields(w, devices, dcgm);
  w.begin(own_family("tarmac_gpu_job_info"));
  for (std::size_t i = 0; i < devices.size(); ++i) {
    for (const auto& job : jobs[i]) w.sample("tarmac_gpu_job_info", labels[i] + "," + label("slurm_job", job), 1);
  }
  w.begin(own_family("tarmac_gpu_pod_info"));
  for (std::size_t i = 0; i < devices.size(); ++i) {
    for (const auto& pod : pods[i]) w.sample("tarmac_gpu_pod_info", labels[i] + "," + pod_labels(pod), 1);
  }
  write_gpu_families(w, view, labels);
  write_mig_families(w, view, labels);
  write_process_families(w, view, labels, sample.commands, sample.pods);
  write_alerts(w, alerts, hostname);
  return w.take();
}

std::string render_agent_metrics(const LiveView& view, const MetricsExtras& extras) {
  Writer w;
  const auto begin = [&w](const char* name) { w.begin(own_family(name)); };
  const auto& s = view.stats;
  begin("tarmac_agent_start_time_seconds");
  w.sample("tarmac_agent_start_time_seconds", "", static_cast<double>(s.start_unix_ms) / 1000.0);
  begin("tarmac_agent_samples_total");
  w.sample("tarmac_agent_samples_total", "", static_cast<double>(s.gpu_samples));
  begin("tarmac_agent_nvml_errors_total");
  w.sample("tarmac_agent_nvml_errors_total", "", static_cast<double>(s.nvml_errors));
  begin("tarmac_agent_sample_duration_seconds");
  w.sample("tarmac_agent_sample_duration_seconds", "", s.last_sample_seconds);
  begin("tarmac_agent_sample_lag_seconds");
  w.sample("tarmac_agent_sample_lag_seconds", "",
           std::max(0.0, static_cast<double>(extras.now_unix_ms - view.published_unix_ms) / 1000.0));
  begin("tarmac_agent_scrape_duration_seconds");
  w.sample("tarmac_agent_scrape_duration_seconds", "", extras.last_scrape_seconds);
  begin("tarmac_agent_resident_memory_bytes");
  w.sample("tarmac_agent_resident_memory_bytes", "", static_cast<double>(extras.resident_bytes));
  begin("tarmac_agent_http_requests_total");
  w.sample("tarmac_agent_http_requests_total", "", static_cast<double>(extras.http_requests));
  begin("tarmac_agent_http_rejected_total");
  w.sample("tarmac_agent_http_rejected_total", "", static_cast<double>(extras.http_rejected));
  begin("tarmac_agent_http_accept_failures_total");
  w.sample("tarmac_agent_http_accept_failures_total", "", static_cast<double>(extras.http_accept_failures));
  begin("tarmac_agent_http_tls_failures_total");
  w.sample("tarmac_agent_http_tls_failures_total", "", static_cast<double>(extras.http_tls_failures));
  begin("tarmac_agent_http_auth_failures_total");
  w.sample("tarmac_agent_http_auth_failures_total", "", static_cast<double>(extras.http_auth_failures));
  if (extras.reaper) write_reaper(w, view, *extras.reaper, extras.hostname);
  if (extras.backfill) write_backfill(w, *extras.backfill, extras.hostname);
  return w.take();
}

std::string render_metrics(const LiveView& view, const MetricsExtras& extras) {
  return render_sample_metrics(view, {extras.hostname, extras.hostname_label, extras.commands, extras.jobs, extras.pods,
                                      extras.pods_listed},
                               extras.alerts) +
         render_agent_metrics(view, extras);
}

}  // namespace tarmac::serve
