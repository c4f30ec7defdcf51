// The report as JSON (docs/report.md): hours as numbers, times as ISO 8601 UTC and milliseconds.
#include <nlohmann/json.hpp>

#include "tarmac/report/format.hpp"
#include "tarmac/report/report.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::report {

namespace {

nlohmann::json optional(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

nlohmann::json hours_json(const ClassHours& h) {
  nlohmann::json j = nlohmann::json::object();
  for (auto a : gpu::kActivities) j[gpu::to_string(a)] = h.of(a);
  j["unrecorded"] = h.unrecorded;
  return j;
}

nlohmann::json consumers_json(const std::vector<Consumer>& list) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : list) out.push_back({{"name", c.name}, {"gpu_hours", c.gpu_hours}, {"processes", c.processes}});
  return out;
}

nlohmann::json window_json(unsigned gpu, long long start, long long end) {
  return {{"gpu", gpu}, {"start", format_iso(start)}, {"end", format_iso(end)}, {"start_ms", start}, {"end_ms", end},
          {"hours", static_cast<double>(end - start) / 3600e3}};
}

nlohmann::json jobs_json(const std::vector<JobUse>& jobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& u : jobs) {
    out.push_back({{"job", u.job},
                   {"user", u.user.empty() ? nlohmann::json(nullptr) : nlohmann::json(u.user)},
                   {"partition", u.partition.empty() ? nlohmann::json(nullptr) : nlohmann::json(u.partition)},
                   {"gpus", u.gpus},
                   {"first", format_iso(u.first_ms)},
                   {"last", format_iso(u.last_ms)},
                   {"first_ms", u.first_ms},
                   {"last_ms", u.last_ms},
                   {"gpu_hours", u.gpu_hours()},
                   {"held_idle_gpu_hours", u.held_idle()},
                   {"hours", hours_json(u.hours)},
                   {"idle_cost", optional(u.idle_cost)}});
  }
  return out;
}

// What every rendering starts with: the schema, the range and the price.
nlohmann::json header_json(const Report& r) {
  return {{"schema", 1},
          {"since", format_iso(r.since_ms)},
          {"until", format_iso(r.until_ms)},
          {"since_ms", r.since_ms},
          {"until_ms", r.until_ms},
          {"price_per_gpu_hour", optional(r.price_per_gpu_hour)}};
}

}  // namespace

std::string render_jobs_json(const Report& r) {
  nlohmann::json j = header_json(r);
  j["jobs"] = jobs_json(r.jobs);
  return util::json_text(j, 2) + "\n";
}

std::string render_json(const Report& r) {
  nlohmann::json j = header_json(r);
  j["fleet"] = {{"hours", hours_json(r.fleet)},
                {"util_avg_pct", optional(r.fleet_util_avg_pct)},
                {"idle_cost", optional(r.idle_cost)},
                {"holding_cost", optional(r.holding_cost)},
                {"fault_events", r.fault_events}};
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : r.gpus) {
    j["gpus"].push_back({{"gpu", g.gpu},
                         {"name", g.name},
                         {"uuid", g.uuid},
                         {"hours", hours_json(g.hours)},
                         {"util_avg_pct", optional(g.util_avg_pct)},
                         {"mem_used_avg_mib", optional(g.mem_used_avg_mib)},
                         {"idle_cost", optional(g.idle_cost)},
                         {"holding_cost", optional(g.holding_cost)}});
  }
  j["heatmap"] = nlohmann::json::array();
  for (const auto& d : r.heat) {
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& c : d.util_pct) cells.push_back(optional(c));
    j["heatmap"].push_back({{"day", format_iso(d.day_start_ms).substr(0, 10)}, {"util_pct_by_hour", cells}});
  }
  j["top"] = {{"users", consumers_json(r.users)},
              {"commands", consumers_json(r.commands)},
              {"containers", consumers_json(r.containers)},
              {"slurm_jobs", consumers_json(r.slurm_jobs)}};
  j["jobs"] = jobs_json(r.jobs);
  j["idle_windows"] = nlohmann::json::array();
  for (const auto& w : r.idle_windows) j["idle_windows"].push_back(window_json(w.gpu, w.start_ms, w.end_ms));
  j["holding"] = nlohmann::json::array();
  for (const auto& h : r.holding) {
    auto item = window_json(h.gpu, h.start_ms, h.end_ms);
    item["processes"] = nlohmann::json::array();
    for (const auto& p : h.processes) {
      item["processes"].push_back(
          {{"pid", p.pid}, {"user", p.user}, {"command", p.command}, {"mem_used_mib_max", p.mem_used_mib_max}});
    }
    item["holder"] = h.holder.empty() ? nlohmann::json(nullptr)
                                      : nlohmann::json{{"kind", h.holder}, {"user", h.holder_user}};
    j["holding"].push_back(item);
  }
  j["holders"] = nlohmann::json::array();
  for (const auto& h : r.holders) {
    j["holders"].push_back(
        {{"kind", h.holder}, {"user", h.user}, {"gpu_hours", h.gpu_hours}, {"incidents", h.incidents}});
  }
  const auto& z = r.zombies;
  j["zombies"] = {{"found", z.found}, {"actions", z.actions}, {"reaped", z.reaped}, {"freed_bytes", z.freed_bytes}};
  j["zombies"]["recent"] = nlohmann::json::array();
  for (const auto& a : z.recent) {
    j["zombies"]["recent"].push_back({{"gpu", a.gpu}, {"time", format_iso(a.ts_ms)}, {"pid", a.pid}, {"user", a.user},
                                      {"command", a.command}, {"outcome", a.outcome},
                                      {"freed_bytes", a.freed_bytes ? nlohmann::json(*a.freed_bytes) : nlohmann::json(nullptr)}});
  }
  const auto& b = r.backfill;
  j["backfill"] = {{"batches", b.batches},          {"requests", b.requests},
                   {"failed", b.failed},            {"prompt_tokens", b.prompt_tokens},
                   {"completion_tokens", b.completion_tokens}, {"busy_hours", b.busy_hours},
                   {"gpu_hours", b.gpu_hours}};
  // MIG devices (docs/mig.md): idle slice-hours are idle hours x slices / 7, board-hours.
  j["mig"] = nlohmann::json::array();
  for (const auto& m : r.mig) {
    j["mig"].push_back({{"gpu", m.gpu},
                        {"gpu_instance_id", m.gpu_instance},
                        {"profile", m.profile},
                        {"slices", m.slices},
                        {"hours", hours_json(m.hours)},
                        {"unmeasured_hours", m.unmeasured_hours},
                        {"idle_slice_hours", m.idle_slice_hours},
                        {"idle_cost", optional(m.idle_cost)}});
  }
  j["mig_idle_slice_hours"] = r.mig_idle_slice_hours;
  j["mig_idle_cost"] = optional(r.mig_idle_cost);
  return util::json_text(j, 2) + "\n";
}

}  // namespace tarmac::report
