// The parts of the scenario parser, one per kind of table (internal to sim/core).
#pragma once

#include "scenario.hpp"
#include "scenario_fields.hpp"

namespace tarmac::sim::detail {

// [gpu_defaults] and [[gpu]] (scenario_parser_gpu.cpp).
void parse_gpus(const TomlNode& root, Fields& top, Scenario& scenario, Diag& diag);
// [[timeline]], [[process]], [[fault]], [[event]], [topology] (scenario_parser_dynamic.cpp).
void parse_timeline(Fields& top, Scenario& scenario, Diag& diag);
void parse_processes(Fields& top, Scenario& scenario, Diag& diag);
void parse_faults_and_events(Fields& top, Scenario& scenario, Diag& diag);
void parse_topology(Fields& top, Scenario& scenario, Diag& diag);

// Throttle (clock event) reason names ("sw_thermal", ...) to their NVML bits.
[[nodiscard]] std::optional<unsigned long long> throttle_reasons(Fields& fields, std::string_view key);

// The tables of an array of tables (`[[name]]`), with the array's element type checked.
[[nodiscard]] std::vector<const TomlNode*> table_array(Fields& top, std::string_view key);

}  // namespace tarmac::sim::detail
