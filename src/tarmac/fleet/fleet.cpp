#include "tarmac/fleet/fleet.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>

#include "tarmac/fleet/prom_answer.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::fleet {

namespace {

using nlohmann::json;

constexpr std::size_t kMaxPerGpu = 64;    // users, jobs or pods listed for one GPU
constexpr double kMaxMib = 1e12;          // beyond, a number is not memory

using detail::activity_named;
using detail::index_in;
using detail::kMaxName;
using detail::json_or_null;
using detail::label_of;
using detail::Sample;
using detail::string_at;
using detail::vector_of;

Result<json> parse(std::string_view text, const std::string& what) { return detail::parse_object(text, what); }

std::optional<double> number_at(const json& j, const char* key, double max) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0 || v > max) return std::nullopt;
  return v;
}

void add_bounded(std::set<std::string>& to, std::string value) {
  if (!value.empty() && to.size() < kMaxPerGpu) to.insert(std::move(value));
}

int grounded_rank(const std::optional<gpu::Activity>& a) {
  if (!a) return 6;
  switch (*a) {
    case gpu::Activity::Holding: return 0;
    case gpu::Activity::ReservedIdle: return 1;
    case gpu::Activity::Idle: return 2;
    case gpu::Activity::Fault: return 3;
    case gpu::Activity::Starved: return 4;
    case gpu::Activity::Busy: return 5;
  }
  return 6;
}

bool grounded(const std::optional<gpu::Activity>& a) { return grounded_rank(a) <= 2; }

std::string who(const Row& r) {
  std::vector<std::string> parts(r.users.begin(), r.users.end());
  for (const auto& j : r.jobs) parts.push_back("job " + j);
  for (const auto& p : r.pods) parts.push_back("pod " + p);
  return parts.empty() ? std::string("-") : fmt::format("{}", fmt::join(parts, ", "));
}

std::string memory(const Row& r) {
  if (!r.mem_used_mib) return "-";
  const double used = *r.mem_used_mib / 1024.0;
  return r.mem_total_mib ? fmt::format("{:.1f}/{:.0f} GiB", used, *r.mem_total_mib / 1024.0) : fmt::format("{:.1f} GiB", used);
}


}  // namespace

void sort_grounded_first(std::vector<Row>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    const int ra = grounded_rank(a.activity);
    const int rb = grounded_rank(b.activity);
    if (ra != rb) return ra < rb;
    const double ia = a.idle_seconds.value_or(0);
    const double ib = b.idle_seconds.value_or(0);
    if (ia != ib) return ia > ib;
    if (a.host != b.host) return a.host < b.host;
    return a.gpu < b.gpu;
  });
}

Result<std::vector<Row>> rows_from_agent(std::string_view gpus_json, std::string_view processes_json,
                                         const std::string& address) {
  TARMAC_TRY_ASSIGN(const json g, parse(gpus_json, address + "'s /api/v1/gpus"));
  TARMAC_TRY_ASSIGN(const json p, parse(processes_json, address + "'s /api/v1/processes"));
  const auto gpus = g.find("gpus");
  const auto procs = p.find("processes");
  if (gpus == g.end() || !gpus->is_array() || procs == p.end() || !procs->is_array()) {
    return make_error(Error::Code::Invalid, fmt::format("{} is not a tarmac agent (no gpus or processes list)", address));
  }
  const std::string host = string_at(g, "hostname").value_or(address);
  std::vector<Row> rows;
  std::map<unsigned, std::size_t> by_index;
  for (const auto& item : *gpus) {
    if (!item.is_object()) continue;
    const auto index = item.find("index");
    if (index == item.end() || !index->is_number_unsigned() || index->get<unsigned long long>() > 9999) continue;
    Row r;
    r.host = host;
    r.gpu = index->get<unsigned>();
    if (by_index.contains(r.gpu)) continue;
    r.uuid = string_at(item, "uuid").value_or("");
    r.model = string_at(item, "name").value_or("");
    if (const auto a = string_at(item, "activity")) r.activity = activity_named(*a);
    r.util_pct = number_at(item, "util_gpu_pct", 100);
    r.mem_used_mib = number_at(item, "mem_used_mib", kMaxMib);
    r.mem_total_mib = number_at(item, "mem_total_mib", kMaxMib);
    r.idle_seconds = number_at(item, "idle_seconds", 1e10);
    if (const auto jobs = item.find("slurm_jobs"); jobs != item.end() && jobs->is_array()) {
      for (const auto& j : *jobs) {
        if (j.is_string()) add_bounded(r.jobs, j.get<std::string>().substr(0, kMaxName));
      }
    }
    if (const auto pods = item.find("pods"); pods != item.end() && pods->is_array()) {
      for (const auto& pod : *pods) {
        if (!pod.is_object()) continue;
        const auto name = string_at(pod, "pod");
        const auto ns = string_at(pod, "namespace");
        if (name && ns) add_bounded(r.pods, *ns + "/" + *name);
      }
    }
    by_index[r.gpu] = rows.size();
    rows.push_back(std::move(r));
  }
  for (const auto& item : *procs) {
    if (!item.is_object()) continue;
    const auto gpu = item.find("gpu");
    if (gpu == item.end() || !gpu->is_number_unsigned() || gpu->get<unsigned long long>() > 9999) continue;
    const auto at = by_index.find(gpu->get<unsigned>());
    if (at == by_index.end()) continue;
    if (const auto user = string_at(item, "user")) add_bounded(rows[at->second].users, *user);
  }
  return rows;
}

Result<Fleet> fleet_from_prometheus(const PromAnswers& answers) {
  constexpr std::size_t kQueries = std::size(PromQueries::kAll);
  if (answers.size() != kQueries) return make_error(Error::Code::Internal, "fleet: an answer per query expected");
  // One answer's tree at a time: each is parsed, read into samples and freed before the next.
  std::vector<std::vector<Sample>> v(kQueries);
  for (std::size_t i = 0; i < kQueries; ++i) {
    TARMAC_TRY_ASSIGN(v[i], vector_of(answers[i], PromQueries::kAll[i]));
  }
  Fleet fleet;
  // Keyed by the scrape target and the GPU's UUID: every series of one agent has its instance, and
  // a UUID alone could be claimed by two (simulated, or lying) agents.
  const auto key = [](const Sample& s, const char* uuid_label) {
    return label_of(s, "instance") + '\n' + label_of(s, uuid_label);
  };
  std::map<std::string, Row> by_uuid;
  for (const auto& s : v[0]) {
    const std::string uuid = label_of(s, "uuid");
    const auto index = index_in(label_of(s, "gpu"));
    if (uuid.empty() || !index) continue;
    Row& r = by_uuid[key(s, "uuid")];
    r.uuid = uuid;
    r.gpu = *index;
    r.host = label_of(s, "hostname");
    if (r.host.empty()) r.host = label_of(s, "instance");
    r.activity = activity_named(label_of(s, "class"));
  }
  const auto row_of = [&by_uuid, &key](const Sample& s, const char* uuid_label) -> Row* {
    const auto it = by_uuid.find(key(s, uuid_label));
    return it == by_uuid.end() ? nullptr : &it->second;
  };
  const auto bounded = [](const std::optional<double>& x, double max) {
    return x && *x >= 0 && *x <= max ? x : std::nullopt;
  };
  for (const auto& s : v[1]) {
    if (Row* r = row_of(s, "UUID")) {
      r->util_pct = bounded(s.value, 100);
      r->model = label_of(s, "modelName");
    }
  }
  for (const auto& s : v[2]) {
    if (Row* r = row_of(s, "UUID")) r->mem_used_mib = bounded(s.value, kMaxMib);
  }
  for (const auto& s : v[3]) {
    Row* r = row_of(s, "UUID");
    if (r && r->mem_used_mib && bounded(s.value, kMaxMib)) r->mem_total_mib = *r->mem_used_mib + *s.value;
  }
  for (const auto& s : v[4]) {
    Row* r = row_of(s, "uuid");
    if (r && s.value && *s.value > 0) r->idle_seconds = bounded(s.value, 1e10);
  }
  for (const auto& s : v[5]) {
    if (Row* r = row_of(s, "uuid")) add_bounded(r->jobs, label_of(s, "slurm_job"));
  }
  for (const auto& s : v[6]) {
    Row* r = row_of(s, "uuid");
    if (r && !label_of(s, "pod").empty()) add_bounded(r->pods, label_of(s, "namespace") + "/" + label_of(s, "pod"));
  }
  for (const auto& s : v[7]) {
    if (Row* r = row_of(s, "uuid")) add_bounded(r->users, label_of(s, "user"));
  }
  for (const auto& s : v[8]) {
    fleet.problems.push_back(fmt::format("target {} (job {}) is down in Prometheus", label_of(s, "instance"),
                                         label_of(s, "job")));
  }
  fleet.rows.reserve(by_uuid.size());
  for (auto& [uuid, row] : by_uuid) fleet.rows.push_back(std::move(row));
  sort_grounded_first(fleet.rows);
  return fleet;
}

std::string render_text(const Fleet& fleet) {
  std::set<std::string> hosts;
  std::map<gpu::Activity, int> count;
  for (const auto& r : fleet.rows) {
    hosts.insert(r.host);
    if (r.activity) ++count[*r.activity];
  }
  const auto n = [&](gpu::Activity a) { return count.contains(a) ? count.at(a) : 0; };
  // "3 holding, 1 idle": the classes present, in the order given.
  const auto counted = [&](std::initializer_list<gpu::Activity> classes) {
    std::vector<std::string> parts;
    for (const auto a : classes) {
      if (n(a) > 0) parts.push_back(fmt::format("{} {}", n(a), gpu::to_string(a)));
    }
    return parts;
  };
  const auto grounded_parts = counted({gpu::Activity::Holding, gpu::Activity::ReservedIdle, gpu::Activity::Idle});
  const int on_ground = n(gpu::Activity::Holding) + n(gpu::Activity::ReservedIdle) + n(gpu::Activity::Idle);
  std::string out = fmt::format("tarmac fleet ({}): {} GPU{} on {} host{}: {} grounded", util::terminal_text(fleet.source),
                                fleet.rows.size(), fleet.rows.size() == 1 ? "" : "s", hosts.size(),
                                hosts.size() == 1 ? "" : "s", on_ground);
  if (!grounded_parts.empty()) out += fmt::format(" ({})", fmt::join(grounded_parts, ", "));
  for (const auto& part : counted({gpu::Activity::Starved, gpu::Activity::Busy, gpu::Activity::Fault})) out += ", " + part;
  out += "\n";
  std::size_t width = 4;
  for (const auto& r : fleet.rows) width = std::max(width, std::min<std::size_t>(40, util::terminal_text(r.host).size()));
  out += fmt::format("\n{:<{}}  {:>3}  {:<13}  {:>4}  {:<15}  {:>9}  {}\n", "HOST", width, "GPU", "CLASS", "UTIL",
                     "MEMORY", "IDLE FOR", "WHO");
  for (const auto& r : fleet.rows) {
    out += fmt::format("{:<{}}  {:>3}  {:<13}  {:>4}  {:<15}  {:>9}  {}\n", util::terminal_text(r.host), width, r.gpu,
                       r.activity ? gpu::to_string(*r.activity) : "-",
                       r.util_pct ? fmt::format("{:.0f}%", *r.util_pct) : std::string("-"), memory(r),
                       r.idle_seconds && grounded(r.activity)
                           ? util::format_duration_ms(std::llround(*r.idle_seconds) * 1000)
                           : std::string("-"),
                       util::terminal_text(who(r)));
  }
  for (const auto& p : fleet.problems) out += fmt::format("warning: {}\n", util::terminal_text(p));
  return out;
}

std::string render_json(const Fleet& fleet) {
  json gpus = json::array();
  for (const auto& r : fleet.rows) {
    gpus.push_back({{"host", r.host},
                    {"gpu", r.gpu},
                    {"uuid", r.uuid},
                    {"model", r.model},
                    {"activity", r.activity ? json(gpu::to_string(*r.activity)) : json(nullptr)},
                    {"util_pct", json_or_null(r.util_pct)},
                    {"mem_used_mib", json_or_null(r.mem_used_mib)},
                    {"mem_total_mib", json_or_null(r.mem_total_mib)},
                    {"idle_seconds", json_or_null(r.idle_seconds)},
                    {"users", r.users},
                    {"jobs", r.jobs},
                    {"pods", r.pods}});
  }
  const json out = {{"schema", 1}, {"source", fleet.source}, {"gpus", std::move(gpus)}, {"problems", fleet.problems}};
  return util::json_text(out, 2) + "\n";
}

}  // namespace tarmac::fleet
