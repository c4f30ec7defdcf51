#include "tarmac/diagnose/doctor.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <regex>

#include "tarmac/diagnose/doctor_context.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::diagnose {

namespace detail {

std::vector<unsigned> JobView::gpus() const {
  std::vector<unsigned> out;
  for (const auto& entry : pids_by_gpu) out.push_back(entry.first);
  return out;
}

namespace {

// Processes of one job share a parent and a command line, except for the rank torchrun's older
// launchers and DeepSpeed's pass as an argument.
std::string without_rank_argument(const std::string& command_line) {
  static const std::regex rank(R"(--local[-_]rank[= ]\d+)");
  return std::regex_replace(command_line, rank, "");
}

std::string group_key(const gpu::GpuProcess& p) {
  const auto& h = p.host;
  if (h.slurm_job_id) return "Slurm job " + *h.slurm_job_id;
  if (h.container && h.container->pod_uid) return "pod " + h.container->pod_uid->substr(0, 8);
  if (h.container && !h.container->id.empty()) {
    return fmt::format("{} container {}", h.container->runtime, h.container->id.substr(0, 12));
  }
  if (h.visibility == host::PidVisibility::Visible && h.parent_pid && *h.parent_pid > 1) {
    return fmt::format("{}'s `{}` processes under PID {}", h.user.value_or("?"),
                       without_rank_argument(h.command_line.value_or(h.name.value_or("?"))), *h.parent_pid);
  }
  return fmt::format("PID {}", p.pid);
}

template <typename T>
std::optional<double> median_of(std::vector<T> values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? static_cast<double>(values[n / 2])
                    : (static_cast<double>(values[n / 2 - 1]) + static_cast<double>(values[n / 2])) / 2.0;
}

}  // namespace

Context::Context(const DoctorInput& input) : in(input) {
  for (const auto& s : in.samples) {
    auto& m = by_index_.emplace_back();
    for (const auto& d : s.devices) m[d.id.index] = &d;
  }
  if (!in.samples.empty()) {
    for (const auto& d : in.samples.back().devices) indices.push_back(d.id.index);
  }
  std::sort(indices.begin(), indices.end());
  const std::size_t n = samples();
  need = n <= 1 ? 1
                : std::max<std::size_t>(2, static_cast<std::size_t>(std::ceil(
                                               static_cast<double>(n) * in.thresholds.sustain_pct / 100.0)));
  need = std::min(need, std::max<std::size_t>(n, 1));

  // Group the processes into jobs.
  std::map<std::string, JobView> groups;
  if (in.job) {
    scoped = true;
    JobView& job = groups["scope"];
    job.label = fmt::format("PID {} and its {} descendant{}", in.job->root_pid, in.job->pids.size() - 1,
                            in.job->pids.size() == 2 ? "" : "s");
    job.pids.insert(in.job->pids.begin(), in.job->pids.end());
  }
  std::map<std::string, std::map<unsigned, std::vector<std::uint64_t>>> mem;  // key -> gpu -> per sample
  for (const auto& s : in.samples) {
    for (const auto& d : s.devices) {
      std::map<std::string, std::uint64_t> per_key;
      for (const auto& p : d.processes) {
        std::string key;
        if (scoped) {
          if (!groups["scope"].pids.contains(p.pid)) continue;
          key = "scope";
        } else {
          key = group_key(p);
          groups[key].label = key;
          groups[key].pids.insert(p.pid);
        }
        groups[key].pids_by_gpu[d.id.index].insert(p.pid);
        per_key[key] += p.used_mem_bytes.value_or(0);
      }
      for (const auto& [key, bytes] : per_key) mem[key][d.id.index].push_back(bytes);
    }
  }
  for (auto& [key, job] : groups) {
    for (auto& [gpu, values] : mem[key]) {
      job.mem_median_by_gpu[gpu] = static_cast<std::uint64_t>(median_of(values).value_or(0));
    }
    if (scoped || job.pids.size() > 1 || job.pids_by_gpu.size() > 1) jobs.push_back(std::move(job));
  }
}

const gpu::Device* Context::device(std::size_t sample, unsigned index) const {
  if (sample >= by_index_.size()) return nullptr;
  auto it = by_index_[sample].find(index);
  return it == by_index_[sample].end() ? nullptr : it->second;
}

bool Context::sustained(unsigned index, const std::function<bool(const gpu::Device&)>& pred) const {
  std::size_t run = 0;
  std::size_t best = 0;
  for (std::size_t s = 0; s < samples(); ++s) {
    const auto* d = device(s, index);
    run = d != nullptr && pred(*d) ? run + 1 : 0;
    best = std::max(best, run);
  }
  return best >= need && best > 0;
}

std::optional<double> Context::median(unsigned index,
                                      const std::function<std::optional<double>(const gpu::Device&)>& get) const {
  std::vector<double> values;
  for (std::size_t s = 0; s < samples(); ++s) {
    if (const auto* d = device(s, index)) {
      if (auto v = get(*d)) values.push_back(*v);
    }
  }
  return median_of(values);
}

std::optional<unsigned> Context::max(unsigned index,
                                     const std::function<std::optional<unsigned>(const gpu::Device&)>& get) const {
  std::optional<unsigned> out;
  for (std::size_t s = 0; s < samples(); ++s) {
    if (const auto* d = device(s, index)) {
      if (auto v = get(*d)) out = std::max(out.value_or(0), *v);
    }
  }
  return out;
}

std::vector<const gpu::GpuProcess*> Context::processes(unsigned index) const {
  std::map<unsigned, const gpu::GpuProcess*> seen;
  for (std::size_t s = 0; s < samples(); ++s) {
    if (const auto* d = device(s, index)) {
      for (const auto& p : d->processes) seen[p.pid] = &p;
    }
  }
  std::vector<const gpu::GpuProcess*> out;
  for (const auto& [pid, p] : seen) out.push_back(p);
  return out;
}

bool is_busy(const gpu::Device& d, const DoctorInput& in) {
  return !d.lost && d.sample.util_gpu_pct.value_or(0) >= in.activity.busy_util_pct;
}

bool is_empty(const gpu::Device& d, const DoctorInput& in) {
  return !d.lost && d.processes.empty() && !is_busy(d, in);
}

std::uint64_t process_memory(const gpu::Device& d) {
  std::uint64_t sum = 0;
  for (const auto& p : d.processes) sum += p.used_mem_bytes.value_or(0);
  return sum;
}

std::string gpus_text(const std::vector<unsigned>& gpus) {
  return fmt::format("{} {}", gpus.size() == 1 ? "GPU" : "GPUs", format_index_list(gpus));
}

double pct(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

long long now_s(const Context& c) { return c.in.samples.back().timestamp_unix_ms / 1000; }

void add_process_facts(const Context& c, unsigned index, Finding& f) {
  for (const auto* p : c.processes(index)) {
    f.facts.push_back(fmt::format("GPU {}: {}", index, process_line(*p, now_s(c))));
  }
}

GpuEvidence gpu_evidence(const Context& c, unsigned index) {
  GpuEvidence e{index, {}};
  const auto* d = c.last(index);
  if (d == nullptr) return e;
  if (d->lost) {
    e.values["lost"] = *d->lost;
    return e;
  }
  if (auto u = c.median(index, [](const gpu::Device& x) -> std::optional<double> {
        return x.sample.util_gpu_pct ? std::optional<double>(*x.sample.util_gpu_pct) : std::nullopt;
      })) {
    e.values["util_gpu_pct"] = *u;
  }
  if (auto m = c.median(index, [](const gpu::Device& x) -> std::optional<double> {
        return x.sample.mem_used_bytes ? std::optional<double>(static_cast<double>(*x.sample.mem_used_bytes))
                                       : std::nullopt;
      })) {
    e.values["mem_used_bytes"] = static_cast<long long>(*m);
  }
  if (d->id.mem_total_bytes) e.values["mem_total_bytes"] = static_cast<long long>(*d->id.mem_total_bytes);
  e.values["processes"] = static_cast<long long>(c.processes(index).size());
  return e;
}

std::string process_line(const gpu::GpuProcess& p, long long now_unix_s) {
  const auto& h = p.host;
  std::string line = fmt::format("PID {}", p.pid);
  if (h.visibility != host::PidVisibility::Visible) {
    line += " (not in this PID namespace)";
  } else {
    if (h.user) line += " " + *h.user;
    if (h.start_time_unix) line += ", age " + util::format_age(now_unix_s - *h.start_time_unix);
  }
  if (p.used_mem_bytes) line += ", " + util::format_bytes(*p.used_mem_bytes);
  if (p.sm_util_pct) line += fmt::format(", SM {} %", *p.sm_util_pct);
  if (h.command_line && !h.command_line->empty()) {
    std::string cmd = *h.command_line;
    if (cmd.size() > 100) cmd = cmd.substr(0, 97) + "...";
    line += ": " + cmd;
  }
  return line;
}

}  // namespace detail

const std::vector<std::string>& finding_codes() {
  static const std::vector<std::string> codes = {
      "no-gpus-visible", "mig-parent-gpu", "mig-device-missing", "mig-multi-gpu-job", "visible-devices-restricted",
      "device-order", "single-gpu-active", "idle-gpus",
      "memory-imbalance", "process-count", "starved", "holding", "thermal", "near-oom", "pcie-only-topology",
      "gpu-fault", "nccl-p2p-disabled", "cuda-launch-blocking"};
  return codes;
}

namespace {

std::size_t code_rank(const std::string& code) {
  const auto& codes = finding_codes();
  return static_cast<std::size_t>(std::find(codes.begin(), codes.end(), code) - codes.begin());
}

}  // namespace

Diagnosis diagnose(const DoctorInput& input) {
  Diagnosis out;
  if (input.samples.empty()) return out;
  const detail::Context c(input);
  auto& f = out.findings;
  detail::check_no_gpus(c, f);
  if (!c.indices.empty()) {
    detail::check_visible_devices(c, f);
    detail::check_mig(c, f);
    detail::check_device_order(c, f);
    detail::check_single_gpu_active(c, f);
    detail::check_memory_imbalance(c, f);
    detail::check_process_count(c, f);
    detail::check_starved_and_holding(c, f);
    detail::check_thermal(c, f);
    detail::check_near_oom(c, f);
    detail::check_topology(c, f);
    detail::check_gpu_fault(c, f);
  }
  detail::check_environment(c, f);
  for (auto& finding : f) std::sort(finding.gpus.begin(), finding.gpus.end());
  std::stable_sort(f.begin(), f.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    return code_rank(a.code) < code_rank(b.code);
  });

  const long long now_s = input.samples.back().timestamp_unix_ms / 1000;
  for (unsigned index : c.indices) {
    const auto* d = c.last(index);
    GpuSummary g;
    g.index = index;
    g.name = d->id.name;
    g.lost = d->lost.has_value();
    g.activity = gpu::classify(*d, input.activity, now_s);
    g.util_median_pct = c.median(index, [](const gpu::Device& x) -> std::optional<double> {
      return x.sample.util_gpu_pct ? std::optional<double>(*x.sample.util_gpu_pct) : std::nullopt;
    });
    g.util_max_pct = c.max(index, [](const gpu::Device& x) { return x.sample.util_gpu_pct; });
    g.temp_max_c = c.max(index, [](const gpu::Device& x) { return x.sample.temp_c; });
    if (auto m = c.median(index, [](const gpu::Device& x) -> std::optional<double> {
          return x.sample.mem_used_bytes ? std::optional<double>(static_cast<double>(*x.sample.mem_used_bytes))
                                         : std::nullopt;
        })) {
      g.mem_used_median_bytes = static_cast<std::uint64_t>(*m);
    }
    g.mem_total_bytes = d->id.mem_total_bytes;
    g.processes = static_cast<unsigned>(c.processes(index).size());
    out.gpus.push_back(g);
  }
  if (c.scoped && !c.jobs.empty()) out.job_gpus = c.jobs.front().gpus();
  return out;
}

Finding no_gpus_visible(const std::string& error, const Environment& env) {
  Finding f;
  f.code = "no-gpus-visible";
  f.severity = Severity::Critical;
  // The loader's message may go on with advice on more lines: the fixes below say the same.
  const std::string first_line = error.substr(0, error.find('\n'));
  f.summary = "No GPU can be seen from here: " + first_line;
  f.facts.push_back("NVML: " + first_line);
  if (env.in_container) {
    f.facts.push_back(env.device_nodes.empty() ? "this process runs in a container with no /dev/nvidia* device"
                                               : "this process runs in a container");
  } else if (env.device_nodes.empty()) {
    f.facts.push_back("no /dev/nvidia* device node exists");
  }
  if (env.nvidia_visible_devices) f.facts.push_back("NVIDIA_VISIBLE_DEVICES=" + *env.nvidia_visible_devices);
  f.causes = {"the NVIDIA driver is not installed or not loaded (no libnvidia-ml.so.1, or `nvidia-smi` fails too)",
              "a container started without GPU access",
              "NVIDIA_VISIBLE_DEVICES=void or none in the container's environment",
              "the driver and its user-space library have different versions after an upgrade (reboot pending)"};
  f.fixes = {"on the host, check `nvidia-smi` and `lsmod | grep nvidia`; reboot after a driver upgrade",
             "Docker: `docker run --gpus all ...` (needs the NVIDIA Container Toolkit); Podman: "
             "`--device nvidia.com/gpu=all` (CDI)",
             "Kubernetes: request `nvidia.com/gpu` in the pod's resources limits",
             "Slurm: request GPUs with `--gpus=N` or `--gres=gpu:N`",
             "a library in an unusual place: `tarmac --nvml-lib /path/to/libnvidia-ml.so.1 doctor`"};
  return f;
}

int exit_code_for(const std::vector<Finding>& findings) {
  int code = 0;
  for (const auto& f : findings) {
    if (f.severity == Severity::Critical) return 2;
    if (f.severity == Severity::Warning) code = 1;
  }
  return code;
}

}  // namespace tarmac::diagnose
