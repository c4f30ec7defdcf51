// [gpu_defaults] and [[gpu]]: the static description of each simulated GPU.
#include <array>
#include <cctype>
#include <cmath>
#include <fmt/format.h>

#include "pci.hpp"
#include "scenario_parser_internal.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sim::detail {

namespace {

struct ArchInfo {
  const char* name;
  unsigned nvml_arch;
  int cc_major, cc_minor;
  unsigned nvlink_version;
};
constexpr std::array<ArchInfo, 9> kArchs{{
    {"kepler", 2, 3, 5, 0},  {"maxwell", 3, 5, 2, 0}, {"pascal", 4, 6, 0, 1},
    {"volta", 5, 7, 0, 2},   {"turing", 6, 7, 5, 2},  {"ampere", 7, 8, 0, 3},
    {"ada", 8, 8, 9, 0},     {"hopper", 9, 9, 0, 4},  {"blackwell", 10, 10, 0, 5},
}};

struct NamedValue {
  const char* name;
  int value;
};
constexpr std::array<NamedValue, 7> kBrands{{{"nvidia", 14}, {"tesla", 2}, {"quadro", 1}, {"geforce", 5},
                                             {"titan", 6}, {"nvidia_rtx", 13}, {"quadro_rtx", 12}}};
constexpr std::array<NamedValue, 4> kComputeModes{
    {{"default", 0}, {"exclusive_thread", 1}, {"prohibited", 2}, {"exclusive_process", 3}}};

constexpr std::array<std::pair<const char*, unsigned long long>, 9> kThrottle{{
    {"gpu_idle", 0x1},
    {"applications_clocks", 0x2},
    {"sw_power_cap", 0x4},
    {"hw_slowdown", 0x8},
    {"sync_boost", 0x10},
    {"sw_thermal", 0x20},
    {"hw_thermal", 0x40},
    {"hw_power_brake", 0x80},
    {"display_clock", 0x100},
}};

bool is_hex(std::string_view s) {
  for (char c : s) {
    if (std::isxdigit(static_cast<unsigned char>(c)) == 0) return false;
  }
  return true;
}

// "GPU-" followed by 8-4-4-4-12 hex digits, as NVML prints UUIDs.
bool valid_uuid(std::string_view uuid) {
  if (!uuid.starts_with("GPU-")) return false;
  const std::vector<std::string> parts = util::split(uuid.substr(4), '-');
  constexpr std::array<std::size_t, 5> kLens{8, 4, 4, 4, 12};
  if (parts.size() != kLens.size()) return false;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].size() != kLens[i] || !is_hex(parts[i])) return false;
  }
  return true;
}

template <std::size_t N>
std::optional<int> named(Fields& f, std::string_view key, const std::array<NamedValue, N>& table) {
  auto v = f.string(key);
  if (!v) return std::nullopt;
  for (const NamedValue& nv : table) {
    if (*v == nv.name) return nv.value;
  }
  std::string known;
  for (const NamedValue& nv : table) known += (known.empty() ? "" : ", ") + std::string(nv.name);
  f.fail_key(key, fmt::format("'{}' is not one of {}", *v, known));
  return std::nullopt;
}

std::optional<unsigned> opt_uint(Fields& f, std::string_view key, long long hi) {
  auto v = f.integer(key, 0, hi);
  if (!v) return std::nullopt;
  return static_cast<unsigned>(*v);
}

// { graphics = 1410, sm = 1410, mem = 1215, video = 1290 }; missing members stay unset.
std::optional<PartialClocks> partial_clocks(Fields& f, std::string_view key) {
  const TomlNode* t = f.table(key);
  if (t == nullptr) return std::nullopt;
  Fields c(*t, f.diag(), fmt::format("{}.{}", f.where(), key));
  PartialClocks out;
  out.graphics = opt_uint(c, "graphics", 10000);
  out.sm = opt_uint(c, "sm", 10000);
  out.mem = opt_uint(c, "mem", 20000);
  out.video = opt_uint(c, "video", 10000);
  c.finish();
  return out;
}

Clocks fill(const PartialClocks& p, const Clocks& fallback) {
  return {p.graphics.value_or(fallback.graphics), p.sm.value_or(fallback.sm), p.mem.value_or(fallback.mem),
          p.video.value_or(fallback.video)};
}

std::optional<std::vector<unsigned>> cpu_list(Fields& f, std::string_view key) {
  const TomlNode* v = f.raw(key);
  if (v == nullptr) return std::nullopt;
  std::vector<unsigned> out;
  if (v->kind == TomlNode::Kind::String) {
    for (const std::string& part : util::split(v->string_value, ',')) {
      const std::string_view item = util::trim(part);
      const std::size_t dash = item.find('-');
      auto lo = util::parse_int(item.substr(0, dash));
      auto hi = dash == std::string_view::npos ? lo : util::parse_int(item.substr(dash + 1));
      if (!lo || !hi || *lo < 0 || *hi < *lo || *hi >= 4096) {
        f.fail_key(key, fmt::format("'{}' is not a CPU list such as \"0-31,64-95\"", v->string_value));
        return std::nullopt;
      }
      for (long long c = *lo; c <= *hi; ++c) out.push_back(static_cast<unsigned>(c));
    }
    return out;
  }
  f.fail_key(key, "expected a CPU list string such as \"0-31,64-95\"");
  return std::nullopt;
}

void parse_health(Fields& f, GpuSpec& g) {
  g.ecc_enabled = f.boolean("ecc");
  if (const TomlNode* t = f.table("ecc_errors")) {
    Fields e(*t, f.diag(), f.where() + ".ecc_errors");
    constexpr long long kMax = 1LL << 48;
    g.ecc.corrected_volatile = e.integer("corrected_volatile", 0, kMax).value_or(0);
    g.ecc.uncorrected_volatile = e.integer("uncorrected_volatile", 0, kMax).value_or(0);
    g.ecc.corrected_aggregate = e.integer("corrected_aggregate", 0, kMax).value_or(0);
    g.ecc.uncorrected_aggregate = e.integer("uncorrected_aggregate", 0, kMax).value_or(0);
    e.finish();
  }
  if (const TomlNode* t = f.table("retired_pages")) {
    Fields r(*t, f.diag(), f.where() + ".retired_pages");
    RetiredPages pages;
    for (auto [key, list] : {std::pair{"single_bit", &pages.single_bit}, std::pair{"double_bit", &pages.double_bit}}) {
      const TomlNode* a = r.raw(key);
      if (a == nullptr) continue;
      if (a->kind != TomlNode::Kind::Array) {
        r.fail_key(key, "expected an array of page addresses");
        continue;
      }
      for (const TomlNode& item : a->array) {
        if (item.kind != TomlNode::Kind::Integer || item.int_value < 0) {
          r.fail_at(&item, fmt::format("{}: expected a page address (a non-negative integer)", key));
          break;
        }
        list->push_back(static_cast<unsigned long long>(item.int_value));
      }
    }
    pages.pending = r.boolean("pending").value_or(false);
    r.finish();
    g.retired_pages = pages;
  }
  if (const TomlNode* t = f.table("remapped_rows")) {
    Fields r(*t, f.diag(), f.where() + ".remapped_rows");
    RemappedRows rows;
    rows.correctable = opt_uint(r, "correctable", 1 << 20).value_or(0);
    rows.uncorrectable = opt_uint(r, "uncorrectable", 1 << 20).value_or(0);
    rows.pending = r.boolean("pending").value_or(false);
    rows.failure = r.boolean("failure").value_or(false);
    r.finish();
    g.remapped_rows = rows;
  }
}

void parse_power_and_clocks(Fields& f, GpuSpec& g) {
  g.power_limit_w = f.number("power_limit_w", 1, 5000);
  const double limit = g.power_limit_w.value_or(0);
  g.power_default_limit_w = f.number("power_default_limit_w", 1, 5000).value_or(limit);
  g.power_min_w = f.number("power_min_w", 1, 5000).value_or(std::round(limit / 4));
  g.power_max_w = f.number("power_max_w", 1, 5000).value_or(limit);
  g.idle_power_w = f.number("idle_power_w", 0, 5000).value_or(std::round(limit * 0.14));
  if (g.power_limit_w && (*g.power_limit_w < g.power_min_w || *g.power_limit_w > g.power_max_w)) {
    f.fail_key("power_limit_w", "must lie between power_min_w and power_max_w");
  }

  if (auto max = partial_clocks(f, "max_clocks_mhz")) {
    if (!max->graphics || !max->sm || !max->mem || !max->video) {
      f.fail_key("max_clocks_mhz", "give all four: graphics, sm, mem, video");
    }
    g.max_clocks = fill(*max, {});
  }
  const Clocks max = g.max_clocks.value_or(Clocks{});
  const Clocks idle_default{std::min(210U, max.graphics), std::min(210U, max.sm), max.mem, std::min(555U, max.video)};
  g.idle_clocks = fill(partial_clocks(f, "idle_clocks_mhz").value_or(PartialClocks{}), idle_default);
  // A GPU boots with its applications clocks at their defaults.
  g.default_app_clocks = fill(partial_clocks(f, "default_app_clocks_mhz").value_or(PartialClocks{}), max);
  g.app_clocks = fill(partial_clocks(f, "app_clocks_mhz").value_or(PartialClocks{}), g.default_app_clocks);
}

// Names and PCI identity; the minor number defaults to the GPU's index.
void parse_identity(Fields& f, GpuSpec& g, std::size_t index) {
  g.name = f.string("name", Presence::Required).value_or("");
  g.uuid = f.string("uuid", Presence::Required).value_or("");
  if (!g.uuid.empty() && !valid_uuid(g.uuid)) {
    f.fail_key("uuid", fmt::format("'{}' is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", g.uuid));
  }
  g.serial = f.string("serial");
  if (auto bus = f.string("pci_bus_id", Presence::Required)) {
    if (auto pci = parse_pci_bus_id(*bus)) {
      g.pci = *pci;
      g.pci_bus_id = format_pci_bus_id(*pci);
    } else {
      f.fail_key("pci_bus_id", fmt::format("'{}' is not a PCI bus id such as \"00000000:07:00.0\"", *bus));
    }
  }
  g.pci_device_id = static_cast<unsigned>(f.integer("pci_device_id", 0, 0xFFFFFFFFLL).value_or(0));
  g.pci_subsystem_id = static_cast<unsigned>(f.integer("pci_subsystem_id", 0, 0xFFFFFFFFLL).value_or(0));
  g.minor_number = opt_uint(f, "minor_number", 255).value_or(static_cast<unsigned>(index));
}

// The architecture (and what it implies: compute capability, NVLink version), the compute
// capability when given, the board.
void parse_architecture_and_board(Fields& f, GpuSpec& g) {
  const ArchInfo* arch = nullptr;
  if (auto name = f.string("architecture", Presence::Required)) {
    for (const ArchInfo& a : kArchs) {
      if (*name == a.name) arch = &a;
    }
    if (arch == nullptr) f.fail_key("architecture", fmt::format("'{}' is not one of kepler, maxwell, pascal, "
                                                                "volta, turing, ampere, ada, hopper, blackwell", *name));
  }
  if (arch != nullptr) {
    g.architecture = arch->nvml_arch;
    g.cc_major = arch->cc_major;
    g.cc_minor = arch->cc_minor;
    g.nvlink_version = arch->nvlink_version;
  }
  if (auto cc = f.string("compute_capability")) {
    const std::vector<std::string> parts = util::split(*cc, '.');
    const long long major = parts.size() == 2 ? util::parse_int(parts[0]).value_or(-1) : -1;
    const long long minor = parts.size() == 2 ? util::parse_int(parts[1]).value_or(-1) : -1;
    if (major < 1 || major > 20 || minor < 0 || minor > 9) {
      f.fail_key("compute_capability", fmt::format("'{}' is not a compute capability such as \"8.0\"", *cc));
    } else {
      g.cc_major = static_cast<int>(major);
      g.cc_minor = static_cast<int>(minor);
    }
  }
  g.multiprocessors = opt_uint(f, "multiprocessors", 1000).value_or(0);
  if (auto b = named(f, "brand", kBrands)) g.brand = *b;
  g.vbios_version = f.string("vbios_version");
  g.board_part_number = f.string("board_part_number");
  g.inforom_version = f.string("inforom_version");
}

// Memory: the total, what the driver reserves and its overhead (within the total), BAR1.
void parse_memory(Fields& f, GpuSpec& g) {
  g.memory_mib = static_cast<unsigned long long>(f.integer("memory_mib", 1, 1LL << 24, Presence::Required).value_or(1));
  g.memory_reserved_mib = static_cast<unsigned long long>(f.integer("memory_reserved_mib", 0, 1LL << 24).value_or(0));
  if (auto bytes = f.integer("memory_reserved_bytes", 0, 1LL << 44)) {
    if (g.memory_reserved_mib != 0) f.fail_key("memory_reserved_bytes", "give memory_reserved_mib or memory_reserved_bytes, not both");
    g.memory_reserved_bytes = static_cast<unsigned long long>(*bytes);
    g.memory_reserved_mib = (*g.memory_reserved_bytes + (1ULL << 20) - 1) >> 20;
  }
  g.memory_overhead_mib = static_cast<unsigned long long>(f.integer("memory_overhead_mib", 0, 1LL << 24).value_or(0));
  if (g.memory_reserved_mib + g.memory_overhead_mib > g.memory_mib) {
    f.fail_key("memory_overhead_mib", "reserved + overhead memory exceed memory_mib");
  }
  if (auto bar1 = f.integer("bar1_mib", 1, 1LL << 24)) g.bar1_mib = static_cast<unsigned long long>(*bar1);
}

// Thermal limits, fans, the PCIe link, NUMA placement.
void parse_thermal_pcie_and_numa(Fields& f, GpuSpec& g) {
  g.temp_shutdown_c = opt_uint(f, "temp_shutdown_c", 150);
  g.temp_slowdown_c = opt_uint(f, "temp_slowdown_c", 150);
  g.temp_gpu_max_c = opt_uint(f, "temp_gpu_max_c", 150);
  g.temp_mem_max_c = opt_uint(f, "temp_mem_max_c", 150);
  g.idle_temp_c = opt_uint(f, "idle_temp_c", 150).value_or(30);

  g.fans = opt_uint(f, "fans", 16).value_or(0);
  g.idle_fan_pct = opt_uint(f, "idle_fan_pct", 100).value_or(g.fans > 0 ? 30 : 0);

  g.pcie_max_gen = opt_uint(f, "pcie_max_gen", 6);
  g.pcie_max_width = opt_uint(f, "pcie_max_width", 32).value_or(g.pcie_max_gen ? 16 : 0);
  g.pcie_gen = opt_uint(f, "pcie_gen", 6).value_or(g.pcie_max_gen.value_or(0));
  g.pcie_width = opt_uint(f, "pcie_width", 32).value_or(g.pcie_max_width);
  g.pcie_gpu_max_gen = opt_uint(f, "pcie_gpu_max_gen", 6).value_or(g.pcie_max_gen.value_or(0));

  g.numa_node = opt_uint(f, "numa_node", 63);
  if (auto cpus = cpu_list(f, "cpus")) g.cpus = *cpus;
}

// Modes, NVLink and the throttle reasons the GPU supports.
void parse_modes(Fields& f, GpuSpec& g) {
  g.persistence_mode = f.boolean("persistence_mode").value_or(true);
  if (auto m = named(f, "compute_mode", kComputeModes)) g.compute_mode = *m;
  g.display_mode = f.boolean("display_mode").value_or(false);
  g.display_active = f.boolean("display_active").value_or(g.display_mode);
  g.mig_mode = f.boolean("mig_mode");
  g.mig_mode_pending = f.boolean("mig_mode_pending");
  if (g.mig_mode_pending && !g.mig_mode) f.fail_key("mig_mode_pending", "needs mig_mode: a GPU without MIG has no pending mode");
  if (auto names = f.words("mig")) {
    const auto profiles = mig_profiles(g.name, g.memory_mib);
    if (!g.mig_mode.value_or(false)) {
      f.fail_key("mig", "MIG instances need mig_mode = true");
    } else if (profiles.empty()) {
      f.fail_key("mig", fmt::format("'{}' has no MIG profiles in the simulator (A100 40GB/80GB, H100 80GB, H200)", g.name));
    } else {
      MigLayoutResult layout = place_mig_instances(profiles, *names, g.uuid);
      if (!layout.error.empty()) f.fail_key("mig", layout.error);
      g.mig = std::move(layout.instances);
    }
  }
  g.nvlink_links = opt_uint(f, "nvlink_links", 18).value_or(0);
  if (auto v = opt_uint(f, "nvlink_version", 10)) g.nvlink_version = *v;
  if (auto mask = throttle_reasons(f, "supported_throttle_reasons")) g.supported_throttle_reasons = *mask;
}

GpuSpec parse_gpu(Fields& f, std::size_t index) {
  GpuSpec g;
  g.line = f.pos().line;
  parse_identity(f, g, index);
  parse_architecture_and_board(f, g);
  parse_memory(f, g);
  parse_power_and_clocks(f, g);
  parse_thermal_pcie_and_numa(f, g);
  parse_health(f, g);
  parse_modes(f, g);
  return g;
}

}  // namespace

std::optional<unsigned long long> throttle_reasons(Fields& f, std::string_view key) {
  const TomlNode* v = f.raw(key);
  if (v == nullptr) return std::nullopt;
  if (v->kind != TomlNode::Kind::Array) {
    f.fail_key(key, "expected an array of reason names such as [\"sw_thermal\", \"hw_slowdown\"]");
    return std::nullopt;
  }
  unsigned long long mask = 0;
  for (const TomlNode& item : v->array) {
    bool found = false;
    for (const auto& [name, bit] : kThrottle) {
      if (item.kind == TomlNode::Kind::String && item.string_value == name) {
        mask |= bit;
        found = true;
      }
    }
    if (!found) {
      f.fail_at(&item, fmt::format("{}: '{}' is not a reason (gpu_idle, applications_clocks, sw_power_cap, "
                                   "hw_slowdown, sync_boost, sw_thermal, hw_thermal, hw_power_brake, display_clock)",
                                   key, item.string_value));
      return std::nullopt;
    }
  }
  return mask;
}

void parse_gpus(const TomlNode& root, Fields& top, Scenario& s, Diag& diag) {
  const TomlNode* defaults = top.table("gpu_defaults");
  std::set<std::string> defaults_used;
  const std::vector<const TomlNode*> tables = table_array(top, "gpu");
  // Without a working driver (init_error) there may be nothing to enumerate.
  if (tables.empty() && !diag.failed() && !s.init_error) {
    diag.fail(root.pos, "scenario: no [[gpu]] tables: a scenario needs at least one GPU");
    return;
  }
  for (std::size_t i = 0; i < tables.size() && !diag.failed(); ++i) {
    Fields f(*tables[i], diag, fmt::format("gpu[{}]", i), defaults, &defaults_used);
    GpuSpec g = parse_gpu(f, i);
    f.finish();
    if (diag.failed()) return;
    // NVML numbers GPUs in PCI bus order; the file lists them that way so that indices in the
    // rest of the file read the same as nvidia-smi's.
    if (!s.gpus.empty() && !(s.gpus.back().pci < g.pci)) {
      f.fail_key("pci_bus_id", fmt::format("{} does not come after {}: list GPUs in PCI bus order", g.pci_bus_id,
                                           s.gpus.back().pci_bus_id));
      return;
    }
    for (const GpuSpec& other : s.gpus) {
      if (other.uuid == g.uuid) f.fail_key("uuid", fmt::format("{} is already used by another GPU", g.uuid));
    }
    s.gpus.push_back(std::move(g));
  }
  if (defaults != nullptr && !diag.failed()) {
    for (std::size_t i = 0; i < defaults->table.size(); ++i) {
      if (defaults_used.count(defaults->table[i].first) == 0) {
        diag.fail(defaults->key_pos[i], fmt::format("gpu_defaults: unknown key '{}'", defaults->table[i].first));
        return;
      }
    }
  }
}

}  // namespace tarmac::sim::detail
