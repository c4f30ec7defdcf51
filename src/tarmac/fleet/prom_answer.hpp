// Prometheus' HTTP API answers, read as hostile input (docs/fleet.md): the JSON is refused when it
// nests deeper than an answer does, names and values are bounded, and a series whose value is not
// a finite number keeps its labels without one. Shared by `tarmac fleet` and the fleet report.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/gpu/activity.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::fleet::detail {

constexpr std::size_t kMaxName = 256;        // a host, a UUID, a user, a job, a pod as shown
constexpr std::size_t kMaxSeries = 1 << 20;  // per query: a hundred times 8,000 GPUs' six classes

// The JSON object in `text`; `what` names it in the error.
[[nodiscard]] Result<nlohmann::json> parse_object(std::string_view text, const std::string& what);
// A string member, cut to kMaxName.
[[nodiscard]] std::optional<std::string> string_at(const nlohmann::json& j, const char* key);

struct Sample {
  std::map<std::string, std::string> labels;
  std::optional<double> value;                               // an instant vector's
  std::vector<std::pair<double, double>> points;             // a range query's (seconds, value)
};

// The `data.result` of an instant query's answer (resultType "vector") or a range query's
// ("matrix"); `query` names it in errors.
[[nodiscard]] Result<std::vector<Sample>> vector_of(std::string_view text, const char* query);
[[nodiscard]] Result<std::vector<Sample>> matrix_of(std::string_view text, const char* query);

// The label's value, "" when the series has none.
[[nodiscard]] std::string label_of(const Sample& s, const char* name);
// A GPU index label ("0" to "9999").
[[nodiscard]] std::optional<unsigned> index_in(std::string_view text);
// A number, or null.
[[nodiscard]] nlohmann::json json_or_null(const std::optional<double>& v);
// A `class` label: "busy", "reserved-idle", ...
[[nodiscard]] std::optional<gpu::Activity> activity_named(std::string_view name);

}  // namespace tarmac::fleet::detail
