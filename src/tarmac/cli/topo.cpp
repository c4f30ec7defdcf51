#include "tarmac/cli/topo.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/snapshot_json.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::cli {

std::string format_cpu_list(const std::vector<unsigned>& cpus) {
  if (cpus.empty()) return "N/A";
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j > i ? fmt::format("{}-{}", cpus[i], cpus[j]) : fmt::format("{}", cpus[i]);
    i = j + 1;
  }
  return out;
}

namespace {

// A pair the topology does not cover (none was read, or a device came after it) is unknown, as
// nvidia-smi shows it, rather than a read past the matrix.
std::string cell(const gpu::Topology& t, std::size_t i, std::size_t j) {
  if (i >= t.links.size() || j >= t.links[i].size()) return gpu::to_string(gpu::Link::Unknown);
  const gpu::Link link = t.links[i][j];
  if (link == gpu::Link::Self) return " X ";
  if (link == gpu::Link::NvLink) {
    const bool counted = i < t.nvlink_count.size() && j < t.nvlink_count[i].size();
    return counted ? fmt::format("NV{}", t.nvlink_count[i][j]) : "NV";
  }
  return gpu::to_string(link);
}

constexpr const char* kLegend =
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n";

}  // namespace

std::string render_topology(const gpu::Snapshot& snap) {
  const gpu::Topology none;
  const auto& t = snap.topology ? *snap.topology : none;
  const std::size_t n = snap.devices.size();
  std::string out = "\t";
  for (std::size_t j = 0; j < n; ++j) out += fmt::format("GPU{}\t", j);
  out += "CPU Affinity\tNUMA Affinity\n";
  for (std::size_t i = 0; i < n; ++i) {
    const auto& id = snap.devices[i].id;
    out += fmt::format("GPU{}\t", i);
    for (std::size_t j = 0; j < n; ++j) out += cell(t, i, j) + "\t";
    out += fmt::format("{}\t{}\n", format_cpu_list(id.cpu_affinity),
                       id.numa_node ? std::to_string(*id.numa_node) : std::string("N/A"));
  }
  out += "\n";
  out += kLegend;
  return out;
}

namespace detail {

nlohmann::json topology_json(const gpu::Snapshot& snap) {
  nlohmann::json j = to_json(snap.topology ? *snap.topology : gpu::Topology{});
  j["gpus"] = nlohmann::json::array();
  for (const auto& d : snap.devices) {
    j["gpus"].push_back({{"index", d.id.index},
                         {"pci_bus_id", d.id.pci_bus_id ? nlohmann::json(*d.id.pci_bus_id) : nlohmann::json(nullptr)},
                         {"cpu_affinity", d.id.cpu_affinity},
                         {"numa_node", d.id.numa_node ? nlohmann::json(*d.id.numa_node) : nlohmann::json(nullptr)}});
  }
  return j;
}

}  // namespace detail

void add_topo_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand("topo", "Show how the GPUs connect (NVLink, PCIe) and their CPU and NUMA affinity");
  cmd->add_flag("-m,--matrix")->description("The connection matrix (the default, as nvidia-smi topo -m)");
  cmd->callback([&global, &exit_code] {
    auto backend = open_backend(global);
    if (!backend.ok()) {
      exit_code = kExitCouldNotLook;
      return;
    }
    auto snap = (*backend)->snapshot(gpu::SnapshotOptions{.processes = false, .slow = false, .topology = true});
    if (!snap.ok()) {
      print_error(snap.error());
      exit_code = kExitCouldNotLook;
      return;
    }
    if (global.json) {
      fmt::print("{}\n", util::json_text(detail::topology_json(*snap), 2));
    } else {
      fmt::print("{}", render_topology(*snap));
    }
    exit_code = kExitOk;
  });
}

}  // namespace tarmac::cli
