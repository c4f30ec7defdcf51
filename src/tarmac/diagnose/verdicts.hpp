// Verdict lines: one short sentence per problem a snapshot shows, for `tarmac status`.
// `tarmac doctor` (issue 4) grows the full diagnosis from the same checks.
#pragma once

#include <string>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/gpu/model.hpp"

namespace tarmac::diagnose {

enum class Severity { Info, Warning, Critical };

struct Verdict {
  Severity severity = Severity::Info;
  std::string code;  // stable: "single-gpu-active", "holding", ...
  std::string text;  // one line for people
};

// The verdicts for a snapshot whose devices were classified into `classes` (same order).
[[nodiscard]] std::vector<Verdict> verdicts(const gpu::Snapshot& snapshot, const std::vector<gpu::Activity>& classes);

// "0", "1-3", "0, 2, 5-7": GPU index lists as people write them.
[[nodiscard]] std::string format_index_list(const std::vector<unsigned>& indices);

[[nodiscard]] const char* to_string(Severity severity);

}  // namespace tarmac::diagnose
