// Fault rules: what a [[fault]] table of a scenario or a `tarmac-sim fault` spec asks for (a return
// code, a delay, a lost GPU, an injected event), and the one parser both use.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tarmac/util/result.hpp"

namespace tarmac::sim {

// A timeline event delivered through event sets (and counted in the ECC counters).
struct EventSpec {
  unsigned gpu = 0;
  double at = 0;                // simulated seconds
  unsigned long long type = 0;  // nvmlEventType*
  unsigned long long data = 0;  // the XID of an XID event
};

struct FaultRule {
  std::string id;                 // stable across processes: "s3" (scenario), "r5" (runtime line)
  std::string function = "*";     // an NVML entry point, or "*" for every one
  std::optional<unsigned> gpu;    // absent: every GPU (and calls that name none)
  std::optional<int> rc;          // the return code to answer
  unsigned delay_ms = 0;          // sleep before answering
  std::optional<unsigned> calls;  // only the next N matching calls (shared by all processes)
  std::optional<double> from;     // active from this simulated time ...
  std::optional<double> until;    // ... until this one
  std::optional<double> lost_at;  // the GPU falls off the bus at this time
  std::optional<EventSpec> event; // an XID/ECC event to deliver

  // Whether the rule applies to a call of `function` on `gpu` (nullopt: a call naming no GPU).
  [[nodiscard]] bool matches(std::string_view function_name, std::optional<unsigned> call_gpu, double t) const;
};

// One key=value of a rule, with the line it came from (0 for command-line specs).
struct FaultField {
  std::string key;
  std::string value;
};

// Builds a rule from its fields. Keys: function (fn), gpu, return (rc), calls, from, until,
// delay_ms (delay), lost (no value: now), lost_at, xid, ecc (single_bit|double_bit), at.
// `now` fills in the time of `lost` and of events given without `at`.
[[nodiscard]] Result<FaultRule> make_fault_rule(const std::vector<FaultField>& fields, std::size_t gpu_count, double now);

// Parses "fn=nvmlDeviceGetPowerUsage,gpu=1,rc=NOT_SUPPORTED,calls=3".
[[nodiscard]] Result<FaultRule> parse_fault_spec(std::string_view spec, std::size_t gpu_count, double now);

// The canonical one-line spec of a rule (what `tarmac-sim fault` stores in the state directory).
[[nodiscard]] std::string format_fault_rule(const FaultRule& rule);

// NVML return codes by name: "NOT_SUPPORTED", "NVML_ERROR_NOT_SUPPORTED", "3" all give 3.
[[nodiscard]] std::optional<int> return_code_by_name(std::string_view name);
[[nodiscard]] std::string return_code_name(int rc);

// NVIDIA's nvmlErrorString text for a return code.
[[nodiscard]] const char* return_code_text(int rc);

}  // namespace tarmac::sim
