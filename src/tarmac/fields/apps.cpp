// The compute-apps field table. nvidia-smi's names, aliases and units are those of its
// --help-query-compute-apps; values are printed with the --query-gpu conventions (value.hpp).
#include "tarmac/fields/apps.hpp"

#include <fmt/format.h>
#include <optional>
#include <string>

#include "tarmac/fields/readers.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::fields {

namespace {

using namespace detail;
using C = const ReadContext&;
using G = gpu::ValueGroup;

// A process whose host side tarmac cannot see (another PID namespace, or it just exited): nvidia-smi
// shows "[Not Found]" for its name, and so do tarmac's host fields.
bool hidden(C c) { return c.process->host.visibility != host::PidVisibility::Visible; }

Value not_found() { return Value::missing(Marker::Error, std::string(kProcessNotFound)); }

// A host-side text: "[Not Found]" for a hidden process, "[N/A]" when /proc does not say.
Value host_text(C c, const std::optional<std::string>& text) {
  if (hidden(c)) return not_found();
  return text ? Value::text(*text) : Value::missing(Marker::NotAvailable);
}

// The executable as it was started (argv[0], a path when started by one), as NVML's
// nvmlSystemGetProcessName answers; the kernel's comm when the command line is empty.
Value process_name(C c) {
  if (hidden(c)) return not_found();
  const auto& h = c.process->host;
  if (h.command_line && !h.command_line->empty()) {
    const auto& line = *h.command_line;
    return Value::text(line.substr(0, line.find(' ')));
  }
  return h.name ? Value::text(*h.name) : Value::missing(Marker::NotAvailable);
}

// "docker:<id>", "kubernetes:<id>", or "pod:<uid>" for a pod whose container id is unknown;
// "[N/A]" for a process outside any container.
Value container(C c) {
  if (hidden(c)) return not_found();
  const auto& ref = c.process->host.container;
  if (!ref) return Value::missing(Marker::NotAvailable);
  if (ref->id.empty() && ref->pod_uid) return Value::text(fmt::format("pod:{}", *ref->pod_uid));
  return Value::text(fmt::format("{}:{}", ref->runtime, ref->id));
}

Value start_time(C c) {
  if (hidden(c)) return not_found();
  const auto& t = c.process->host.start_time_unix;
  return t ? Value::text(format_timestamp(*t * 1000).substr(0, 19)) : Value::missing(Marker::NotAvailable);
}

std::vector<FieldSpec> build_app_table() {
  const Scope S = Scope::System;
  const Scope D = Scope::Device;
  return {
      {"timestamp", {}, "", S, "", {}, "When the query was made, \"YYYY/MM/DD HH:MM:SS.msec\"",
       [](C c) { return Value::text(format_timestamp(c.snapshot.timestamp_unix_ms)); }},
      {"gpu_name", {}, "", D, "name", {G::Name}, "Product name of the GPU the process runs on",
       [](C c) { return text_or(c.device.id.name); }},
      {"gpu_bus_id", {}, "", D, "pci", {G::Pci}, "PCI bus id of the GPU, \"domain:bus:device.function\" in hex",
       [](C c) { return text_or(c.device.id.pci_bus_id); }},
      {"gpu_serial", {}, "", D, "serial", {G::Serial}, "Board serial number of the GPU",
       [](C c) { return text_or(c.device.id.serial); }},
      {"gpu_uuid", {}, "", D, "uuid", {G::Uuid}, "Globally unique identifier of the GPU",
       [](C c) { return text_or(c.device.id.uuid); }},
      {"pid", {}, "", S, "", {}, "Process ID of the compute application (a host PID)",
       [](C c) { return Value::integer(c.process->pid); }},
      {"process_name", {"name"}, "", S, "", {G::ProcessHost},
       "Process name: the executable as started (argv[0])", process_name},
      {"used_gpu_memory", {"used_memory"}, "MiB", S, "", {}, "GPU memory used by the process's context",
       [](C c) { return mib_or(c.process->used_mem_bytes, Marker::NotAvailable); }},
      // tarmac's own fields: what /proc says about the process.
      {"user", {}, "", S, "", {G::ProcessHost}, "tarmac: user owning the process",
       [](C c) { return host_text(c, c.process->host.user); }},
      {"container", {},
       "", S, "", {G::ProcessHost}, "tarmac: container of the process, \"runtime:id\" (or \"pod:uid\")", container},
      {"job", {}, "", S, "", {G::ProcessHost}, "tarmac: Slurm job id of the process",
       [](C c) { return host_text(c, c.process->host.slurm_job_id); }},
      {"command", {}, "", S, "", {G::ProcessHost}, "tarmac: full command line of the process",
       [](C c) { return host_text(c, c.process->host.command_line); }},
      {"sm_util", {},
       "%", S, "", {G::ProcessUtilization}, "tarmac: percent of time the process ran kernels, where NVML reports it",
       [](C c) { return integer_or(c.process->sm_util_pct, Marker::NotAvailable); }},
      {"start_time", {},
       "", S, "", {G::ProcessHost}, "tarmac: when the process started, \"YYYY/MM/DD HH:MM:SS\"", start_time},
  };
}

}  // namespace

std::span<const FieldSpec> all_app_fields() {
  static const std::vector<FieldSpec> table = build_app_table();
  return table;
}

const FieldSpec* find_app_field(std::string_view name) {
  for (const auto& f : all_app_fields()) {
    if (f.name == name) return &f;
    for (const auto& a : f.aliases) {
      if (a == name) return &f;
    }
  }
  return nullptr;
}

Result<std::vector<const FieldSpec*>> parse_app_field_list(std::string_view list) {
  std::vector<const FieldSpec*> out;
  for (const auto& name : util::split(list, ',')) {
    if (name.empty()) continue;
    const FieldSpec* f = find_app_field(name);
    if (f == nullptr) return make_error(Error::Code::Invalid, name);
    out.push_back(f);
  }
  return out;
}

std::vector<AppRef> compute_apps(const gpu::Snapshot& snapshot, std::span<const std::size_t> selected) {
  std::vector<AppRef> out;
  for (const std::size_t d : selected) {
    if (d >= snapshot.devices.size()) continue;
    const auto& procs = snapshot.devices[d].processes;
    for (std::size_t p = 0; p < procs.size(); ++p) {
      if (procs[p].type != gpu::ProcessType::Graphics) out.push_back({d, p});
    }
  }
  return out;
}

}  // namespace tarmac::fields
