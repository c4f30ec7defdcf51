// `tarmac topo [-m]`: the GPU x GPU connection matrix with nvidia-smi's legend, plus CPU and NUMA
// affinity per GPU.
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"

namespace tarmac::cli {

void add_topo_command(CLI::App& app, const GlobalOptions& global, int& exit_code);

// "0-31,64-95": a CPU list as the kernel and nvidia-smi write it; "N/A" when empty.
[[nodiscard]] std::string format_cpu_list(const std::vector<unsigned>& cpus);

// The matrix and legend exactly as printed (tab-separated, as nvidia-smi topo -m); a pair of GPUs
// the snapshot's topology does not cover shows N/A.
[[nodiscard]] std::string render_topology(const gpu::Snapshot& snapshot);

namespace detail {

// `tarmac topo --json`: the link matrix and each GPU's bus id and CPU and NUMA affinity.
[[nodiscard]] nlohmann::json topology_json(const gpu::Snapshot& snapshot);

}  // namespace detail

}  // namespace tarmac::cli
