// Finding scenario files: a path, or the name of a bundled scenario looked up in, in order,
// $TARMAC_SIM_SCENARIOS, the source tree's sim/scenarios (compiled in), and
// <dir>/../share/tarmac/scenarios next to the program or library asking.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/util/result.hpp"

namespace tarmac::sim {

// The directories searched for bundled scenarios; `anchor` is the asking binary's directory.
[[nodiscard]] std::vector<std::filesystem::path> scenario_dirs(const std::filesystem::path& anchor);

// A file path (anything with a '/' or ending in .toml that exists) or a bundled name.
[[nodiscard]] Result<std::filesystem::path> resolve_scenario(std::string_view name_or_file,
                                                             const std::filesystem::path& anchor);

struct BundledScenario {
  std::string name;
  std::filesystem::path file;
};
// Every bundled scenario, first directory wins for a name, sorted by name.
[[nodiscard]] std::vector<BundledScenario> bundled_scenarios(const std::filesystem::path& anchor);

}  // namespace tarmac::sim
