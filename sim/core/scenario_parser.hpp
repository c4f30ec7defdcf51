// Reading scenario files (TOML; the format is documented in docs/simulator.md).
#pragma once

#include <string>

#include "scenario.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::sim {

// Parses and validates scenario text. Every error reads "FILE:LINE:COLUMN: TABLE.KEY: problem".
[[nodiscard]] Result<Scenario> parse_scenario(const std::string& text, const std::string& file);

// Reads and parses a scenario file.
[[nodiscard]] Result<Scenario> load_scenario_file(const std::string& path);

}  // namespace tarmac::sim
