#include "tarmac/alerts/rules.hpp"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <set>

#include "tarmac/gpu/clock_events.hpp"
#include "tarmac/host/process_info.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::alerts {

namespace {

std::string age(long long ms) { return util::format_age(std::max(0LL, ms) / 1000); }

// "GPU 3 (GPU-5b2e0c55-...)" or "GPU 3".
std::string gpu_label(const gpu::Device& d) {
  if (d.id.uuid) return fmt::format("GPU {} ({})", d.id.index, *d.id.uuid);
  return fmt::format("GPU {}", d.id.index);
}

// The first three words of a command line: enough to recognise it in one line.
std::string first_words(const std::string& command_line) {
  std::vector<std::string> words;
  for (auto& w : util::split(command_line, ' ')) {
    if (!w.empty()) words.push_back(std::move(w));
    if (words.size() == 3) break;
  }
  return fmt::format("{}", fmt::join(words, " "));
}

std::string short_command(const gpu::GpuProcess& p) {
  if (p.host.command_line && !p.host.command_line->empty()) return first_words(*p.host.command_line);
  if (p.host.name) return *p.host.name;
  return "process";
}

// "python -m ipykernel_launcher (bob, pid 1234)".
std::string process_label(const gpu::GpuProcess& p) {
  if (p.host.user) return fmt::format("{} ({}, pid {})", short_command(p), *p.host.user, p.pid);
  return fmt::format("{} (pid {})", short_command(p), p.pid);
}

const gpu::GpuProcess* largest_process(const gpu::Device& d) {
  const gpu::GpuProcess* best = nullptr;
  for (const auto& p : d.processes) {
    if (best == nullptr || p.used_mem_bytes.value_or(0) > best->used_mem_bytes.value_or(0)) best = &p;
  }
  return best;
}

std::uint64_t held_bytes(const gpu::Device& d) {
  std::uint64_t sum = 0;
  for (const auto& p : d.processes) sum += p.used_mem_bytes.value_or(0);
  return sum > 0 ? sum : d.sample.mem_used_bytes.value_or(0);
}

// An alert about one GPU, with its largest process when it has one.
Alert gpu_alert(Rule rule, const gpu::Device& d) {
  Alert a;
  a.rule = rule;
  a.severity = severity_of(rule);
  a.key = fmt::format("gpu:{}", d.id.index);
  a.gpu = d.id.index;
  a.uuid = d.id.uuid.value_or("");
  a.gpus = {d.id.index};
  if (const auto* p = largest_process(d)) {
    a.pid = p->pid;
    a.user = p->host.user.value_or("");
    a.command = p->host.command_line.value_or(p->host.name.value_or(""));
  }
  return a;
}

std::optional<double> used_pct(const gpu::Device& d) {
  if (!d.id.mem_total_bytes || *d.id.mem_total_bytes == 0 || !d.sample.mem_used_bytes) return std::nullopt;
  return 100.0 * static_cast<double>(*d.sample.mem_used_bytes) / static_cast<double>(*d.id.mem_total_bytes);
}

std::optional<gpu::Activity> class_of(const std::map<unsigned, gpu::Activity>& classes, unsigned gpu) {
  const auto it = classes.find(gpu);
  return it == classes.end() ? std::nullopt : std::optional<gpu::Activity>(it->second);
}

// The rules, one function each: a pure function of one GPU's merged sample and its class (the
// imbalance rule: of one job's GPUs), the alert when the rule's condition holds now. How long it
// must hold before it fires is the Evaluator's.

// fault, for a GPU that fell off the bus: nothing else about it can be believed.
Alert lost_alert(const gpu::Device& d) {
  Alert a = gpu_alert(Rule::Fault, d);
  a.summary = fmt::format("{}: lost ({})", gpu_label(d), *d.lost);
  return a;
}

std::optional<Alert> fault_alert(const gpu::Device& d, std::optional<gpu::Activity> cls) {
  if (cls != gpu::Activity::Fault) return std::nullopt;
  Alert a = gpu_alert(Rule::Fault, d);
  a.summary = fmt::format("{}: fault: {}", gpu_label(d), gpu::fault_reason(d).value_or("fault"));
  return a;
}

// Starved by gpu::is_starved, the dashboard's own definition; holding and fault say more.
std::optional<Alert> starvation_alert(const gpu::Device& d, std::optional<gpu::Activity> cls,
                                      const gpu::ActivityThresholds& activity) {
  if (!gpu::is_starved(d, activity) || cls == gpu::Activity::Holding || cls == gpu::Activity::Fault) {
    return std::nullopt;
  }
  Alert a = gpu_alert(Rule::Starvation, d);
  a.summary = fmt::format("{}: {} holds {}, {:.0f} % of memory in use, at {} %", gpu_label(d),
                          process_label(*largest_process(d)), util::format_bytes(held_bytes(d)),
                          used_pct(d).value_or(0), d.sample.util_gpu_pct.value_or(0));
  return a;
}

std::optional<Alert> idle_alert(const gpu::Device& d, std::optional<gpu::Activity> cls) {
  if (cls != gpu::Activity::Idle && cls != gpu::Activity::ReservedIdle) return std::nullopt;
  Alert a = gpu_alert(Rule::Idle, d);
  a.summary = fmt::format("{}: {}", gpu_label(d), gpu::to_string(*cls));
  return a;
}

std::optional<Alert> holding_alert(const gpu::Device& d, std::optional<gpu::Activity> cls) {
  if (cls != gpu::Activity::Holding) return std::nullopt;
  Alert a = gpu_alert(Rule::Holding, d);
  const auto* p = largest_process(d);
  a.summary = fmt::format("{}: {} holds {} at {} %", gpu_label(d), p ? process_label(*p) : std::string("processes"),
                          util::format_bytes(held_bytes(d)), d.sample.util_gpu_pct.value_or(0));
  return a;
}

// At or over thermal_c, or clocks slowed by heat whatever the temperature reads.
std::optional<Alert> thermal_alert(const gpu::Device& d, const AlertConfig& config) {
  const bool thermal_reason =
      d.sample.clock_event_reasons && gpu::thermal_clock_events(*d.sample.clock_event_reasons) != 0;
  if (!(d.sample.temp_c && *d.sample.temp_c >= config.thermal_c) && !thermal_reason) return std::nullopt;
  Alert a = gpu_alert(Rule::Thermal, d);
  if (d.sample.temp_c) {
    a.summary = fmt::format("{}: {} °C (threshold {} °C){}", gpu_label(d), *d.sample.temp_c, config.thermal_c,
                            thermal_reason ? ", clocks slowed by heat" : "");
  } else {
    a.summary = fmt::format("{}: clocks slowed by heat", gpu_label(d));
  }
  return a;
}

std::optional<Alert> near_oom_alert(const gpu::Device& d, const AlertConfig& config) {
  const auto pct = used_pct(d);
  if (!pct || *pct < config.near_oom_pct) return std::nullopt;
  Alert a = gpu_alert(Rule::NearOom, d);
  a.summary = fmt::format("{}: {} of {} memory used ({:.1f} %)", gpu_label(d),
                          util::format_bytes(*d.sample.mem_used_bytes), util::format_bytes(*d.id.mem_total_bytes),
                          *pct);
  if (const auto* p = largest_process(d)) a.summary += fmt::format(", largest {}", process_label(*p));
  return a;
}

// One job's GPUs, for the imbalance rule: each GPU's utilization, and the job's first process.
struct JobGpus {
  std::map<unsigned, unsigned> util_by_gpu;
  const gpu::GpuProcess* process = nullptr;
};

// Adds the GPU to the job of each of its processes (job_key: a Slurm job, a container, ...).
void note_job_gpus(const gpu::Device& d, std::map<std::string, JobGpus>& jobs) {
  const auto util = d.sample.util_gpu_pct;
  if (!util) return;
  for (const auto& p : d.processes) {
    const std::string job = job_key(p.host);
    if (job.empty()) continue;
    JobGpus& j = jobs[job];
    j.util_by_gpu[d.id.index] = *util;
    if (j.process == nullptr) j.process = &p;
  }
}

// A job on two GPUs or more whose utilizations spread over imbalance_pct points.
std::optional<Alert> imbalance_alert(const std::string& job, const JobGpus& gpus, const AlertConfig& config) {
  if (gpus.util_by_gpu.size() < 2) return std::nullopt;
  unsigned lo = 100;
  unsigned hi = 0;
  std::vector<std::string> parts;
  Alert a;
  for (const auto& [idx, util] : gpus.util_by_gpu) {
    lo = std::min(lo, util);
    hi = std::max(hi, util);
    parts.push_back(fmt::format("{}: {} %", idx, util));
    a.gpus.push_back(idx);
  }
  if (hi - lo <= config.imbalance_pct) return std::nullopt;
  a.rule = Rule::Imbalance;
  a.severity = severity_of(Rule::Imbalance);
  a.key = "job:" + job;
  a.job = job;
  a.gpu = a.gpus.front();
  const gpu::GpuProcess& p = *gpus.process;
  a.user = p.host.user.value_or("");
  a.command = p.host.command_line.value_or("");
  a.summary = fmt::format("job {} on GPUs {}: utilization spread {} points ({})",
                          p.host.user ? fmt::format("{} ({})", short_command(p), *p.host.user) : short_command(p),
                          fmt::join(a.gpus, ","), hi - lo, fmt::join(parts, ", "));
  return a;
}

}  // namespace

const char* to_string(Rule rule) {
  switch (rule) {
    case Rule::Starvation: return "starvation";
    case Rule::Idle: return "idle";
    case Rule::Holding: return "holding";
    case Rule::Thermal: return "thermal";
    case Rule::NearOom: return "near_oom";
    case Rule::Imbalance: return "imbalance";
    case Rule::Fault: return "fault";
    case Rule::LeaseIdle: return "lease_idle";
    case Rule::Reaper: return "reaper";
    case Rule::SlurmIdleJob: return "slurm_idle_job";
  }
  return "?";
}

std::optional<Rule> rule_from_name(std::string_view name) {
  for (Rule r : kRules) {
    if (name == to_string(r)) return r;
  }
  return std::nullopt;
}

const char* to_string(Severity severity) {
  switch (severity) {
    case Severity::Info: return "info";
    case Severity::Warning: return "warning";
    case Severity::Critical: return "critical";
  }
  return "?";
}

Severity severity_of(Rule rule) {
  switch (rule) {
    case Rule::Idle: return Severity::Info;
    case Rule::Thermal:
    case Rule::Fault: return Severity::Critical;
    default: return Severity::Warning;
  }
}

const char* to_string(Notice::Kind kind) { return kind == Notice::Kind::Firing ? "firing" : "resolved"; }

bool AlertConfig::enabled(Rule rule) const { return std::find(disabled.begin(), disabled.end(), rule) == disabled.end(); }

long long AlertConfig::for_ms(Rule rule) const {
  switch (rule) {
    case Rule::Starvation: return starvation_for_ms;
    case Rule::Idle: return idle_for_ms;
    case Rule::Holding: return holding_for_ms;
    case Rule::Thermal: return thermal_for_ms;
    case Rule::NearOom: return near_oom_for_ms;
    case Rule::Imbalance: return imbalance_for_ms;
    case Rule::Fault: return fault_for_ms;
    case Rule::LeaseIdle: return 0;  // the scheduler's own limit (scheduler.lease_idle_limit)
    case Rule::Reaper: return 0;     // the reaper's own (reaper.warn_after, reaper.idle_for)
    case Rule::SlurmIdleJob: return 0;  // slurm.idle_job_warn_after
  }
  return 0;
}

long long AlertConfig::longest_for_ms() const {
  long long longest = 0;
  for (Rule r : kRules) {
    if (enabled(r)) longest = std::max(longest, for_ms(r));
  }
  return longest;
}

std::optional<std::vector<Rule>> parse_rule_list(std::string_view text, std::string* bad) {
  std::vector<Rule> out;
  for (const auto& part : util::split(text, ',')) {
    const auto word = util::trim(part);
    if (word.empty()) continue;
    auto rule = rule_from_name(word);
    if (!rule) {
      if (bad != nullptr) *bad = std::string(word);
      return std::nullopt;
    }
    if (std::find(out.begin(), out.end(), *rule) == out.end()) out.push_back(*rule);
  }
  return out;
}

std::string rule_list_text(const std::vector<Rule>& rules) {
  std::vector<std::string> names;
  for (Rule r : rules) names.emplace_back(to_string(r));
  return fmt::format("{}", fmt::join(names, ","));
}

std::string Notice::text() const {
  if (kind == Kind::Firing) {
    return fmt::format("FIRING [{}] {}: {}", to_string(alert.severity), to_string(alert.rule), alert.summary);
  }
  return fmt::format("RESOLVED [{}] {}: {} (held {})", to_string(alert.severity), to_string(alert.rule), alert.summary,
                     age(ts_ms - alert.since_ms));
}

std::string job_key(const host::ProcessInfo& process) {
  if (process.slurm_job_id && !process.slurm_job_id->empty()) return "slurm " + *process.slurm_job_id;
  if (process.container && !process.container->id.empty()) {
    return fmt::format("{} {}", process.container->runtime, process.container->id.substr(0, 12));
  }
  if (!process.command_line || process.command_line->empty()) return "";
  std::string blurred;
  for (char c : *process.command_line) {
    const bool digit = std::isdigit(static_cast<unsigned char>(c)) != 0;
    if (digit && !blurred.empty() && blurred.back() == '#') continue;
    blurred += digit ? '#' : c;
  }
  return fmt::format("{} {}", process.user.value_or("?"), blurred);
}

Evaluator::Evaluator(AlertConfig config, gpu::ActivityThresholds activity)
    : config_(std::move(config)), activity_(activity) {}

std::vector<Notice> Evaluator::observe(const gpu::Snapshot& merged, const std::map<unsigned, gpu::Activity>& classes,
                                       long long ts_ms) {
  AlertsNow now;
  const auto add = [&](std::optional<Alert> a) {
    if (!a || !config_.enabled(a->rule)) return;
    auto k = std::make_pair(a->rule, a->key);
    now.emplace(std::move(k), std::move(*a));
  };
  std::map<std::string, JobGpus> jobs;
  std::set<unsigned> seen;
  for (const auto& d : merged.devices) {
    seen.insert(d.id.index);
    track_zero_utilization(d, ts_ms);
    if (d.lost) {
      add(lost_alert(d));
      continue;
    }
    const auto cls = class_of(classes, d.id.index);
    add(fault_alert(d, cls));
    add(starvation_alert(d, cls, activity_));
    add(idle_alert(d, cls));
    add(holding_alert(d, cls));
    add(thermal_alert(d, config_));
    add(near_oom_alert(d, config_));
    note_job_gpus(d, jobs);
  }
  for (auto it = zero_since_ms_.begin(); it != zero_since_ms_.end();) {
    it = seen.count(it->first) ? std::next(it) : zero_since_ms_.erase(it);
  }
  for (const auto& [job, gpus] : jobs) add(imbalance_alert(job, gpus, config_));
  return advance(std::move(now), ts_ms);
}

void Evaluator::track_zero_utilization(const gpu::Device& d, long long ts_ms) {
  const auto util = d.sample.util_gpu_pct;
  if (!d.lost && !d.processes.empty() && util && *util == 0) {
    zero_since_ms_.emplace(d.id.index, ts_ms);
  } else {
    zero_since_ms_.erase(d.id.index);
  }
}

std::vector<Notice> Evaluator::advance(AlertsNow now, long long ts_ms) {
  std::vector<Notice> notices;
  for (auto it = states_.begin(); it != states_.end();) {
    if (now.count(it->first) == 0) {
      if (it->second.firing) notices.push_back({Notice::Kind::Resolved, it->second.alert, ts_ms});
      it = states_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [k, alert] : now) {
    auto [it, fresh] = states_.try_emplace(k);
    State& s = it->second;
    if (fresh) s.since_ms = ts_ms;
    s.alert = std::move(alert);
    s.alert.since_ms = s.since_ms;
    // How long it has held, in the summary: for holding, how long its processes sat at 0 %.
    long long held_since = s.since_ms;
    if (k.first == Rule::Holding && s.alert.gpu) {
      if (auto z = zero_since_ms_.find(*s.alert.gpu); z != zero_since_ms_.end()) held_since = std::min(held_since, z->second);
    }
    s.alert.summary += fmt::format(" for {}", age(ts_ms - held_since));
    if (!s.firing && ts_ms - s.since_ms >= config_.for_ms(k.first)) {
      s.firing = true;
      notices.push_back({Notice::Kind::Firing, s.alert, ts_ms});
    }
  }
  return notices;
}

std::vector<Alert> Evaluator::firing() const {
  std::vector<Alert> out;
  for (const auto& [k, s] : states_) {
    if (s.firing) out.push_back(s.alert);
  }
  return out;
}

std::string summary_without_arguments(const Alert& alert) {
  if (alert.command.empty()) return alert.summary;
  const std::string shown = first_words(alert.command);
  const auto at = alert.summary.find(shown);
  if (shown.empty() || at == std::string::npos) return alert.summary;
  return alert.summary.substr(0, at) + host::program_name(alert.command) + alert.summary.substr(at + shown.size());
}

}  // namespace tarmac::alerts
