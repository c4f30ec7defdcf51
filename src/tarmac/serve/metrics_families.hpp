// The metric families /metrics writes (docs/metrics.md): dcgm-exporter's fields, read from the
// model, and tarmac's own, each with its type and help text. Private to serve/metrics*.cpp.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "tarmac/gpu/model.hpp"

namespace tarmac::serve::detail {

enum class Type { Gauge, Counter };

// One metric family: its samples, written under one HELP and TYPE (the format wants them together).
struct Family {
  const char* name;
  Type type;
  const char* help;
};

// dcgm-exporter's fields (default-counters.csv and dcp-metrics-included.csv), read from the model.
struct DcgmField {
  Family family;
  std::optional<double> (*read)(const gpu::Device&);
};

[[nodiscard]] const std::vector<DcgmField>& dcgm_fields();
[[nodiscard]] const std::vector<Family>& own_families();
// The family of that name; a name missing from own_families() aborts (a bug the unit tests catch).
[[nodiscard]] const Family& own_family(std::string_view name);

}  // namespace tarmac::serve::detail
