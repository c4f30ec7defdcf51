#include "scenario_paths.hpp"

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>
#include <set>

#ifndef TARMAC_SIM_SOURCE_SCENARIOS
#define TARMAC_SIM_SOURCE_SCENARIOS ""
#endif

namespace tarmac::sim {

namespace fs = std::filesystem;

std::vector<fs::path> scenario_dirs(const fs::path& anchor) {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("TARMAC_SIM_SCENARIOS"); env != nullptr && *env != '\0') dirs.emplace_back(env);
  if (*TARMAC_SIM_SOURCE_SCENARIOS != '\0') dirs.emplace_back(TARMAC_SIM_SOURCE_SCENARIOS);
  if (!anchor.empty()) {
    dirs.push_back((anchor / ".." / "share" / "tarmac" / "scenarios").lexically_normal());
    dirs.push_back((anchor / ".." / ".." / "share" / "tarmac" / "scenarios").lexically_normal());
  }
  return dirs;
}

Result<fs::path> resolve_scenario(std::string_view name_or_file, const fs::path& anchor) {
  const fs::path as_path(name_or_file);
  std::error_code ec;
  const bool looks_like_path = name_or_file.find('/') != std::string_view::npos || as_path.extension() == ".toml";
  if (looks_like_path) {
    if (fs::is_regular_file(as_path, ec)) return as_path;
    return make_error(Error::Code::NotFound, fmt::format("{}: no such scenario file", name_or_file));
  }
  for (const fs::path& dir : scenario_dirs(anchor)) {
    const fs::path file = dir / (std::string(name_or_file) + ".toml");
    if (fs::is_regular_file(file, ec)) return file;
  }
  std::string names;
  for (const BundledScenario& b : bundled_scenarios(anchor)) names += (names.empty() ? "" : ", ") + b.name;
  return make_error(Error::Code::NotFound,
                    fmt::format("no scenario named '{}' (bundled: {}; or give a .toml file)", name_or_file,
                                names.empty() ? "none found" : names));
}

std::vector<BundledScenario> bundled_scenarios(const fs::path& anchor) {
  std::vector<BundledScenario> out;
  std::set<std::string> seen;
  for (const fs::path& dir : scenario_dirs(anchor)) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() != ".toml") continue;
      const std::string name = it->path().stem().string();
      if (seen.insert(name).second) out.push_back({name, it->path()});
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace tarmac::sim
