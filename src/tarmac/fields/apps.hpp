// The --query-compute-apps field table: nvidia-smi 535's fields (`nvidia-smi
// --help-query-compute-apps`), then tarmac's own host attribution (user, container, Slurm job,
// command line, per-process SM utilization, start time). Rows are written with format.hpp like
// --query-gpu rows. Pure: no I/O, no NVML.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "tarmac/fields/table.hpp"
#include "tarmac/gpu/model.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::fields {

// nvidia-smi's words for a process it cannot see from its PID namespace ("[Not Found]").
inline constexpr std::string_view kProcessNotFound = "Not Found";

// Every compute-apps field: nvidia-smi's in its --help order, then tarmac's.
[[nodiscard]] std::span<const FieldSpec> all_app_fields();

// The compute-apps field named `name` (canonical or alias, exact spelling), or nullptr.
[[nodiscard]] const FieldSpec* find_app_field(std::string_view name);

// Parses a --query-compute-apps list ("pid,process_name,used_memory"); empty names are skipped.
// Fails with Error::Invalid whose message is the first unknown name, exactly as typed.
[[nodiscard]] Result<std::vector<const FieldSpec*>> parse_app_field_list(std::string_view list);

// One process of a snapshot: the position of its GPU in Snapshot::devices and of the process in
// that GPU's list.
struct AppRef {
  std::size_t device = 0;
  std::size_t process = 0;
};

// The compute processes of the GPUs at `selected` (positions in snapshot.devices), in GPU order
// then in NVML's order, as nvidia-smi lists them; graphics-only processes are left out.
[[nodiscard]] std::vector<AppRef> compute_apps(const gpu::Snapshot& snapshot, std::span<const std::size_t> selected);

}  // namespace tarmac::fields
