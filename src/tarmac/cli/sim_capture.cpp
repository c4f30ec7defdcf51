#include "tarmac/cli/sim_capture.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <map>

#include "tarmac/cli/app.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/process.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

namespace {

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\u{:04X}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// "0-3,8,10-11": the simulator's CPU list.
std::string cpu_list(std::vector<unsigned> cpus) {
  std::sort(cpus.begin(), cpus.end());
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + (i == j ? std::to_string(cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]));
    i = j + 1;
  }
  return out;
}

// The simulator's names for NVML's clock-event bits (docs/simulator.md, `throttle_reasons`).
std::string reasons(std::uint64_t mask) {
  static constexpr std::pair<const char*, std::uint64_t> kNames[] = {
      {"gpu_idle", 0x1},   {"applications_clocks", 0x2}, {"sw_power_cap", 0x4},   {"hw_slowdown", 0x8},
      {"sync_boost", 0x10}, {"sw_thermal", 0x20},        {"hw_thermal", 0x40},    {"hw_power_brake", 0x80},
      {"display_clock", 0x100}};
  std::string out;
  for (const auto& [name, bit] : kNames) {
    if ((mask & bit) != 0) out += fmt::format("{}\"{}\"", out.empty() ? "" : ", ", name);
  }
  return "[" + out + "]";
}

class Writer {
 public:
  template <class T>
  void key(const char* name, const std::optional<T>& v) {
    if (v) line(name, *v);
  }
  void line(const char* name, const std::string& v) { out_ += fmt::format("{} = {}\n", name, toml_string(v)); }
  void line(const char* name, const char* v) { line(name, std::string(v)); }
  void line(const char* name, bool v) { out_ += fmt::format("{} = {}\n", name, v ? "true" : "false"); }
  template <class T>
  void line(const char* name, T v) {
    out_ += fmt::format("{} = {}\n", name, v);
  }
  void raw(const std::string& text) { out_ += text; }
  [[nodiscard]] std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::optional<std::uint64_t> mib(const std::optional<std::uint64_t>& bytes) {
  return bytes ? std::optional<std::uint64_t>(*bytes / util::kMiB) : std::nullopt;
}

std::optional<double> watts(const std::optional<unsigned>& mw) {
  return mw ? std::optional<double>(*mw / 1000.0) : std::nullopt;
}

void write_gpu(Writer& w, const gpu::Device& d, unsigned nvlinks) {
  const auto& id = d.id;
  w.raw("\n[[gpu]]\n");
  w.key("name", id.name);
  if (id.architecture) {
    const std::string arch = lower(*id.architecture);
    w.line("architecture", arch.substr(0, arch.find(' ')));  // "Ada Lovelace" -> "ada"
  }
  w.key("uuid", id.uuid);
  w.key("pci_bus_id", id.pci_bus_id);
  w.key("memory_mib", mib(id.mem_total_bytes));
  if (d.sample.mem_reserved_bytes && *d.sample.mem_reserved_bytes % (1ULL << 20) != 0) {
    w.key("memory_reserved_bytes", d.sample.mem_reserved_bytes);  // a real GPU's, as it is
  } else {
    w.key("memory_reserved_mib", mib(d.sample.mem_reserved_bytes));
  }
  // Memory used besides the processes listed: contexts, the driver's own.
  if (d.sample.mem_used_bytes) {
    std::uint64_t listed = 0;
    for (const auto& p : d.processes) listed += p.used_mem_bytes.value_or(0);
    const std::uint64_t used = *d.sample.mem_used_bytes;
    // Within what the total (rounded down) leaves beside the reserve (rounded up): the parser's check.
    const std::uint64_t total_mib = id.mem_total_bytes.value_or(0) / util::kMiB;
    const std::uint64_t reserved_mib = (d.sample.mem_reserved_bytes.value_or(0) + util::kMiB - 1) / util::kMiB;
    const std::uint64_t room = total_mib > reserved_mib ? total_mib - reserved_mib : 0;
    w.line("memory_overhead_mib", std::min<std::uint64_t>(used > listed ? (used - listed) / util::kMiB : 0, room));
  }
  w.key("serial", id.serial);
  w.key("vbios_version", id.vbios_version);
  w.key("board_part_number", id.board_part_number);
  if (id.pci_device_id) w.raw(fmt::format("pci_device_id = 0x{:08X}\n", *id.pci_device_id));
  if (id.pci_subsystem_id) w.raw(fmt::format("pci_subsystem_id = 0x{:08X}\n", *id.pci_subsystem_id));
  w.key("minor_number", id.minor_number);
  w.key("compute_capability", id.cuda_capability);
  if (id.brand && *id.brand != "Unknown" && *id.brand != "NVS") {
    std::string brand = lower(*id.brand);
    std::replace(brand.begin(), brand.end(), ' ', '_');
    w.line("brand", brand);
  }
  w.key("bar1_mib", mib(d.sample.bar1_total_bytes));
  if (d.modes.power_limit_mw) {
    w.key("power_limit_w", watts(d.modes.power_limit_mw));
    w.key("power_default_limit_w", watts(id.power_default_limit_mw));
    w.key("power_min_w", watts(id.power_min_limit_mw));
    w.key("power_max_w", watts(id.power_max_limit_mw));
  }
  if (id.clock_graphics_max_mhz && id.clock_sm_max_mhz && id.clock_mem_max_mhz && id.clock_video_max_mhz) {
    w.raw(fmt::format("max_clocks_mhz = {{ graphics = {}, sm = {}, mem = {}, video = {} }}\n", *id.clock_graphics_max_mhz,
                      *id.clock_sm_max_mhz, *id.clock_mem_max_mhz, *id.clock_video_max_mhz));
  }
  w.key("temp_shutdown_c", id.temp_shutdown_c);
  w.key("temp_slowdown_c", id.temp_slowdown_c);
  w.key("temp_gpu_max_c", id.temp_gpu_max_c);
  w.key("temp_mem_max_c", id.temp_mem_max_c);
  if (id.fan_count && *id.fan_count > 0) w.line("fans", *id.fan_count);
  w.key("pcie_max_gen", id.pcie_gen_max);
  w.key("pcie_max_width", id.pcie_width_max);
  w.key("pcie_gen", d.sample.pcie_gen);
  w.key("pcie_width", d.sample.pcie_width);
  w.key("numa_node", id.numa_node);
  if (!id.cpu_affinity.empty()) w.line("cpus", cpu_list(id.cpu_affinity));
  w.key("ecc", d.modes.ecc_mode_current);
  const auto& s = d.sample;
  if (s.ecc_corrected_volatile || s.ecc_uncorrected_volatile || s.ecc_corrected_aggregate || s.ecc_uncorrected_aggregate) {
    w.raw(fmt::format("ecc_errors = {{ corrected_volatile = {}, uncorrected_volatile = {}, corrected_aggregate = {}, "
                      "uncorrected_aggregate = {} }}\n",
                      s.ecc_corrected_volatile.value_or(0), s.ecc_uncorrected_volatile.value_or(0),
                      s.ecc_corrected_aggregate.value_or(0), s.ecc_uncorrected_aggregate.value_or(0)));
  }
  if (s.remapped_rows_correctable) {
    w.raw(fmt::format("remapped_rows = {{ correctable = {}, uncorrectable = {}, pending = {}, failure = {} }}\n",
                      *s.remapped_rows_correctable, s.remapped_rows_uncorrectable.value_or(0),
                      s.remapped_rows_pending.value_or(false), s.remapped_rows_failure.value_or(false)));
  }
  w.key("persistence_mode", d.modes.persistence_mode);
  w.key("display_mode", d.modes.display_mode);
  w.key("display_active", d.modes.display_active);
  if (d.modes.compute_mode && *d.modes.compute_mode != "Unknown") w.line("compute_mode", lower(*d.modes.compute_mode));
  w.key("mig_mode", d.modes.mig_mode_current);
  if (d.modes.mig_mode_current == true && !d.mig.empty()) {
    std::string profiles;
    for (const auto& m : d.mig) profiles += fmt::format("{}{}", profiles.empty() ? "" : ", ", toml_string(m.profile.value_or("?")));
    w.raw("mig = [" + profiles + "]\n");
  }
  if (id.supported_clock_event_reasons) {
    w.raw("supported_throttle_reasons = " + reasons(*id.supported_clock_event_reasons) + "\n");
  }
  if (nvlinks > 0) w.line("nvlink_links", nvlinks);
}

// The NVLinks of the GPU at `i` to its peers, as the topology counted them.
unsigned nvlinks_of(const gpu::Snapshot& snap, std::size_t i) {
  if (!snap.topology || i >= snap.topology->nvlink_count.size()) return 0;
  unsigned n = 0;
  for (std::size_t j = 0; j < snap.topology->nvlink_count[i].size(); ++j) {
    if (j != i && j < snap.topology->links[i].size() && snap.topology->links[i][j] == gpu::Link::NvLink) {
      n += snap.topology->nvlink_count[i][j];
    }
  }
  return n;
}

// What the GPU reported when captured, held for ever: one timeline segment.
void write_timeline(Writer& w, const gpu::Device& d) {
  const auto& s = d.sample;
  w.raw(fmt::format("\n[[timeline]]\ngpu = {}\n", d.id.index));
  w.key("util_gpu", s.util_gpu_pct);
  w.key("util_mem", s.util_mem_pct);
  w.key("temp_c", s.temp_c);
  w.key("power_w", watts(s.power_mw));
  if (s.clock_graphics_mhz || s.clock_sm_mhz || s.clock_mem_mhz || s.clock_video_mhz) {
    std::string clocks;
    const auto add = [&](const char* name, const std::optional<unsigned>& v) {
      if (v) clocks += fmt::format("{}{} = {}", clocks.empty() ? "" : ", ", name, *v);
    };
    add("graphics", s.clock_graphics_mhz);
    add("sm", s.clock_sm_mhz);
    add("mem", s.clock_mem_mhz);
    add("video", s.clock_video_mhz);
    w.raw("clocks_mhz = { " + clocks + " }\n");
  }
  w.key("pstate", s.pstate);
  if (s.clock_event_reasons) w.raw("throttle_reasons = " + reasons(*s.clock_event_reasons) + "\n");
  w.key("fan_pct", s.fan_pct);
  w.key("encoder_util", s.util_encoder_pct);
  w.key("decoder_util", s.util_decoder_pct);
}

void write_process(Writer& w, const gpu::Device& d, const gpu::GpuProcess& p, bool keep_commands) {
  w.raw(fmt::format("\n[[process]]\ngpu = {}\n", d.id.index));
  const std::string name = p.host.name.value_or("process");
  w.line("name", name.empty() ? std::string("process") : name);
  if (keep_commands && p.host.command_line && !p.host.command_line->empty()) {
    w.line("cmdline", *p.host.command_line);
  } else {
    // Arguments hold paths and tokens: the program alone, unless asked.
    const std::string program = host::program_name(p.host.command_line);
    w.line("cmdline", fmt::format("{} [args removed]", program.empty() ? name : program));
  }
  w.line("memory_mib", p.used_mem_bytes.value_or(0) / util::kMiB);
  w.key("sm_util", p.sm_util_pct);
  w.key("mem_util", p.mem_util_pct);
  if (p.type == gpu::ProcessType::Graphics) w.line("type", "graphics");
  if (p.mig && *p.mig < d.mig.size()) w.line("mig_device", d.mig[*p.mig].index);
}

void write_topology(Writer& w, const gpu::Snapshot& snap) {
  if (!snap.topology) return;
  std::string links;
  const auto& t = *snap.topology;
  for (std::size_t i = 0; i < t.links.size(); ++i) {
    for (std::size_t j = i + 1; j < t.links[i].size(); ++j) {
      std::string word;
      switch (t.links[i][j]) {
        case gpu::Link::NvLink:
          word = fmt::format("NV{}", i < t.nvlink_count.size() && j < t.nvlink_count[i].size() ? t.nvlink_count[i][j] : 1);
          break;
        case gpu::Link::Pix: word = "PIX"; break;
        case gpu::Link::Pxb: word = "PXB"; break;
        case gpu::Link::Phb: word = "PHB"; break;
        default: break;  // NODE and SYS follow from the NUMA nodes
      }
      if (!word.empty()) links += fmt::format("{}\"{}-{}\" = \"{}\"", links.empty() ? "" : ", ", i, j, word);
    }
  }
  if (!links.empty()) w.raw("\n[topology]\nlinks = { " + links + " }\n");
}

}  // namespace

namespace detail {

std::string scenario_of(const gpu::Snapshot& snap, bool keep_commands, const std::string& host) {
  Writer w;
  w.raw(fmt::format("# Captured by `tarmac sim capture` on {} (tarmac {}). Replay: tarmac sim --scenario THIS_FILE -- tarmac status\n"
                    "# Values are those of the moment of capture, held for ever; command lines {}.\n",
                    host, TARMAC_VERSION, keep_commands ? "kept (--keep-commands)" : "reduced to their programs"));
  w.line("name", "captured-" + host);
  w.line("description", fmt::format("{} GPUs captured from {}", snap.devices.size(), host));
  w.raw("\n[driver]\n");
  w.key("version", snap.driver_version);
  w.key("nvml_version", snap.nvml_version);
  w.key("cuda_version", snap.cuda_driver_version);
  for (std::size_t i = 0; i < snap.devices.size(); ++i) {
    if (!snap.devices[i].lost) write_gpu(w, snap.devices[i], nvlinks_of(snap, i));
  }
  for (const auto& d : snap.devices) {
    if (!d.lost) write_timeline(w, d);
  }
  for (const auto& d : snap.devices) {
    if (d.lost) continue;
    for (const auto& p : d.processes) write_process(w, d, p, keep_commands);
  }
  write_topology(w, snap);
  return w.take();
}

}  // namespace detail

void add_sim_capture_command(CLI::App& sim, const GlobalOptions& global, int& exit_code) {
  auto* cmd = sim.add_subcommand("capture", "Write this machine's GPUs as a simulator scenario (for a bug report, or "
                                            "to replay with sim --scenario FILE)");
  auto file = std::make_shared<std::string>();
  auto keep = std::make_shared<bool>(false);
  cmd->add_option("-o,--output", *file, "Write the scenario to FILE (default: stdout)");
  cmd->add_flag("--keep-commands", *keep, "Keep processes' whole command lines (default: their programs only)");
  cmd->callback([&global, &exit_code, file, keep] {
    auto backend = open_backend(global);
    if (!backend.ok()) {
      exit_code = kExitCouldNotLook;
      return;
    }
    gpu::SnapshotOptions options;
    options.topology = true;
    auto snap = (*backend)->snapshot(options);
    if (!snap.ok()) {
      print_error(snap.error());
      exit_code = kExitCouldNotLook;
      return;
    }
    const std::string text = detail::scenario_of(*snap, *keep, util::host_name());
    if (file->empty()) {
      fmt::print("{}", text);
      exit_code = kExitOk;
      return;
    }
    std::FILE* out = std::fopen(file->c_str(), "w");
    bool written = out != nullptr && std::fputs(text.c_str(), out) >= 0;
    if (out != nullptr && std::fclose(out) != 0) written = false;
    if (!written) {
      fmt::print(stderr, "tarmac: cannot write {}: {}\n", util::terminal_text(*file), std::strerror(errno));
      exit_code = kExitUsage;
      return;
    }
    fmt::print(stderr, "wrote {} ({} GPUs): tarmac sim --scenario {} -- tarmac status\n", util::terminal_text(*file),
               snap->devices.size(), util::terminal_text(*file));
    exit_code = kExitOk;
  });
}

}  // namespace tarmac::cli
