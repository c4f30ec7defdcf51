#include "tarmac/cli/doctor.hpp"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/status_source.hpp"
#include "tarmac/cli/table.hpp"
#include "tarmac/config/config.hpp"
#include "tarmac/diagnose/doctor.hpp"
#include "tarmac/host/proc_reader.hpp"
#include "tarmac/host/process_cache.hpp"
#include "tarmac/sched/wire.hpp"
#include "tarmac/serve/live.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"
#include "tarmac/util/process.hpp"

extern char** environ;  // NOLINT: POSIX

namespace tarmac::cli {

namespace {

using diagnose::Finding;
using diagnose::Severity;

struct DoctorOptions {
  std::string window;  // --window (else the configuration's)
  std::string interval;
  unsigned pid = 0;
  unsigned expect_gpus = 0;
  bool direct = false;  // --direct: sample NVML, never the agent's window
};

std::optional<std::string> environment_variable(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
}

diagnose::Environment read_environment() {
  diagnose::Environment e;
  e.cuda_visible_devices = environment_variable("CUDA_VISIBLE_DEVICES");
  e.nvidia_visible_devices = environment_variable("NVIDIA_VISIBLE_DEVICES");
  e.cuda_device_order = environment_variable("CUDA_DEVICE_ORDER");
  e.cuda_launch_blocking = environment_variable("CUDA_LAUNCH_BLOCKING");
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string_view entry = *p;
    if (!entry.starts_with("NCCL_")) continue;
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    e.nccl.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  std::sort(e.nccl.begin(), e.nccl.end());
  e.container = host::ProcReader().read(static_cast<unsigned>(getpid())).container;
  std::error_code ec;
  e.in_container = e.container.has_value() || std::filesystem::exists("/.dockerenv", ec) ||
                   std::filesystem::exists("/run/.containerenv", ec);
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    const auto name = entry.path().filename().string();
    if (name.starts_with("nvidia")) e.device_nodes.push_back("/dev/" + name);
  }
  std::sort(e.device_nodes.begin(), e.device_nodes.end());
  return e;
}

nlohmann::json optional_json(const std::optional<std::string>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

nlohmann::json to_json(const diagnose::Environment& e) {
  nlohmann::json nccl = nlohmann::json::object();
  for (const auto& [k, v] : e.nccl) nccl[k] = v;
  nlohmann::json container = nullptr;
  if (e.container) container = {{"runtime", e.container->runtime}, {"id", e.container->id}};
  return {{"cuda_visible_devices", optional_json(e.cuda_visible_devices)},
          {"nvidia_visible_devices", optional_json(e.nvidia_visible_devices)},
          {"cuda_device_order", optional_json(e.cuda_device_order)},
          {"cuda_launch_blocking", optional_json(e.cuda_launch_blocking)},
          {"nccl", nccl},
          {"in_container", e.in_container},
          {"container", container},
          {"device_nodes", e.device_nodes}};
}

nlohmann::json to_json(const Finding& f) {
  nlohmann::json evidence = nlohmann::json::array();
  for (const auto& e : f.evidence) {
    nlohmann::json item = {{"gpu", e.gpu}};
    for (const auto& [key, value] : e.values) {
      std::visit([&](const auto& v) { item[key] = v; }, value);
    }
    evidence.push_back(std::move(item));
  }
  return {{"code", f.code},   {"severity", diagnose::to_string(f.severity)},
          {"summary", f.summary}, {"gpus", f.gpus},
          {"evidence", evidence}, {"facts", f.facts},
          {"causes", f.causes},   {"fixes", f.fixes}};
}

template <typename T>
nlohmann::json optional_json(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json to_json(const diagnose::GpuSummary& g) {
  return {{"index", g.index},
          {"name", optional_json(g.name)},
          {"activity", g.activity ? nlohmann::json(gpu::to_string(*g.activity)) : nlohmann::json(nullptr)},
          {"lost", g.lost},
          {"util_gpu_median_pct", optional_json(g.util_median_pct)},
          {"util_gpu_max_pct", optional_json(g.util_max_pct)},
          {"temp_max_c", optional_json(g.temp_max_c)},
          {"mem_used_median_bytes", optional_json(g.mem_used_median_bytes)},
          {"mem_total_bytes", optional_json(g.mem_total_bytes)},
          {"processes", g.processes}};
}

void append_list(std::string& out, const char* label, const std::vector<std::string>& lines) {
  for (std::size_t i = 0; i < lines.size(); ++i) {
    out += fmt::format("    {:<9} {}\n", i == 0 ? label : "", util::terminal_text(lines[i]));
  }
}

}  // namespace

namespace detail {

// "util_gpu 98 %", "mem_used 38.1 GiB": evidence values with their units for people.
std::string evidence_text(const std::string& key, const diagnose::EvidenceValue& value) {
  auto name_without = [&](std::string_view suffix) { return key.substr(0, key.size() - suffix.size()); };
  if (const auto* i = std::get_if<long long>(&value)) {
    if (key.ends_with("_bytes")) return fmt::format("{} {}", name_without("_bytes"), util::format_bytes(static_cast<std::uint64_t>(*i)));
    if (key.ends_with("_age_s")) return fmt::format("{} {}", name_without("_s"), util::format_age(*i));
    if (key.ends_with("_c")) return fmt::format("{} {} C", name_without("_c"), *i);
    if (key.ends_with("_mhz")) return fmt::format("{} {} MHz", name_without("_mhz"), *i);
    if (key.ends_with("_pct")) return fmt::format("{} {} %", name_without("_pct"), *i);
    return fmt::format("{} {}", key, *i);
  }
  if (const auto* d = std::get_if<double>(&value)) {
    if (key.ends_with("_pct")) return fmt::format("{} {:.0f} %", name_without("_pct"), *d);
    return fmt::format("{} {:.1f}", key, *d);
  }
  if (const auto* b = std::get_if<bool>(&value)) return fmt::format("{} {}", key, *b ? "yes" : "no");
  return fmt::format("{} {}", key, std::get<std::string>(value));
}

// "GPU 0: util_gpu 98 %, memory 38.1 of 40.0 GiB, processes 1, ...": the common values first.
std::string evidence_line(const diagnose::GpuEvidence& e) {
  std::vector<std::string> parts;
  auto values = e.values;
  const auto take = [&](const std::string& key) {
    auto it = values.find(key);
    if (it == values.end()) return;
    parts.push_back(evidence_text(key, it->second));
    values.erase(it);
  };
  take("lost");
  take("util_gpu_pct");
  const auto used = values.find("mem_used_bytes");
  const auto total = values.find("mem_total_bytes");
  if (used != values.end() && total != values.end()) {
    const auto* u = std::get_if<long long>(&used->second);
    const auto* t = std::get_if<long long>(&total->second);
    if (u != nullptr && t != nullptr) {
      parts.push_back(fmt::format("memory {} of {}", util::format_bytes(static_cast<std::uint64_t>(*u)),
                                  util::format_bytes(static_cast<std::uint64_t>(*t))));
      values.erase("mem_used_bytes");
      values.erase("mem_total_bytes");
    }
  }
  take("processes");
  for (const auto& [key, value] : values) parts.push_back(evidence_text(key, value));
  return fmt::format("GPU {}: {}", e.gpu, fmt::join(parts, ", "));
}

std::string doctor_text(const DoctorReport& r, const std::string& host, bool color) {
  std::string out;
  std::string sampled = r.samples <= 1 ? std::string("one snapshot")
                                        : fmt::format("sampled {} ({} samples)", util::format_duration_ms(r.window_ms), r.samples);
  if (r.from_agent) {
    sampled = r.samples <= 1 ? std::string("the agent's last sample")
                             : fmt::format("the agent's last {} ({} samples)", util::format_duration_ms(r.window_ms), r.samples);
  }
  if (r.exit_code == kExitCouldNotLook) {
    out += fmt::format("tarmac doctor  {}  could not look at the GPUs\n", host);
  } else {
    out += fmt::format("tarmac doctor  {}  {} GPU{}  driver {}  {}\n", host, r.gpus.size(),
                       r.gpus.size() == 1 ? "" : "s", r.driver_version.value_or("-"), sampled);
  }
  if (r.job) {
    const std::size_t descendants = r.job->pids.empty() ? 0 : r.job->pids.size() - 1;  // pids[0] is the job's root
    out += fmt::format("job: PID {} and {} descendant{}, on {}\n", r.job->root_pid, descendants,
                       descendants == 1 ? "" : "s",
                       r.job_gpus.empty() ? std::string("no GPU") : "GPUs " + diagnose::format_index_list(r.job_gpus));
  }
  std::set<unsigned> flagged;
  for (Severity severity : {Severity::Critical, Severity::Warning, Severity::Info}) {
    bool header = false;
    for (const auto& f : r.findings) {
      if (f.severity != severity) continue;
      if (!header) {
        const Style style = severity == Severity::Critical ? Style::Bad
                            : severity == Severity::Warning ? Style::Warn
                                                            : Style::Dim;
        std::string title = diagnose::to_string(severity);
        std::transform(title.begin(), title.end(), title.begin(), [](unsigned char ch) { return std::toupper(ch); });
        out += fmt::format("\n{}\n", styled(title, style, color));
        header = true;
      }
      if (severity != Severity::Info) flagged.insert(f.gpus.begin(), f.gpus.end());
      out += fmt::format("  {}  {}\n", styled(f.code, Style::Bold, color), util::terminal_text(f.summary));
      std::vector<std::string> evidence;
      for (const auto& e : f.evidence) evidence.push_back(evidence_line(e));
      evidence.insert(evidence.end(), f.facts.begin(), f.facts.end());
      append_list(out, "evidence", evidence);
      append_list(out, "causes", f.causes);
      append_list(out, "fix", f.fixes);
    }
  }
  std::vector<unsigned> healthy;
  unsigned util_lo = 100;
  unsigned util_hi = 0;
  unsigned temp_hi = 0;
  for (const auto& g : r.gpus) {
    if (flagged.contains(g.index) || g.lost) continue;
    healthy.push_back(g.index);
    const auto u = static_cast<unsigned>(g.util_median_pct.value_or(0) + 0.5);
    util_lo = std::min(util_lo, u);
    util_hi = std::max(util_hi, u);
    temp_hi = std::max(temp_hi, g.temp_max_c.value_or(0));
  }
  out += "\n";
  if (!healthy.empty()) {
    const std::string util = util_lo == util_hi ? fmt::format("{} %", util_lo) : fmt::format("{}-{} %", util_lo, util_hi);
    out += styled(fmt::format("healthy: {} {} (utilization {}, up to {} C)", healthy.size() == 1 ? "GPU" : "GPUs",
                              diagnose::format_index_list(healthy), util, temp_hi),
                  Style::Good, color) +
           "\n";
  } else if (!r.gpus.empty()) {
    out += "healthy: none\n";
  }
  std::map<Severity, int> n;
  for (const auto& f : r.findings) ++n[f.severity];
  out += fmt::format("{} critical, {} warning{}, {} info: exit {}\n", n[Severity::Critical], n[Severity::Warning],
                     n[Severity::Warning] == 1 ? "" : "s", n[Severity::Info], r.exit_code);
  return out;
}

nlohmann::json doctor_json(const DoctorReport& r) {
  nlohmann::json j;
  j["schema"] = 1;
  j["timestamp_unix_ms"] = r.timestamp_unix_ms;
  j["window_ms"] = r.window_ms;
  j["samples"] = r.samples;
  j["source"] = r.from_agent ? "agent" : "nvml";
  j["driver_version"] = optional_json(r.driver_version);
  j["exit_code"] = r.exit_code;
  std::map<std::string, int> counts{{"critical", 0}, {"warning", 0}, {"info", 0}};
  for (const auto& f : r.findings) ++counts[diagnose::to_string(f.severity)];
  j["summary"] = counts;
  j["environment"] = to_json(r.environment);
  j["expect_gpus"] = optional_json(r.expect_gpus);
  if (r.job) {
    j["job"] = {{"pid", r.job->root_pid}, {"pids", r.job->pids}, {"gpus", r.job_gpus}};
  } else {
    j["job"] = nullptr;
  }
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : r.gpus) j["gpus"].push_back(to_json(g));
  j["findings"] = nlohmann::json::array();
  for (const auto& f : r.findings) j["findings"].push_back(to_json(f));
  return j;
}

WindowRefusal window_refusal(const WindowFacts& f) {
  // Samples of now: an agent whose sampling is stuck answers from a window that ended long ago.
  if (f.newest_age_ms > 3 * f.interval_ms + 5000) {
    return {fmt::format("the agent's last sample is {} old", util::format_duration_ms(f.newest_age_ms)), true};
  }
  if (f.samples == 0 || f.span_ms < 0 || f.span_ms > serve::LiveState::kRecentMs + 2 * f.interval_ms) {
    return {"the agent's window spans more than it keeps", true};
  }
  if (f.window_ms > 0) {
    // Enough samples for a condition to be sustained: at least two, the agent's interval at most
    // half the window, and the agent watching for all of it.
    if (f.samples < 2 || 2 * f.interval_ms > f.window_ms) return {"the agent samples too seldom for the window", false};
    if (f.span_ms + f.interval_ms < f.window_ms) return {"the agent has not watched for the whole window yet", false};
    // Nor a window with a hole (the agent's sampling stalled): its ends alone say little.
    if (f.max_gap_ms > std::max(2 * f.interval_ms, f.window_ms / 2) + f.interval_ms) {
      return {"the agent's samples of the window have a gap", false};
    }
    // Not coarser than an --interval asked for (a thinned answer: the spacing as sent).
    const long long spacing = f.span_ms / static_cast<long long>(f.samples - 1);
    if (f.asked_interval_ms > 0 && std::max(spacing, f.interval_ms) > f.asked_interval_ms) {
      return {"the agent's samples are coarser than --interval", false};
    }
  }
  // The agent lists processes every process interval: a process of the job younger than the
  // window and that may not be in its lists yet (a launcher's workers start late, and restart).
  // A start time is in whole seconds: one more is allowed for.
  const long long listed_since_s = (f.newest_unix_ms - f.window_ms - f.process_interval_ms) / 1000;
  for (const long long start : f.job_starts_unix_s) {
    if (start + 1 >= listed_since_s) return {"a process of the job is younger than the agent's process lists", false};
  }
  return {};
}

}  // namespace detail

namespace {

// Adds the job's processes to its scope, looked up again with every sample: a launcher starts its
// workers late.
void add_job_descendants(diagnose::DoctorInput& input, const host::ProcReader& proc) {
  if (!input.job) return;
  const auto self = static_cast<unsigned>(getpid());
  auto& pids = input.job->pids;
  for (unsigned child : proc.descendants(input.job->root_pid)) {
    // doctor itself may run inside the job (a script calling it): it is not one of the job's processes.
    if (child != self && std::find(pids.begin(), pids.end(), child) == pids.end()) pids.push_back(child);
  }
}

// One snapshot with processes every interval over the window (the topology with the first), into
// input.samples. The failure's message when nothing could be sampled; a later failure keeps what
// was sampled before it.
std::optional<std::string> sample_window(gpu::Backend& backend, diagnose::DoctorInput& input,
                                         const host::ProcReader& proc) {
  const auto start = std::chrono::steady_clock::now();
  const long long interval = std::max<long long>(input.thresholds.interval_ms, 1);
  const long long count = input.thresholds.window_ms / interval + 1;
  for (long long k = 0; k < count; ++k) {
    std::this_thread::sleep_until(start + std::chrono::milliseconds(k * interval));
    add_job_descendants(input, proc);
    gpu::SnapshotOptions so;
    so.processes = true;
    so.topology = k == 0;
    auto snap = backend.snapshot(so);
    if (!snap.ok()) {
      if (input.samples.empty()) return snap.error().message;
      break;
    }
    if (k == 0) input.topology = snap->topology;
    input.samples.push_back(std::move(*snap));
  }
  return std::nullopt;
}

// Whether the agent's GPUs (`latest`) are this caller's: the agent runs as root on the host, where
// a Slurm job's device cgroup, or a container given some GPUs' device nodes only, lets the caller
// use fewer. Not in a Slurm job, then, and each GPU's device node there for the caller to open
// (checked by permission, not opened: an open initialises a GPU without persistence mode). Where
// there are no device nodes at all (the simulator's GPUs), nothing to compare.
bool sees_what_the_agent_sees(const gpu::Snapshot& latest) {
  if (std::getenv("SLURM_JOB_ID") != nullptr) return false;
  if (::access("/dev/nvidiactl", F_OK) != 0) return true;
  if (::access("/dev/nvidiactl", R_OK | W_OK) != 0) return false;
  for (const auto& d : latest.devices) {
    if (!d.id.minor_number || ::access(fmt::format("/dev/nvidia{}", *d.id.minor_number).c_str(), R_OK | W_OK) != 0) {
      return false;
    }
  }
  return true;
}

// The agent's samples of the window instead of sampling it (docs/doctor.md "Through the agent"),
// into input; false when they cannot stand for doctor's own (detail::window_refusal). A bad
// answer, or a stale one, is named on stderr.
bool window_from_agent(const GlobalOptions& global, const std::string& socket, const DoctorOptions& options,
                       diagnose::DoctorInput& input, const host::ProcReader& proc) {
  const long long window = input.thresholds.window_ms;
  if (options.direct || socket.empty() || window > serve::LiveState::kRecentMs) return false;
  host::ProcessCache processes;
  auto answer = agent_window(socket, nvml_source(global), window, processes);
  const auto warn = [](const std::string& problem) {
    fmt::print(stderr, "tarmac: warning: {}: sampling the GPUs here (--direct does so at once)\n",
               util::terminal_text(problem));
  };
  if (!answer.problem.empty()) warn(answer.problem);
  if (!answer.window) return false;
  AgentWindow& w = *answer.window;
  if (!sees_what_the_agent_sees(w.samples.back())) return false;
  detail::WindowFacts facts;
  facts.window_ms = window;
  facts.asked_interval_ms = options.interval.empty() ? 0 : input.thresholds.interval_ms;
  facts.samples = w.samples.size();
  facts.span_ms = w.samples.back().timestamp_unix_ms - w.samples.front().timestamp_unix_ms;
  for (std::size_t k = 1; k < w.samples.size(); ++k) {
    facts.max_gap_ms = std::max(facts.max_gap_ms, w.samples[k].timestamp_unix_ms - w.samples[k - 1].timestamp_unix_ms);
  }
  facts.newest_unix_ms = w.samples.back().timestamp_unix_ms;
  facts.newest_age_ms = w.newest_age_ms;
  facts.interval_ms = w.interval_ms;
  facts.process_interval_ms = w.process_interval_ms;
  if (input.job) {
    for (const unsigned pid : input.job->pids) {
      const auto st = proc.stat(pid);
      if (st && st->start_time_unix) {
        facts.job_starts_unix_s.push_back(*st->start_time_unix);
      } else if (pid == input.job->root_pid) {
        return false;  // the job's own start unknown: sampled here
      }
    }
  }
  const auto refusal = detail::window_refusal(facts);
  if (refusal.warn) warn(refusal.why);
  if (!refusal.why.empty()) return false;
  input.topology = w.samples.back().topology;
  for (auto& s : w.samples) s.topology.reset();
  input.samples = std::move(w.samples);
  return true;
}

// The findings of the samples, or, when none could be taken, the one that says why.
void add_findings(detail::DoctorReport& report, const diagnose::DoctorInput& input,
                  const std::optional<std::string>& failure) {
  report.job = input.job;
  if (failure) {
    report.findings.push_back(diagnose::no_gpus_visible(*failure, input.environment));
    report.exit_code = kExitCouldNotLook;
  } else {
    auto diagnosis = diagnose::diagnose(input);
    report.findings = std::move(diagnosis.findings);
    report.gpus = std::move(diagnosis.gpus);
    report.job_gpus = std::move(diagnosis.job_gpus);
    report.samples = input.samples.size();
    report.driver_version = input.samples.back().driver_version;
    report.timestamp_unix_ms = input.samples.back().timestamp_unix_ms;
    report.exit_code = diagnose::exit_code_for(report.findings);
  }
  if (report.timestamp_unix_ms == 0) {
    report.timestamp_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
  }
}

int run_doctor(const GlobalOptions& global, const DoctorOptions& options) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return kExitUsage;
  diagnose::DoctorInput input;
  input.activity = loaded->config.activity;
  input.thresholds = loaded->config.doctor;
  if (!options.window.empty()) input.thresholds.window_ms = *util::parse_duration_ms(options.window);
  if (!options.interval.empty()) input.thresholds.interval_ms = *util::parse_duration_ms(options.interval);
  input.environment = read_environment();

  detail::DoctorReport report;
  report.environment = input.environment;
  report.window_ms = input.thresholds.window_ms;
  if (options.expect_gpus != 0) input.expect_gpus = options.expect_gpus;
  report.expect_gpus = input.expect_gpus;
  const host::ProcReader proc;  // reads boot time and clock ticks once, for every sample
  if (options.pid != 0) {
    if (proc.read(options.pid).visibility != host::PidVisibility::Visible) {
      fmt::print(stderr, "tarmac: doctor --pid {}: no such process in this PID namespace\n", options.pid);
      return kExitUsage;
    }
    diagnose::JobScope scope;
    scope.root_pid = options.pid;
    scope.pids.push_back(options.pid);
    input.job = scope;
  }
  add_job_descendants(input, proc);

  std::optional<std::string> failure;
  report.from_agent = window_from_agent(global, sched::socket_path(loaded->config.scheduler.socket), options, input, proc);
  if (!report.from_agent) {
    auto backend = gpu::open_nvml_backend(global.nvml_lib);
    failure = backend.ok() ? sample_window(**backend, input, proc) : std::optional<std::string>(backend.error().message);
  }
  add_findings(report, input, failure);
  if (global.json) {
    fmt::print("{}\n", util::json_text(detail::doctor_json(report), 2));
  } else {
    fmt::print("{}", detail::doctor_text(report, util::host_name(), use_color(global, stdout)));
  }
  return report.exit_code;
}

}  // namespace

void add_doctor_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "doctor", "Diagnose a (distributed) training launch from what the GPUs show: findings with evidence and fixes "
                "(exit 0 healthy, 1 warnings, 2 critical, 3 could not look)");
  auto options = std::make_shared<DoctorOptions>();
  const auto duration_check = [](const std::string& text) {
    return util::parse_duration_ms(text) ? std::string() : "not a duration (examples: 0, 500ms, 3s, 1m)";
  };
  cmd->add_option("--window", options->window, "How long to sample (default 3s; 0 for one snapshot)")
      ->check(duration_check);
  cmd->add_option("--interval", options->interval, "Time between samples (default 500ms)")
      ->check([duration_check](const std::string& text) {
        auto ms = util::parse_duration_ms(text);
        if (!ms) return duration_check(text);
        return *ms >= 50 ? std::string() : std::string("at least 50ms");
      });
  cmd->add_option("--expect-gpus", options->expect_gpus, "How many GPUs the job should be using")
      ->check(CLI::Range(1u, 1024u));
  cmd->add_option("--pid", options->pid,
                  "Look at one job: this process (a torchrun/deepspeed launcher, say) and its descendants")
      ->check(CLI::Range(1u, 4194304u));
  cmd->add_flag("--direct", options->direct,
                "Sample NVML here for the window, not the agent's samples of the last window (used when an agent runs)");
  cmd->callback([&global, &exit_code, options] { exit_code = run_doctor(global, *options); });
}

}  // namespace tarmac::cli
