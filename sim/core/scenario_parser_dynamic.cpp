// [[timeline]], [[process]], [[fault]], [[event]] and [topology]: what happens on the GPUs.
#include <algorithm>
#include <cstdint>
#include <fmt/format.h>
#include <limits>

#include "scenario_parser_internal.hpp"
#include "tarmac/nvml/nvml_types.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::sim::detail {

namespace {

namespace nv = tarmac::nvml;

std::optional<unsigned> pct(Fields& f, std::string_view key) {
  auto v = f.integer(key, 0, 100);
  if (!v) return std::nullopt;
  return static_cast<unsigned>(*v);
}

// from/to/every (or start/end/every for processes), checked so that every window is non-empty.
Window parse_window(Fields& f, const char* from_key, const char* to_key) {
  Window w;
  w.from = f.duration(from_key).value_or(0);
  w.to = f.duration(to_key);
  w.every = f.duration("every");
  if (w.every) {
    if (*w.every <= 0) f.fail_key("every", "must be longer than 0s");
    if (!w.to) f.fail_key("every", fmt::format("a repeating window needs '{}' (an offset within the period)", to_key));
    if (w.to && *w.to > *w.every) f.fail_key(to_key, "must lie within the period ('every')");
  }
  if (w.to && *w.to <= w.from) f.fail_key(to_key, fmt::format("must be later than '{}'", from_key));
  return w;
}

SegmentValues parse_values(Fields& f) {
  SegmentValues v;
  v.util_gpu = pct(f, "util_gpu");
  v.util_mem = pct(f, "util_mem");
  if (auto t = f.integer("temp_c", 0, 150)) v.temp_c = static_cast<unsigned>(*t);
  v.power_w = f.number("power_w", 0, 5000);
  v.fan_pct = pct(f, "fan_pct");
  if (auto p = f.integer("pstate", 0, 15)) v.pstate = static_cast<unsigned>(*p);
  v.encoder_util = pct(f, "encoder_util");
  v.decoder_util = pct(f, "decoder_util");
  if (auto x = f.integer("pcie_tx_kbps", 0, 1LL << 31)) v.pcie_tx_kbps = static_cast<unsigned>(*x);
  if (auto x = f.integer("pcie_rx_kbps", 0, 1LL << 31)) v.pcie_rx_kbps = static_cast<unsigned>(*x);
  if (const TomlNode* t = f.table("clocks_mhz")) {
    Fields c(*t, f.diag(), f.where() + ".clocks_mhz");
    auto clock = [&c](const char* key) -> std::optional<unsigned> {
      auto x = c.integer(key, 0, 20000);
      return x ? std::optional<unsigned>(static_cast<unsigned>(*x)) : std::nullopt;
    };
    v.clocks.graphics = clock("graphics");
    v.clocks.sm = clock("sm");
    v.clocks.mem = clock("mem");
    v.clocks.video = clock("video");
    c.finish();
  }
  v.throttle_reasons = throttle_reasons(f, "throttle_reasons");
  v.gpm_sm_util = f.number("gpm_sm_util", 0, 100);
  v.gpm_sm_occupancy = f.number("gpm_sm_occupancy", 0, 100);
  v.gpm_tensor_util = f.number("gpm_tensor_util", 0, 100);
  v.gpm_dram_bw_util = f.number("gpm_dram_bw_util", 0, 100);
  return v;
}

// A TOML value as the text a runtime fault spec would carry.
std::optional<std::string> as_spec_text(const TomlNode& node) {
  switch (node.kind) {
    case TomlNode::Kind::String: return node.string_value;
    case TomlNode::Kind::Integer: return std::to_string(node.int_value);
    case TomlNode::Kind::Bool: return node.bool_value ? "true" : "false";
    default: return std::nullopt;
  }
}

std::optional<Link> parse_link(std::string_view text) {
  Link link;
  if (text.starts_with("NV")) {
    auto n = util::parse_int(text.substr(2));
    if (!n || *n < 1 || *n > 18) return std::nullopt;
    link.nvlinks = static_cast<unsigned>(*n);
    link.level = -1;  // the PCIe path follows the NUMA rule
    return link;
  }
  const std::pair<const char*, int> levels[] = {{"PIX", nv::NVML_TOPOLOGY_SINGLE}, {"PXB", nv::NVML_TOPOLOGY_MULTIPLE},
                                                {"PHB", nv::NVML_TOPOLOGY_HOSTBRIDGE}, {"NODE", nv::NVML_TOPOLOGY_NODE},
                                                {"SYS", nv::NVML_TOPOLOGY_SYSTEM}};
  for (const auto& [name, level] : levels) {
    if (text == name) {
      link.level = level;
      return link;
    }
  }
  return std::nullopt;
}

// `host_pid`: a process of another PID namespace, which the launcher does not start. Its PID must
// be one no local process can have, and it is the only process listed under that PID.
std::optional<unsigned> parse_host_pid(Fields& f, const std::vector<ProcessSpec>& earlier) {
  if (!f.has("host_pid")) return std::nullopt;
  const auto pid = f.integer("host_pid", 1, std::numeric_limits<std::int32_t>::max());
  if (!pid) return std::nullopt;
  if (*pid <= kMaxLinuxPid) {
    f.fail_key("host_pid", fmt::format("{} could be a PID of this machine: use a number above {} (the kernel's "
                                       "largest PID), so that no local process has it",
                                       *pid, kMaxLinuxPid));
    return std::nullopt;
  }
  for (const char* started_only : {"user", "cmdline"}) {
    if (f.has(started_only)) {
      f.fail_key(started_only, "a process with host_pid is never started here: leave out 'user' and 'cmdline'");
      return std::nullopt;
    }
  }
  for (const ProcessSpec& other : earlier) {
    if (other.host_pid == static_cast<unsigned>(*pid)) {
      f.fail_key("host_pid", fmt::format("{} is already the host_pid of the process at line {}", *pid, other.line));
      return std::nullopt;
    }
  }
  return static_cast<unsigned>(*pid);
}

// util_sample = "normal" | "garbage" | "unreadable" (scenario.hpp's UtilSample).
std::optional<UtilSample> util_sample(Fields& f) {
  auto text = f.string("util_sample");
  if (!text) return std::nullopt;
  if (*text == "normal") return UtilSample::Normal;
  if (*text == "garbage") return UtilSample::Garbage;
  if (*text == "unreadable") return UtilSample::Unreadable;
  f.fail_key("util_sample", fmt::format("'{}' is not normal, garbage or unreadable", *text));
  return std::nullopt;
}

// [[process.timeline]]: the process's utilization over time, as [[timeline]] does for a GPU's.
std::vector<ProcessUtilSegment> parse_util_timeline(Fields& process) {
  std::vector<ProcessUtilSegment> out;
  const auto tables = table_array(process, "timeline");
  for (std::size_t i = 0; i < tables.size() && !process.diag().failed(); ++i) {
    Fields f(*tables[i], process.diag(), fmt::format("{}.timeline[{}]", process.where(), i));
    ProcessUtilSegment seg;
    seg.line = f.pos().line;
    seg.window = parse_window(f, "from", "to");
    seg.sm_util = pct(f, "sm_util");
    seg.mem_util = pct(f, "mem_util");
    seg.util_sample = util_sample(f);
    f.finish();
    out.push_back(seg);
  }
  return out;
}

}  // namespace

void parse_timeline(Fields& top, Scenario& s, Diag& diag) {
  const auto tables = table_array(top, "timeline");
  for (std::size_t i = 0; i < tables.size() && !diag.failed(); ++i) {
    Fields f(*tables[i], diag, fmt::format("timeline[{}]", i));
    Segment seg;
    seg.line = f.pos().line;
    seg.gpus = f.gpus(s.gpus.size(), Presence::Optional).value_or(std::vector<unsigned>{});
    seg.window = parse_window(f, "from", "to");
    seg.values = parse_values(f);
    f.finish();
    s.segments.push_back(std::move(seg));
  }
}

void parse_processes(Fields& top, Scenario& s, Diag& diag) {
  const auto tables = table_array(top, "process");
  for (std::size_t i = 0; i < tables.size() && !diag.failed(); ++i) {
    Fields f(*tables[i], diag, fmt::format("process[{}]", i));
    ProcessSpec p;
    p.line = f.pos().line;
    p.gpus = f.gpus(s.gpus.size(), Presence::Required).value_or(std::vector<unsigned>{});
    p.name = f.string("name", Presence::Required).value_or("");
    if (p.name.empty() || p.name.find('/') != std::string::npos || p.name.size() > 64) {
      if (!diag.failed()) f.fail_key("name", "must be a program name without '/' (what /proc/PID/comm shows)");
    }
    p.argv = f.words("cmdline").value_or(std::vector<std::string>{p.name});
    if (p.argv.empty()) f.fail_key("cmdline", "must not be empty");
    p.user = f.string("user").value_or("");
    p.memory_mib = static_cast<unsigned long long>(f.integer("memory_mib", 0, 1LL << 24, Presence::Required).value_or(0));
    p.sm_util = pct(f, "sm_util");
    p.mem_util = pct(f, "mem_util");
    p.util_sample = util_sample(f).value_or(UtilSample::Normal);
    p.util_timeline = parse_util_timeline(f);
    if (auto type = f.string("type")) {
      if (*type == "compute") {
        p.type = ProcessType::Compute;
      } else if (*type == "graphics") {
        p.type = ProcessType::Graphics;
      } else {
        f.fail_key("type", fmt::format("'{}' is neither compute nor graphics", *type));
      }
    }
    p.window = parse_window(f, "start", "end");
    p.host_pid = parse_host_pid(f, s.processes);
    if (auto mig = f.integer("mig_device", 0, 6); mig && !diag.failed()) {
      if (p.gpus.size() != 1) {
        f.fail_key("mig_device", "a process on a MIG device has one GPU: CUDA shows it one MIG device");
      } else if (const GpuSpec& gpu = s.gpus[p.gpus[0]]; static_cast<std::size_t>(*mig) >= gpu.mig.size()) {
        f.fail_key("mig_device", fmt::format("GPU {} has {} MIG devices", p.gpus[0], gpu.mig.size()));
      } else if (const MigProfile& profile = *gpu.mig[static_cast<std::size_t>(*mig)].profile;
                 p.memory_mib > profile.memory_mib) {
        f.fail_key("memory_mib", fmt::format("{} MiB does not fit in MIG device {} ({}, {} MiB)", p.memory_mib, *mig,
                                             profile.name, profile.memory_mib));
      }
      p.mig_device = static_cast<unsigned>(*mig);
    }
    f.finish();
    // A GPU in MIG mode with instances runs processes on them; one without instances may list
    // processes on the board (what a driver reports without instance ids: tests of that case).
    if (!p.mig_device && p.gpus.size() == 1 && !diag.failed() && !s.gpus[p.gpus[0]].mig.empty()) {
      f.fail_key("gpus", fmt::format("GPU {} is in MIG mode: a process runs on one of its MIG devices (mig_device = N)",
                                     p.gpus[0]));
    }
    for (unsigned g : p.gpus) {
      if (!diag.failed() && p.gpus.size() > 1 && !s.gpus[g].mig.empty()) {
        f.fail_key("gpus", fmt::format("GPU {} is in MIG mode: a process runs on one of its MIG devices", g));
      }
    }
    for (unsigned g : p.gpus) {
      const GpuSpec& gpu = s.gpus[g];
      if (!diag.failed() && p.memory_mib > gpu.memory_mib - gpu.memory_reserved_mib - gpu.memory_overhead_mib) {
        f.fail_key("memory_mib", fmt::format("{} MiB does not fit on GPU {} ({} MiB, {} MiB of it reserved or "
                                             "overhead)",
                                             p.memory_mib, g, gpu.memory_mib,
                                             gpu.memory_reserved_mib + gpu.memory_overhead_mib));
      }
    }
    s.processes.push_back(std::move(p));
  }
}

void parse_faults_and_events(Fields& top, Scenario& s, Diag& diag) {
  const auto faults = table_array(top, "fault");
  for (std::size_t i = 0; i < faults.size() && !diag.failed(); ++i) {
    const TomlNode& t = *faults[i];
    std::vector<FaultField> fields;
    for (std::size_t k = 0; k < t.table.size(); ++k) {
      const auto& [key, value] = t.table[k];
      auto text = as_spec_text(value);
      if (!text) {
        diag.fail(value.pos, fmt::format("fault[{}].{}: expected a string or an integer", i, key));
        return;
      }
      if (key == "lost" || key == "at" || key == "xid" || key == "ecc") {
        diag.fail(t.key_pos[k], fmt::format("fault[{}]: '{}' belongs in runtime specs; in a scenario use lost_at "
                                            "or an [[event]] table",
                                            i, key));
        return;
      }
      fields.push_back({key, *text});
    }
    auto rule = make_fault_rule(fields, s.gpus.size(), 0);
    if (!rule) {
      diag.fail(t.pos, fmt::format("fault[{}]: {}", i, rule.error().message));
      return;
    }
    rule->id = fmt::format("s{}", i);
    s.faults.push_back(std::move(*rule));
  }

  const auto events = table_array(top, "event");
  for (std::size_t i = 0; i < events.size() && !diag.failed(); ++i) {
    Fields f(*events[i], diag, fmt::format("event[{}]", i));
    EventSpec e;
    auto gpus = f.gpus(s.gpus.size(), Presence::Required);
    if (gpus && gpus->size() != 1) f.fail_key("gpus", "an event happens on one GPU: use 'gpu = N'");
    if (gpus && !gpus->empty()) e.gpu = gpus->front();
    e.at = f.duration("at", Presence::Required).value_or(0);
    auto xid = f.integer("xid", 1, 1'000'000);
    auto ecc = f.string("ecc");
    if (xid.has_value() == ecc.has_value()) {
      if (!diag.failed()) f.fail_at(nullptr, "give exactly one of 'xid = N' or 'ecc = \"single_bit\"|\"double_bit\"'");
    } else if (xid) {
      e.type = nv::nvmlEventTypeXidCriticalError;
      e.data = static_cast<unsigned long long>(*xid);
    } else if (*ecc == "single_bit" || *ecc == "double_bit") {
      e.type = *ecc == "single_bit" ? nv::nvmlEventTypeSingleBitEccError : nv::nvmlEventTypeDoubleBitEccError;
    } else {
      f.fail_key("ecc", fmt::format("'{}' is neither single_bit nor double_bit", *ecc));
    }
    f.finish();
    s.events.push_back(e);
  }
  std::stable_sort(s.events.begin(), s.events.end(), [](const EventSpec& a, const EventSpec& b) { return a.at < b.at; });
}

void parse_topology(Fields& top, Scenario& s, Diag& diag) {
  const std::size_t n = s.gpus.size();
  // Unnamed pairs: NODE under the same NUMA node, SYS across nodes (or when NUMA is unknown).
  auto numa_level = [&s](std::size_t a, std::size_t b) {
    const auto& na = s.gpus[a].numa_node;
    const auto& nb = s.gpus[b].numa_node;
    return na && nb && *na == *nb ? nv::NVML_TOPOLOGY_NODE : nv::NVML_TOPOLOGY_SYSTEM;
  };
  s.topology.assign(n, std::vector<Link>(n));
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = 0; b < n; ++b) s.topology[a][b].level = a == b ? nv::NVML_TOPOLOGY_INTERNAL : numa_level(a, b);
  }
  const TomlNode* t = top.table("topology");
  if (t == nullptr) return;
  Fields f(*t, diag, "topology");
  s.nvswitch = f.boolean("nvswitch").value_or(false);
  if (s.nvswitch) {
    for (std::size_t a = 0; a < n; ++a) {
      for (std::size_t b = 0; b < n; ++b) {
        if (a != b) s.topology[a][b].nvlinks = std::min(s.gpus[a].nvlink_links, s.gpus[b].nvlink_links);
      }
    }
  }
  if (const TomlNode* links = f.table("links")) {
    for (std::size_t k = 0; k < links->table.size() && !diag.failed(); ++k) {
      const auto& [pair, value] = links->table[k];
      const std::vector<std::string> ends = util::split(pair, '-');
      const long long a = ends.size() == 2 ? util::parse_int(ends[0]).value_or(-1) : -1;
      const long long b = ends.size() == 2 ? util::parse_int(ends[1]).value_or(-1) : -1;
      if (a < 0 || b < 0 || static_cast<std::size_t>(a) >= n || static_cast<std::size_t>(b) >= n || a == b) {
        diag.fail(links->key_pos[k], fmt::format("topology.links: '{}' is not a pair of two GPUs such as \"0-1\" "
                                                 "(the scenario has {} GPUs)",
                                                 pair, n));
        return;
      }
      std::optional<Link> link;
      if (value.kind == TomlNode::Kind::String) link = parse_link(value.string_value);
      if (!link) {
        diag.fail(value.pos, fmt::format("topology.links.\"{}\": expected \"NV<count>\", \"PIX\", \"PXB\", \"PHB\", "
                                         "\"NODE\" or \"SYS\"",
                                         pair));
        return;
      }
      const auto ia = static_cast<std::size_t>(a);
      const auto ib = static_cast<std::size_t>(b);
      if (s.nvswitch && link->nvlinks > 0) {
        diag.fail(value.pos, fmt::format("topology.links.\"{}\": with nvswitch = true every pair already has its "
                                         "NVLinks; give only PCIe paths (PIX, PXB, PHB, NODE, SYS) here",
                                         pair));
        return;
      }
      if (s.nvswitch) link->nvlinks = s.topology[ia][ib].nvlinks;
      if (link->level < 0) link->level = numa_level(ia, ib);
      s.topology[ia][ib] = *link;
      s.topology[ib][ia] = *link;
    }
  }
  f.finish();
  for (std::size_t a = 0; a < n && !diag.failed() && !s.nvswitch; ++a) {
    unsigned used = 0;
    for (std::size_t b = 0; b < n; ++b) used += a == b ? 0 : s.topology[a][b].nvlinks;
    if (used > s.gpus[a].nvlink_links) {
      diag.fail(t->pos, fmt::format("topology: GPU {} needs {} NVLinks but has nvlink_links = {}", a, used,
                                    s.gpus[a].nvlink_links));
    }
  }
}

}  // namespace tarmac::sim::detail
