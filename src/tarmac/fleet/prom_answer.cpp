#include "tarmac/fleet/prom_answer.hpp"

#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::fleet::detail {

namespace {

using nlohmann::json;

// Prometheus' answers nest 5 deep (a matrix's points 6), an agent's 4; deeper is refused before
// it is parsed.
constexpr int kMaxJsonDepth = 8;
constexpr std::size_t kMaxPoints = 1 << 16;  // per series of a range query: far over a year of hours

std::optional<double> number_in(const json& v) {
  if (!v.is_string()) return std::nullopt;
  const std::string text = v.get<std::string>();
  double d = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(d)) return std::nullopt;
  return d;
}

Result<std::vector<Sample>> result_of(std::string_view text, const char* query, const char* type) {
  const std::string what = fmt::format("Prometheus' answer to {}", query);
  TARMAC_TRY_ASSIGN(const json j, parse_object(text, what));
  if (string_at(j, "status").value_or("") != "success") {
    return make_error(Error::Code::External,
                      fmt::format("{}: {}", what, util::terminal_text(string_at(j, "error").value_or("not a success"))));
  }
  const auto data = j.find("data");
  if (data == j.end() || !data->is_object() || string_at(*data, "resultType").value_or("") != type) {
    return make_error(Error::Code::Invalid, fmt::format("{} is not a {}", what,
                                                        std::string_view(type) == "vector" ? "an instant vector"
                                                                                           : "range of series"));
  }
  const auto result = data->find("result");
  if (result == data->end() || !result->is_array()) return make_error(Error::Code::Invalid, what + " has no result");
  if (result->size() > kMaxSeries) {
    return make_error(Error::Code::Invalid, fmt::format("{} has more than {} series", what, kMaxSeries));
  }
  std::vector<Sample> out;
  out.reserve(result->size());
  for (const auto& item : *result) {
    if (!item.is_object()) continue;
    Sample s;
    if (const auto m = item.find("metric"); m != item.end() && m->is_object()) {
      for (const auto& [k, v] : m->items()) {
        if (v.is_string() && k.size() <= kMaxName) s.labels[k] = v.get<std::string>().substr(0, kMaxName);
      }
    }
    if (const auto v = item.find("value"); v != item.end() && v->is_array() && v->size() == 2) s.value = number_in((*v)[1]);
    if (const auto vs = item.find("values"); vs != item.end() && vs->is_array() && vs->size() <= kMaxPoints) {
      for (const auto& p : *vs) {
        if (!p.is_array() || p.size() != 2 || !p[0].is_number()) continue;
        const double t = p[0].get<double>();
        if (const auto x = number_in(p[1]); x && std::isfinite(t)) s.points.emplace_back(t, *x);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

Result<json> parse_object(std::string_view text, const std::string& what) {
  if (util::json_depth(text) > kMaxJsonDepth) {
    return make_error(Error::Code::Invalid, fmt::format("{} nests deeper than {} levels", what, kMaxJsonDepth));
  }
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error(Error::Code::Invalid, fmt::format("{} is not a JSON object", what));
  return j;
}

std::optional<std::string> string_at(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  std::string s = it->get<std::string>();
  if (s.size() > kMaxName) s.resize(kMaxName);
  return s;
}

Result<std::vector<Sample>> vector_of(std::string_view text, const char* query) { return result_of(text, query, "vector"); }

Result<std::vector<Sample>> matrix_of(std::string_view text, const char* query) { return result_of(text, query, "matrix"); }

std::string label_of(const Sample& s, const char* name) {
  const auto it = s.labels.find(name);
  return it == s.labels.end() ? std::string() : it->second;
}

std::optional<unsigned> index_in(std::string_view text) {
  unsigned v = 0;
  if (text.empty() || text.size() > 4) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

json json_or_null(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::optional<gpu::Activity> activity_named(std::string_view name) {
  for (const auto a : gpu::kActivities) {
    if (name == gpu::to_string(a)) return a;
  }
  return std::nullopt;
}

}  // namespace tarmac::fleet::detail
