#include "tarmac/cli/status.hpp"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fmt/format.h>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/snapshot_json.hpp"
#include "tarmac/cli/status_source.hpp"
#include "tarmac/cli/table.hpp"
#include "tarmac/diagnose/backfill_json.hpp"
#include "tarmac/diagnose/verdicts.hpp"
#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/clock_events.hpp"
#include "tarmac/gpu/cuda_visible.hpp"
#include "tarmac/sched/wire.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/units.hpp"
#include "tarmac/util/process.hpp"

#include <memory>

namespace tarmac::cli {

namespace {

using gpu::Activity;

std::string dash() { return "-"; }

template <typename T>
std::string or_dash(const std::optional<T>& v, const char* suffix = "") {
  return v ? fmt::format("{}{}", *v, suffix) : dash();
}

// A ten-cell bar for memory use: "[#######---]". The fraction is clamped before it becomes a count:
// a device that reports more used than total must show a full bar, not an undefined conversion.
std::string bar(double fraction) {
  const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 10.0 + 0.5);
  return "[" + std::string(static_cast<std::size_t>(filled), '#') + std::string(static_cast<std::size_t>(10 - filled), '-') + "]";
}

Style activity_style(Activity a) {
  switch (a) {
    case Activity::Busy: return Style::Good;
    case Activity::Starved:
    case Activity::Holding:
    case Activity::ReservedIdle: return Style::Warn;
    case Activity::Idle: return Style::Dim;
    case Activity::Fault: return Style::Bad;
  }
  return Style::Plain;
}

}  // namespace

namespace detail {

std::string memory_cell(const gpu::Device& d) {
  if (!d.sample.mem_used_bytes || !d.id.mem_total_bytes || *d.id.mem_total_bytes == 0) return dash();
  const double used = static_cast<double>(*d.sample.mem_used_bytes);
  const double total = static_cast<double>(*d.id.mem_total_bytes);
  return fmt::format("{} {:.1f}/{:.1f} GiB", bar(used / total), used / static_cast<double>(util::kGiB),
                     total / static_cast<double>(util::kGiB));
}

std::string power_cell(const gpu::Device& d) {
  const auto limit = d.modes.enforced_power_limit_mw ? d.modes.enforced_power_limit_mw : d.modes.power_limit_mw;
  if (!d.sample.power_mw) return limit ? fmt::format("-/{:.0f} W", *limit / 1000.0) : dash();
  if (!limit) return fmt::format("{:.0f} W", *d.sample.power_mw / 1000.0);
  return fmt::format("{:.0f}/{:.0f} W", *d.sample.power_mw / 1000.0, *limit / 1000.0);
}

std::string events_cell(const gpu::Device& d) {
  if (!d.sample.clock_event_reasons) return dash();
  std::string out;
  for (const auto& n : gpu::clock_event_names()) {
    // Idle clocks on an idle GPU are not news.
    if ((*d.sample.clock_event_reasons & n.bit) == 0 || n.bit == 0x1) continue;
    out += (out.empty() ? "" : ",") + std::string(n.words);
  }
  return out.empty() ? dash() : out;
}

std::string short_bus_id(const std::optional<std::string>& id) {
  if (!id) return dash();
  // "00000000:07:00.0" -> "07:00.0" unless the domain is not zero.
  const auto colon = id->find(':');
  if (colon != std::string::npos && id->find_first_not_of('0') >= colon) return id->substr(colon + 1);
  return *id;
}

std::string container_cell(const host::ProcessInfo& h) {
  std::string out = host::workload_label(h);
  return out.empty() ? dash() : out;
}

}  // namespace detail

namespace {

using detail::container_cell;
using detail::events_cell;
using detail::memory_cell;
using detail::power_cell;
using detail::short_bus_id;

// "host  driver 550.54  CUDA 12.4  4 GPUs  2024-05-01 12:00:00", and "  (agent, 0.4 s old)" when the
// agent's view is shown.
void print_header(std::FILE* out, const gpu::Snapshot& snap, const std::optional<long long>& agent_age_ms) {
  const std::string host = util::host_name();
  const std::time_t now = snap.timestamp_unix_ms / 1000;
  std::tm tm_now{};
  localtime_r(&now, &tm_now);
  char when[32] = {};
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm_now);
  std::string cuda = snap.cuda_driver_version
                         ? fmt::format("{}.{}", *snap.cuda_driver_version / 1000, (*snap.cuda_driver_version % 1000) / 10)
                         : "-";
  const std::string source = agent_age_ms ? fmt::format("  (agent, {:.1f} s old)", static_cast<double>(*agent_age_ms) / 1000.0) : "";
  fmt::print(out, "{}  driver {}  CUDA {}  {} GPU{}  {}{}\n", host, util::terminal_text(snap.driver_version.value_or("-")), cuda,
             snap.devices.size(), snap.devices.size() == 1 ? "" : "s", when, source);
}

// One row per GPU, then the values that failed with something other than "not supported".
// A MIG device's MEMORY cell, as a GPU's.
std::string mig_memory_cell(const gpu::MigDevice& m) {
  gpu::Device view;
  view.id.mem_total_bytes = m.mem_total_bytes;
  view.sample.mem_used_bytes = m.mem_used_bytes;
  return memory_cell(view);
}

// The rows of a GPU's MIG devices, under its own ("4:0", as nvitop names them): GPM's SM activity
// where measured (Hopper), never a utilization that MIG mode does not give.
void add_mig_rows(Table& gpus, const gpu::Device& d, const std::vector<gpu::MigActivity>& classes) {
  for (std::size_t k = 0; k < d.mig.size(); ++k) {
    const gpu::MigDevice& m = d.mig[k];
    const std::string ids = m.gpu_instance_id && m.compute_instance_id
                                ? fmt::format("GI {} CI {}", *m.gpu_instance_id, *m.compute_instance_id)
                                : dash();
    Cell activity{"-"};
    if (k < classes.size()) {
      // Without GPM a slice with processes is in use, its activity unmeasured: said so.
      activity = classes[k].measured ? Cell{gpu::to_string(classes[k].activity), activity_style(classes[k].activity)}
                                     : Cell{"in use", Style::Plain};
    }
    gpus.add_row({{fmt::format("{}:{}", d.id.index, m.index)},
                  {"  MIG " + m.profile.value_or("?"), Style::Dim},
                  {ids, Style::Dim},
                  {mig_memory_cell(m)},
                  {m.gpm_sm_active_pct ? fmt::format("{:.0f} %", *m.gpm_sm_active_pct) : dash()},
                  {""},
                  {""},
                  {""},
                  {""},
                  activity,
                  {""}});
  }
}

// The ACTIVITY cell: the class, and how long it has lasted where the agent measured it ("holding
// 2h05m"); a GPU's own class otherwise (one look cannot say).
std::string activity_cell(const StatusView& v, std::size_t i) {
  std::string out = gpu::to_string(v.classes[i]);
  if (i < v.class_since_unix_ms.size() && v.class_since_unix_ms[i]) {
    out += " " + util::format_age(std::max(0LL, (v.snapshot.timestamp_unix_ms - *v.class_since_unix_ms[i]) / 1000));
  }
  return out;
}

void print_gpus(std::FILE* out, const StatusView& v, bool color) {
  const gpu::Snapshot& snap = v.snapshot;
  const std::vector<Activity>& classes = v.classes;
  const MigClasses& mig_classes = v.mig_classes;
  Table gpus({{"GPU", Align::Right}, {"NAME"}, {"BUS"}, {"MEMORY"}, {"UTIL", Align::Right}, {"TEMP", Align::Right},
              {"POWER", Align::Right}, {"SM CLK", Align::Right}, {"P"}, {"ACTIVITY"}, {"CLOCK EVENTS"}});
  for (std::size_t i = 0; i < snap.devices.size(); ++i) {
    const auto& d = snap.devices[i];
    const Activity a = classes[i];
    if (d.lost) {
      gpus.add_row({{std::to_string(d.id.index)}, {d.id.name.value_or("-")}, {short_bus_id(d.id.pci_bus_id)},
                    {"GPU lost: " + *d.lost, Style::Bad}, {""}, {""}, {""}, {""}, {""}, {"fault", Style::Bad}, {""}});
      continue;
    }
    gpus.add_row({{std::to_string(d.id.index)},
                  {d.id.name.value_or("-")},
                  {short_bus_id(d.id.pci_bus_id)},
                  {memory_cell(d)},
                  {or_dash(d.sample.util_gpu_pct, " %")},
                  {or_dash(d.sample.temp_c, " C"),
                   d.sample.temp_c && d.id.temp_slowdown_c && *d.sample.temp_c + 5 >= *d.id.temp_slowdown_c ? Style::Bad
                                                                                                           : Style::Plain},
                  {power_cell(d)},
                  {or_dash(d.sample.clock_sm_mhz, " MHz")},
                  {d.sample.pstate ? fmt::format("P{}", *d.sample.pstate) : dash()},
                  {activity_cell(v, i), activity_style(a)},
                  {events_cell(d), gpu::harmful_clock_events(d.sample.clock_event_reasons.value_or(0)) ? Style::Bad
                                                                                                      : Style::Plain}});
    add_mig_rows(gpus, d, i < mig_classes.size() ? mig_classes[i] : std::vector<gpu::MigActivity>{});
  }
  gpus.print(out, color);
  for (const auto& d : snap.devices) {
    for (const auto& e : d.errors) fmt::print(out, "  GPU {}: {} could not be read: {}\n", d.id.index, e.what, e.message);
  }
}

// One row per process on each GPU, or a line saying there are none.
void print_processes(std::FILE* out, const gpu::Snapshot& snap, bool color) {
  Table procs({{"GPU", Align::Right}, {"PID", Align::Right}, {"USER"}, {"MEMORY", Align::Right}, {"SM", Align::Right},
               {"AGE", Align::Right}, {"CONTAINER/JOB"}, {"COMMAND"}});
  const long long now_s = snap.timestamp_unix_ms / 1000;
  std::size_t count = 0;
  for (const auto& d : snap.devices) {
    for (const auto& p : d.processes) {
      ++count;
      const auto& h = p.host;
      const bool visible = h.visibility == host::PidVisibility::Visible;
      // NVML reports host PIDs: a process of another container has no /proc entry here.
      std::string command = visible ? h.command_line.value_or(h.name.value_or("-"))
                                    : "(PID not visible here: a process of another container or PID namespace)";
      if (command.empty()) command = h.name.value_or("-");
      procs.add_row({{p.mig && *p.mig < d.mig.size() ? fmt::format("{}:{}", d.id.index, d.mig[*p.mig].index)
                                                   : std::to_string(d.id.index)},
                     {std::to_string(p.pid)},
                     {h.user.value_or("-")},
                     {p.used_mem_bytes ? util::format_bytes(*p.used_mem_bytes) : dash()},
                     {or_dash(p.sm_util_pct, " %")},
                     {h.start_time_unix ? util::format_age(now_s - *h.start_time_unix) : dash()},
                     {container_cell(h)},
                     {command, visible ? Style::Plain : Style::Dim}});
    }
  }
  fmt::print(out, "\n");
  if (count == 0) {
    fmt::print(out, "No processes on any GPU.\n");
  } else {
    procs.print(out, color);
  }
}

void print_verdicts(std::FILE* out, const StatusView& view, bool color) {
  const auto found = detail::status_verdicts(view);
  if (!found.empty()) fmt::print(out, "\n");
  for (const auto& v : found) {
    const Style style = v.severity == diagnose::Severity::Critical  ? Style::Bad
                        : v.severity == diagnose::Severity::Warning ? Style::Warn
                                                                    : Style::Dim;
    fmt::print(out, "{}\n", styled(fmt::format("{} {}", v.severity == diagnose::Severity::Info ? "-" : "!", util::terminal_text(v.text)), style, color));
  }
}

}  // namespace

void print_status(std::FILE* out, const StatusView& v, bool color) {
  print_header(out, v.snapshot, v.agent_age_ms);
  if (v.snapshot.devices.empty()) {
    fmt::print(out, "No NVIDIA GPU is visible (the driver loaded, but NVML reports 0 devices).\n");
    return;
  }
  print_gpus(out, v, color);
  print_processes(out, v.snapshot, color);
  print_verdicts(out, v, color);
}

void print_status(std::FILE* out, const gpu::Snapshot& snap, const std::vector<Activity>& classes, bool color,
                  const MigClasses& mig_classes) {
  StatusView v;
  v.snapshot = snap;
  v.classes = classes;
  v.mig_classes = mig_classes;
  print_status(out, v, color);
}

StatusView view_of(gpu::Snapshot snapshot, const gpu::ActivityThresholds& thresholds) {
  StatusView v;
  v.classes = classify_all(snapshot, thresholds);
  v.mig_classes = classify_mig_all(snapshot, thresholds);
  v.snapshot = std::move(snapshot);
  return v;
}

std::optional<std::string> detail::env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

void print_cuda_visibility(std::FILE* out, const gpu::Snapshot& snap, bool color) {
  const auto visible = detail::env("CUDA_VISIBLE_DEVICES");
  if (!visible) return;
  const auto order = detail::env("CUDA_DEVICE_ORDER");
  const gpu::CudaView view = gpu::cuda_view(snap.devices, visible, order);
  std::string mapping;
  for (std::size_t k = 0; k < view.gpu_of_cuda.size(); ++k) {
    std::string device = std::to_string(view.gpu_of_cuda[k]);
    if (k < view.mig_of_cuda.size() && view.mig_of_cuda[k]) {
      // The MIG device as status lists it: GPU:index under its GPU.
      for (const auto& d : snap.devices) {
        if (d.id.index == view.gpu_of_cuda[k] && *view.mig_of_cuda[k] < d.mig.size()) {
          device = fmt::format("{}:{} (MIG {})", d.id.index, d.mig[*view.mig_of_cuda[k]].index,
                               util::terminal_text(d.mig[*view.mig_of_cuda[k]].profile.value_or("?")));
        }
      }
    }
    mapping += fmt::format("{}cuda:{} = GPU {}", k == 0 ? "" : ", ", k, device);
  }
  // The variable comes from whatever environment this shell inherited: shown, never obeyed.
  fmt::print(out, "CUDA_VISIBLE_DEVICES={}{}: a CUDA program started here sees {}\n", util::terminal_text(*visible),
             view.pci_bus_order ? " (PCI_BUS_ID order)" : "",
             mapping.empty() ? "no GPU" : mapping);
  if (view.problem) fmt::print(out, "{}\n", styled("! " + util::terminal_text(*view.problem), Style::Warn, color));
}

MigClasses classify_mig_all(const gpu::Snapshot& snap, const gpu::ActivityThresholds& thresholds) {
  MigClasses out;
  for (const auto& d : snap.devices) {
    auto& classes = out.emplace_back();
    for (std::size_t k = 0; k < d.mig.size(); ++k) {
      classes.push_back(gpu::classify_mig(d, k, thresholds, snap.timestamp_unix_ms / 1000));
    }
  }
  return out;
}

std::vector<Activity> classify_all(const gpu::Snapshot& snap, const gpu::ActivityThresholds& thresholds) {
  std::vector<Activity> classes;
  for (const auto& d : snap.devices) classes.push_back(gpu::classify(d, thresholds, snap.timestamp_unix_ms / 1000));
  return classes;
}

namespace detail {

nlohmann::json status_json(const gpu::Snapshot& snap, const std::vector<Activity>& classes,
                           const std::optional<std::string>& cuda_visible, const std::optional<std::string>& cuda_order,
                           const MigClasses& mig_classes) {
  StatusView v;
  v.snapshot = snap;
  v.classes = classes;
  v.mig_classes = mig_classes;
  return status_json(v, cuda_visible, cuda_order);
}

nlohmann::json status_json(const StatusView& view, const std::optional<std::string>& cuda_visible,
                           const std::optional<std::string>& cuda_order) {
  const gpu::Snapshot& snap = view.snapshot;
  const std::vector<Activity>& classes = view.classes;
  const MigClasses& mig_classes = view.mig_classes;
  const auto or_null = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json j;
  j["timestamp_unix_ms"] = snap.timestamp_unix_ms;
  j["source"] = view.agent_age_ms ? "agent" : "nvml";
  j["agent_sample_age_ms"] = or_null(view.agent_age_ms);
  j["driver_version"] = or_null(snap.driver_version);
  j["nvml_version"] = or_null(snap.nvml_version);
  j["cuda_driver_version"] = or_null(snap.cuda_driver_version);
  j["gpus"] = nlohmann::json::array();
  for (std::size_t i = 0; i < snap.devices.size(); ++i) {
    auto g = to_json(snap.devices[i], classes[i], i < mig_classes.size() ? mig_classes[i] : std::vector<gpu::MigActivity>{});
    // Measured over time by the agent; null where the GPU was looked at once.
    g["activity_since_unix_ms"] = i < view.class_since_unix_ms.size() ? or_null(view.class_since_unix_ms[i]) : nullptr;
    g["held_idle_since_unix_ms"] =
        i < view.held_idle_since_unix_ms.size() ? or_null(view.held_idle_since_unix_ms[i]) : nullptr;
    g["lease"] = i < view.leases.size() && !view.leases[i].label.empty() ? nlohmann::json(view.leases[i].label)
                                                                         : nlohmann::json(nullptr);
    g["backfill"] = nlohmann::json::array();  // as /api/v1/gpus: empty when none (or read directly)
    if (i < view.backfill.size()) {
      for (const auto& b : view.backfill[i]) g["backfill"].push_back(diagnose::backfill_json(b));
    }
    for (std::size_t k = 0; k < g["mig"].size(); ++k) {
      const bool leased = i < view.mig_leases.size() && k < view.mig_leases[i].size() && !view.mig_leases[i][k].label.empty();
      g["mig"][k]["lease"] = leased ? nlohmann::json(view.mig_leases[i][k].label) : nlohmann::json(nullptr);
    }
    j["gpus"].push_back(std::move(g));
  }
  if (cuda_visible) {
    const auto cuda = gpu::cuda_view(snap.devices, cuda_visible, cuda_order);
    nlohmann::json mig_of_cuda = nlohmann::json::array();  // the MIG device of each cuda:k, or null
    for (const auto& m : cuda.mig_of_cuda) mig_of_cuda.push_back(or_null(m));
    j["cuda_visible_devices"] = {{"value", *cuda_visible},
                                 {"pci_bus_order", cuda.pci_bus_order},
                                 {"gpu_of_cuda", cuda.gpu_of_cuda},
                                 {"mig_of_cuda", mig_of_cuda},
                                 {"problem", or_null(cuda.problem)}};
  } else {
    j["cuda_visible_devices"] = nullptr;
  }
  j["verdicts"] = nlohmann::json::array();
  for (const auto& v : status_verdicts(view)) {
    j["verdicts"].push_back({{"severity", diagnose::to_string(v.severity)}, {"code", v.code}, {"text", v.text}});
  }
  return j;
}

std::vector<diagnose::Verdict> status_verdicts(const StatusView& view) {
  auto found = diagnose::verdicts(view.snapshot, view.classes, view.held_idle_since_unix_ms, view.leases);
  for (auto& v : diagnose::lease_and_backfill_verdicts(view.snapshot, view.mig_classes, view.mig_leases, view.backfill)) {
    found.push_back(std::move(v));
  }
  return found;
}

}  // namespace detail

bool resolve_thresholds(const GlobalOptions& global, StatusOptions& options) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return false;
  options.thresholds = loaded->config.activity;
  if (options.holding_after_s) options.thresholds.holding_after_s = *options.holding_after_s;
  // The agent classes by its configuration: another --holding-after is a look of one's own.
  options.agent_socket = options.direct || options.holding_after_s
                             ? std::string()
                             : sched::socket_path(loaded->config.scheduler.socket);
  options.leases = {sched::lock_dir(loaded->config.scheduler_lock_dir), loaded->config.scheduler.max_hold_ms};
  return true;
}

int run_status(const GlobalOptions& global, StatusOptions options) {
  if (!resolve_thresholds(global, options)) return kExitUsage;
  StatusSource source(global, options.thresholds, options.agent_socket, options.leases,
                      global.json ? gpu::ValueGroups::all() : kTableValues);
  const auto view = source.read();
  if (!view) return kExitCouldNotLook;
  if (global.json) {
    fmt::print("{}\n", util::json_text(detail::status_json(*view, detail::env("CUDA_VISIBLE_DEVICES"), detail::env("CUDA_DEVICE_ORDER")), 2));
  } else {
    const bool color = use_color(global, stdout);
    print_status(stdout, *view, color);
    print_cuda_visibility(stdout, view->snapshot, color);
  }
  return kExitOk;
}

void add_status_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand("status", "Show every GPU, its processes and one verdict per problem (the default)");
  // Owned by the callback: CLI11 keeps the subcommand (and its option bindings) for the whole parse.
  auto options = std::make_shared<StatusOptions>();
  auto holding = std::make_shared<std::string>();
  cmd->add_option("--holding-after", *holding,
                  "How long processes must hold memory at 0 % before the GPU counts as holding (default 10m)")
      ->check([](const std::string& text) {
        return util::parse_duration_s(text) ? std::string() : "not a duration (examples: 90s, 10m, 2h)";
      });
  cmd->add_flag("--direct", options->direct,
                 "Read NVML here even when an agent runs (by default its live view is shown: classes measured "
                 "over time, no NVML start-up)");
  cmd->callback([&global, &exit_code, options, holding] {
    if (!holding->empty()) options->holding_after_s = *util::parse_duration_s(*holding);
    exit_code = run_status(global, *options);
  });
}

}  // namespace tarmac::cli
