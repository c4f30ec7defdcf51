// The names of every entry point the simulator exports: the rows of nvml_functions.def, the
// NOT_SUPPORTED stubs, and the two odd ones (nvmlErrorString, nvmlInternalGetExportTable).
// Used to validate fault specs and by the tests that dlsym every name.
#pragma once

#include <span>
#include <string_view>

namespace tarmac::sim {

// Rows of src/tarmac/nvml/nvml_functions.def.
[[nodiscard]] std::span<const std::string_view> table_entry_points();
// Rows of sim/entry_points/nvidia_smi_stubs.def.
[[nodiscard]] std::span<const std::string_view> stub_entry_points();
// Rows of sim/entry_points/newer.def: absent from the old-driver variant.
[[nodiscard]] std::span<const std::string_view> newer_entry_points();

[[nodiscard]] bool is_entry_point(std::string_view name);

}  // namespace tarmac::sim
