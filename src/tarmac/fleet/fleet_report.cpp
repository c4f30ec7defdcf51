#include "tarmac/fleet/fleet_report.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "tarmac/fleet/prom_answer.hpp"
#include "tarmac/report/format.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::fleet {

namespace {

using detail::activity_named;
using detail::index_in;
using detail::json_or_null;
using detail::label_of;
using detail::Sample;
using nlohmann::json;

// The recorded series (docs/fleet.md "Recording rules"). The report reads only these, so a global
// Prometheus that federates `{__name__=~"tarmac:.*"}` answers it as the one that scrapes does.
constexpr const char* kClassSeconds = "tarmac:gpu_activity_seconds:increase";
constexpr const char* kUtil = "tarmac:gpu_util_percent:avg";
constexpr const char* kMemUsed = "tarmac:gpu_fb_used_mib:avg";
constexpr const char* kIdleMax = "tarmac:gpu_idle_seconds:max";
constexpr const char* kJobSeconds = "tarmac:job_gpu_activity_seconds:sampled";
constexpr const char* kPodSeconds = "tarmac:pod_gpu_activity_seconds:sampled";
constexpr const char* kUserSeconds = "tarmac:user_gpu_activity_seconds:sampled";
constexpr const char* kReaped = "tarmac:reaped_processes:increase";
constexpr const char* kBackfillRequests = "tarmac:backfill_requests:increase";
constexpr const char* kBackfillTokens = "tarmac:backfill_tokens:increase";

// Each series again per hour (its name + "1h"), by the `_over_time` function that keeps its
// meaning: a week's report then reads 168 points a series instead of 2,016, so that 8,000 GPUs
// answer within seconds. Ranges longer than a day read these: their edges are to the hour.
constexpr std::pair<const char*, const char*> kHourly[] = {
    {kClassSeconds, "sum"}, {kUtil, "avg"},         {kMemUsed, "avg"},  {kIdleMax, "max"},
    {kJobSeconds, "sum"},   {kPodSeconds, "sum"},   {kUserSeconds, "sum"}, {kReaped, "sum"},
    {kBackfillRequests, "sum"}, {kBackfillTokens, "sum"}};
constexpr long long kHourlyAfterS = 86400;

// The series a range of `range_s` seconds reads for `name`.
std::string series_for(const char* name, long long range_s) {
  return range_s > kHourlyAfterS ? std::string(name) + "1h" : std::string(name);
}

// The order of report_queries' answers.
enum Query : std::size_t { kQClass, kQUtil, kQMem, kQIdle, kQJobs, kQPods, kQUsers, kQReaped, kQRequests, kQTokens, kQueries };

constexpr std::size_t kMaxStretches = 10;
constexpr std::size_t kTextRows = 10;     // rows per table in the full text report; --by lists all
constexpr double kMaxHours = 1e9;         // beyond, an answer is not hours of a range

std::size_t slot_of(gpu::Activity a) {
  return static_cast<std::size_t>(std::find(gpu::kActivities.begin(), gpu::kActivities.end(), a) -
                                  gpu::kActivities.begin());
}

void add_hours(report::ClassHours& h, gpu::Activity a, double hours) { h.hours[slot_of(a)] += hours; }

void add_all(report::ClassHours& to, const report::ClassHours& from) {
  for (std::size_t i = 0; i < to.hours.size(); ++i) to.hours[i] += from.hours[i];
  to.unrecorded += from.unrecorded;
}

// Seconds from a sample, as hours; nullopt for a value that is not a number of seconds, or more
// than `max_h` (one GPU's series cannot hold more than the range).
std::optional<double> hours_of(const Sample& s, double max_h = kMaxHours) {
  if (!s.value || *s.value < 0 || *s.value / 3600 > max_h) return std::nullopt;
  return *s.value / 3600;
}

std::string host_of(const Sample& s) {
  std::string host = label_of(s, "hostname");
  return host.empty() ? label_of(s, "instance") : host;
}

void sort_by_held_idle(std::vector<Account>& list) {
  std::stable_sort(list.begin(), list.end(), [](const Account& a, const Account& b) {
    if (a.held_idle() != b.held_idle()) return a.held_idle() > b.held_idle();
    if (a.name != b.name) return a.name < b.name;
    return a.gpu < b.gpu;
  });
}

void price_account(Account& a, const std::optional<double>& price, bool holding_is_idle) {
  if (!price) return;
  a.idle_cost = (holding_is_idle ? a.held_idle() : a.hours.idle()) * *price;
  a.holding_cost = a.hours.of(gpu::Activity::Holding) * *price;
}

// The accounts of Slurm jobs or pods: one per name (a Slurm job id is the cluster's, a job on
// several nodes is one account), summed over its GPUs; `host` names its hosts.
void add_holders(std::vector<Account>& out, const std::vector<Sample>& samples,
                 const std::function<std::string(const Sample&)>& name_of, double max_h) {
  std::map<std::string, Account> by_name;
  std::map<std::string, std::set<std::string>> gpus;
  std::map<std::string, std::set<std::string>> hosts;
  for (const auto& s : samples) {
    const std::string name = name_of(s);
    const auto a = activity_named(label_of(s, "class"));
    const auto h = hours_of(s, max_h);
    if (name.empty() || !a || !h) continue;
    Account& acc = by_name[name];
    acc.name = name;
    add_hours(acc.hours, *a, *h);
    gpus[name].insert(label_of(s, "instance") + '\n' + label_of(s, "gpu"));
    hosts[name].insert(host_of(s));
  }
  for (auto& [name, acc] : by_name) {
    acc.gpus = gpus[name].size();
    const auto& on = hosts[name];
    acc.host = *on.begin();
    if (on.size() > 1) acc.host += fmt::format(" +{}", on.size() - 1);
    out.push_back(std::move(acc));
  }
}

using report::bold;

std::string pct(double part, double whole) { return report::format_share(part, whole); }

std::string hours_cell(double h) { return report::format_hours(h); }

// One table of accounts: what the first column names, then the classes, the share held idle,
// utilization where known, and the cost.
void accounts_table(std::string& out, const char* first, const std::vector<Account>& rows, std::size_t limit,
                    bool with_host, bool with_cost) {
  std::size_t width = std::max<std::size_t>(4, std::string_view(first).size());
  std::size_t host_width = 4;
  const std::size_t n = std::min(limit, rows.size());
  for (std::size_t i = 0; i < n; ++i) {
    width = std::max(width, std::min<std::size_t>(48, util::terminal_text(rows[i].name).size()));
    host_width = std::max(host_width, std::min<std::size_t>(32, util::terminal_text(rows[i].host).size()));
  }
  const bool with_gpu = n > 0 && rows.front().gpu.has_value();
  out += fmt::format("  {:<{}}", first, width);
  if (with_gpu) out += fmt::format(" {:>3}", "GPU");
  if (with_host) out += fmt::format(" {:<{}}", "HOST", host_width);
  out += fmt::format(" {:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>5}", "GPUS", "GPU-TIME", "BUSY", "STARVED",
                     "HOLDING", "IDLE", "NO DATA", "IDLE %", "UTIL");
  if (with_cost) out += fmt::format(" {:>11}", "IDLE COST");
  out += "\n";
  for (std::size_t i = 0; i < n; ++i) {
    const Account& a = rows[i];
    const double recorded = a.hours.recorded();
    out += fmt::format("  {:<{}}", util::terminal_text(a.name), width);
    if (with_gpu) out += fmt::format(" {:>3}", a.gpu.value_or(0));
    if (with_host) out += fmt::format(" {:<{}}", util::terminal_text(a.host), host_width);
    out += fmt::format(" {:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>5}", a.gpus, hours_cell(recorded),
                       hours_cell(a.hours.of(gpu::Activity::Busy)), hours_cell(a.hours.of(gpu::Activity::Starved)),
                       hours_cell(a.hours.of(gpu::Activity::Holding)), hours_cell(a.hours.idle()),
                       a.hours.unrecorded > 0 ? hours_cell(a.hours.unrecorded) : std::string("-"),
                       pct(a.held_idle(), recorded),
                       a.util_avg_pct ? fmt::format("{:.0f}%", *a.util_avg_pct) : std::string("-"));
    if (with_cost) out += fmt::format(" {:>11}", a.idle_cost ? report::format_money(*a.idle_cost) : std::string("-"));
    out += "\n";
  }
  if (rows.size() > n) out += fmt::format("  ... and {} more\n", rows.size() - n);
}

json hours_json(const report::ClassHours& h) {
  json out = json::object();
  for (const auto a : gpu::kActivities) out[gpu::to_string(a)] = h.of(a);
  out["unrecorded"] = h.unrecorded;
  return out;
}


// An account in the single-host report's words where they mean the same (`hours`, `gpu_hours`,
// `held_idle_gpu_hours`, `idle_cost`); `key` names what it is the account of: "host", "job", "user".
json account_json(const Account& a, const char* key) {
  json j = json::object();
  if (a.gpu) {
    j["host"] = a.host;
    j["gpu"] = *a.gpu;
    j["uuid"] = a.uuid;
    j["model"] = a.model;
  } else {
    j[key] = a.name;
    if (std::string_view(key) == "job") j["host"] = a.host;
    if (std::string_view(key) != "user") j["gpu_count"] = a.gpus;
  }
  j["gpu_hours"] = a.hours.recorded();
  j["held_idle_gpu_hours"] = a.held_idle();
  j["hours"] = hours_json(a.hours);
  if (std::string_view(key) != "user") j["util_avg_pct"] = json_or_null(a.util_avg_pct);
  if (a.gpu) j["mem_used_avg_mib"] = json_or_null(a.mem_used_avg_mib);
  j["idle_cost"] = json_or_null(a.idle_cost);
  j["holding_cost"] = json_or_null(a.holding_cost);
  return j;
}

json accounts_json(const std::vector<Account>& list, const char* key) {
  json out = json::array();
  for (const auto& a : list) out.push_back(account_json(a, key));
  return out;
}

}  // namespace

std::string recording_rules_group(long long interval_ms) {
  const std::string every = util::format_duration_ms(interval_ms);
  const long long seconds = interval_ms / 1000;
  // Each class of a GPU at an evaluation, as the seconds of the interval: a sample, not an
  // integral, so a job shorter than the interval may be missed or counted whole.
  // The class series is made unique per GPU (topk), so that two scrape jobs of one agent, or a
  // restart's stale series, can never make the match many-to-many and fail the whole rule.
  const auto sampled = [&](const char* info, const char* labels) {
    return fmt::format("group by (instance, hostname, gpu, uuid, {1}) ({0}) * on (instance, gpu) group_left (class) "
                       "topk by (instance, gpu) (1, tarmac_gpu_activity == 1) * {2}",
                       info, labels, seconds);
  };
  // What a counter added in the interval, counting a series that appeared in it (an agent's reaper
  // outcome has no series before its first action) from zero. "Appeared": no point in the day
  // before, so that a scrape that failed (and left the series stale for a moment) does not count
  // the whole counter again.
  const auto added = [&](const char* counter) {
    return fmt::format("(increase({0}[{1}]) and last_over_time({0}[1d] offset {1})) or ({0} unless "
                       "last_over_time({0}[1d] offset {1}))",
                       counter, every);
  };
  const std::pair<const char*, std::string> rules[] = {
      // max, not sum, over what differs only in the scrape job: the same agent scraped twice.
      {kClassSeconds,
       fmt::format("max by (instance, hostname, gpu, uuid, class) (increase(tarmac_gpu_activity_seconds_total[{}])) > 0",
                   every)},
      {kUtil, fmt::format("max by (instance, gpu, uuid, modelName) (label_replace(avg_over_time(DCGM_FI_DEV_GPU_UTIL[{}]), "
                          "\"uuid\", \"$1\", \"UUID\", \"(.+)\"))",
                          every)},
      {kMemUsed, fmt::format("max by (instance, gpu, uuid) (label_replace(avg_over_time(DCGM_FI_DEV_FB_USED[{}]), "
                             "\"uuid\", \"$1\", \"UUID\", \"(.+)\"))",
                             every)},
      {kIdleMax,
       fmt::format("max by (instance, hostname, gpu, uuid) (max_over_time(tarmac_gpu_idle_seconds[{}])) > 0", every)},
      {kJobSeconds, sampled("tarmac_gpu_job_info", "slurm_job")},
      {kPodSeconds, sampled("tarmac_gpu_pod_info", "namespace, pod")},
      {kUserSeconds, sampled("tarmac_process_info", "user")},
      {kReaped, fmt::format("sum by (instance, hostname, outcome) (max by (instance, hostname, gpu, uuid, outcome) ({})) > 0",
                            added("tarmac_reaped_processes_total"))},
      {kBackfillRequests,
       fmt::format("max by (instance, hostname, state) ({}) > 0", added("tarmac_backfill_requests_total"))},
      {kBackfillTokens, fmt::format("max by (instance, hostname, kind) ({}) > 0", added("tarmac_backfill_tokens_total"))},
  };
  std::string out = fmt::format(
      "  # The fleet report's series (`tarmac report --prometheus`, docs/fleet.md): what each {} added.\n"
      "  - name: tarmac-recording\n"
      "    interval: {}\n"
      "    rules:\n",
      every, every);
  for (const auto& [name, expr] : rules) {
    out += fmt::format("      - record: {}\n        expr: '{}'\n", name, expr);
  }
  // The hourly group's evaluations fall on other milliseconds than the first group's (each group's
  // offset in its interval is a hash of its name), so no point is summed into two hours; each reads
  // the hour that ended an interval ago, whose points the first group has surely written.
  out += "  - name: tarmac-recording-1h\n    interval: 1h\n    rules:\n";
  for (const auto& [name, over_time] : kHourly) {
    out += fmt::format("      - record: {0}1h\n        expr: '{1}_over_time({0}[1h] offset {2})'\n", name, over_time,
                       every);
  }
  return out;
}

std::vector<std::string> report_queries(long long range_s) {
  const std::string r = fmt::format("{}s", range_s);
  const auto n = [range_s](const char* name) { return series_for(name, range_s); };
  // Each series once (max by its identity: a series federated and also recorded again differs only
  // in `job`), then summed where the report adds GPUs up.
  std::vector<std::string> q(kQueries);
  q[kQClass] = fmt::format("max by (instance, hostname, gpu, uuid, class) (sum_over_time({}[{}]))", n(kClassSeconds), r);
  q[kQUtil] = fmt::format("max by (instance, uuid, modelName) (avg_over_time({}[{}]))", n(kUtil), r);
  q[kQMem] = fmt::format("max by (instance, uuid) (avg_over_time({}[{}]))", n(kMemUsed), r);
  q[kQIdle] = fmt::format("topk({}, max by (instance, hostname, gpu) (max_over_time({}[{}])))", kMaxStretches,
                          n(kIdleMax), r);
  q[kQJobs] = fmt::format("max by (instance, hostname, gpu, slurm_job, class) (sum_over_time({}[{}]))", n(kJobSeconds), r);
  q[kQPods] = fmt::format("max by (instance, hostname, gpu, namespace, pod, class) (sum_over_time({}[{}]))",
                          n(kPodSeconds), r);
  q[kQUsers] = fmt::format("sum by (user, class) (max by (instance, gpu, user, class) (sum_over_time({}[{}])))",
                           n(kUserSeconds), r);
  q[kQReaped] = fmt::format("sum by (outcome) (max by (instance, outcome) (sum_over_time({}[{}])))", n(kReaped), r);
  q[kQRequests] = fmt::format("sum by (state) (max by (instance, state) (sum_over_time({}[{}])))", n(kBackfillRequests), r);
  q[kQTokens] = fmt::format("sum by (kind) (max by (instance, kind) (sum_over_time({}[{}])))", n(kBackfillTokens), r);
  return q;
}

std::string heat_query(long long range_s) { return fmt::format("avg(avg_over_time({}[1h]))", series_for(kUtil, range_s)); }

Result<FleetReport> fleet_report_from_prometheus(const std::vector<std::string>& answers,
                                                 const std::vector<std::string>& heat_answers, long long since_ms,
                                                 long long until_ms, std::optional<double> price_per_gpu_hour) {
  if (answers.size() != kQueries) return make_error(Error::Code::Internal, "fleet report: an answer per query expected");
  const auto queries = report_queries((until_ms - since_ms) / 1000);
  std::vector<std::vector<Sample>> v(kQueries);
  for (std::size_t i = 0; i < kQueries; ++i) {
    TARMAC_TRY_ASSIGN(v[i], detail::vector_of(answers[i], queries[i].c_str()));
  }
  const std::string heat_q = heat_query((until_ms - since_ms) / 1000);
  std::vector<std::pair<double, double>> heat;
  for (const auto& answer : heat_answers) {
    TARMAC_TRY_ASSIGN(const auto part, detail::matrix_of(answer, heat_q.c_str()));
    if (!part.empty()) heat.insert(heat.end(), part.front().points.begin(), part.front().points.end());
  }

  FleetReport r;
  r.since_ms = since_ms;
  r.until_ms = until_ms;
  r.price_per_gpu_hour = price_per_gpu_hour;
  const double range_h = static_cast<double>(until_ms - since_ms) / 3600e3;
  // One GPU's series holds at most the range and the interval recorded at its start (at most 1 h).
  const double gpu_max_h = range_h + 1;

  // GPUs: keyed by scrape target and UUID, as `tarmac fleet` joins them.
  std::map<std::string, Account> gpus;
  const auto key = [](const Sample& s) { return label_of(s, "instance") + '\n' + label_of(s, "uuid"); };
  for (const auto& s : v[kQClass]) {
    const auto index = index_in(label_of(s, "gpu"));
    const auto a = activity_named(label_of(s, "class"));
    const auto h = hours_of(s, gpu_max_h);
    if (!index || !a || !h || label_of(s, "uuid").empty()) continue;
    Account& g = gpus[key(s)];
    g.name = host_of(s);
    g.host = g.name;
    g.gpu = *index;
    g.uuid = label_of(s, "uuid");
    g.gpus = 1;
    add_hours(g.hours, *a, *h);
  }
  for (const auto& s : v[kQUtil]) {
    if (const auto it = gpus.find(key(s)); it != gpus.end()) {
      it->second.model = label_of(s, "modelName");
      if (s.value && *s.value >= 0 && *s.value <= 100) it->second.util_avg_pct = s.value;
    }
  }
  for (const auto& s : v[kQMem]) {
    if (const auto it = gpus.find(key(s)); it != gpus.end() && s.value && *s.value >= 0 && *s.value <= 1e12) {
      it->second.mem_used_avg_mib = s.value;
    }
  }
  std::map<std::string, Account> hosts;
  std::map<std::string, std::pair<double, std::size_t>> host_util;  // sum, count
  double util_sum = 0;
  std::size_t util_n = 0;
  for (auto& [k, g] : gpus) {
    // The rules record an interval at its end, so the range may hold up to one more interval than
    // it spans: that is rounding, not time the GPU was unseen.
    g.hours.unrecorded = std::max(0.0, range_h - g.hours.recorded());
    price_account(g, price_per_gpu_hour, false);
    add_all(r.fleet, g.hours);
    Account& h = hosts[g.host];
    h.name = g.host;
    ++h.gpus;
    add_all(h.hours, g.hours);
    if (g.util_avg_pct) {
      host_util[g.host].first += *g.util_avg_pct;
      ++host_util[g.host].second;
      util_sum += *g.util_avg_pct;
      ++util_n;
    }
    r.gpus.push_back(g);
  }
  for (auto& [name, h] : hosts) {
    if (const auto it = host_util.find(name); it != host_util.end() && it->second.second > 0) {
      h.util_avg_pct = it->second.first / static_cast<double>(it->second.second);
    }
    price_account(h, price_per_gpu_hour, false);
    r.hosts.push_back(std::move(h));
  }
  if (util_n > 0) r.fleet_util_avg_pct = util_sum / static_cast<double>(util_n);
  if (price_per_gpu_hour) {
    r.idle_cost = r.fleet.idle() * *price_per_gpu_hour;
    r.holding_cost = r.fleet.of(gpu::Activity::Holding) * *price_per_gpu_hour;
  }
  sort_by_held_idle(r.gpus);
  sort_by_held_idle(r.hosts);

  add_holders(r.jobs, v[kQJobs], [](const Sample& s) { return label_of(s, "slurm_job"); }, gpu_max_h);
  add_holders(
      r.jobs, v[kQPods],
      [](const Sample& s) {
        return label_of(s, "pod").empty() ? std::string() : "pod/" + label_of(s, "namespace") + "/" + label_of(s, "pod");
      },
      gpu_max_h);
  for (auto& j : r.jobs) price_account(j, price_per_gpu_hour, true);
  sort_by_held_idle(r.jobs);

  std::map<std::string, Account> users;
  for (const auto& s : v[kQUsers]) {
    const std::string user = label_of(s, "user");
    const auto a = activity_named(label_of(s, "class"));
    const auto h = hours_of(s);
    if (user.empty() || !a || !h) continue;
    users[user].name = user;
    add_hours(users[user].hours, *a, *h);
  }
  for (auto& [name, u] : users) {
    price_account(u, price_per_gpu_hour, true);
    r.users.push_back(std::move(u));
  }
  std::stable_sort(r.users.begin(), r.users.end(),
                   [](const Account& a, const Account& b) { return a.hours.recorded() > b.hours.recorded(); });

  for (const auto& s : v[kQIdle]) {
    const auto index = index_in(label_of(s, "gpu"));
    // The agent counts a stretch from its start, which may be before the range: only the range's part.
    if (index && s.value && *s.value > 0) {
      r.idle_stretches.push_back({host_of(s), *index, std::min(*s.value, range_h * 3600)});
    }
  }
  std::stable_sort(r.idle_stretches.begin(), r.idle_stretches.end(),
                   [](const IdleStretch& a, const IdleStretch& b) { return a.seconds > b.seconds; });
  if (r.idle_stretches.size() > kMaxStretches) r.idle_stretches.resize(kMaxStretches);

  const auto counts = [](std::map<std::string, double>& to, const std::vector<Sample>& samples, const char* label) {
    for (const auto& s : samples) {
      if (s.value && *s.value > 0 && *s.value < 1e15 && !label_of(s, label).empty()) {
        to[label_of(s, label)] += std::round(*s.value);
      }
    }
  };
  counts(r.reaped, v[kQReaped], "outcome");
  counts(r.backfill_requests, v[kQRequests], "state");
  counts(r.backfill_tokens, v[kQTokens], "kind");

  // The heat map: each point is the fleet's mean over the hour that ends at its time. (Over a day,
  // the hourly series' means were recorded at the hourly group's minute of the hour, an interval
  // late: a cell may show the hour before it. docs/fleet.md says so.)
  std::map<long long, report::HeatDay> days;
  {
    for (const auto& [t, value] : heat) {
      if (t < 3600 || t > 1e11 || value < 0 || value > 100) continue;
      const long long hour_start_ms = (static_cast<long long>(t) - 3600) / 3600 * 3600 * 1000;
      if (hour_start_ms < since_ms / 3600000 * 3600000 || hour_start_ms >= until_ms) continue;
      const long long day = hour_start_ms / 86400000 * 86400000;
      auto& d = days[day];
      d.day_start_ms = day;
      d.util_pct[static_cast<std::size_t>((hour_start_ms - day) / 3600000)] = value;
    }
  }
  for (auto& [day, d] : days) r.heat.push_back(d);
  return r;
}

std::string render_report_text(const FleetReport& r, ReportBy by, bool color) {
  const bool cost = r.price_per_gpu_hour.has_value();
  std::set<std::string> host_names;
  for (const auto& g : r.gpus) host_names.insert(g.host);
  std::string out = bold(fmt::format("tarmac report ({}): {} to {} UTC ({}), {} GPU{} on {} host{}",
                                     util::terminal_text(r.source), report::format_utc(r.since_ms),
                                     report::format_utc(r.until_ms),
                                     report::format_hours(static_cast<double>(r.until_ms - r.since_ms) / 3600e3),
                                     r.gpus.size(), r.gpus.size() == 1 ? "" : "s", host_names.size(),
                                     host_names.size() == 1 ? "" : "s"),
                         color) +
                    "\n";
  if (r.gpus.empty()) {
    return out + "No recorded series in this range: Prometheus needs tarmac's recording rules (`tarmac alerts "
                 "--prometheus-rules`, docs/fleet.md) and agents to scrape.\n";
  }
  switch (by) {
    case ReportBy::Gpu:
      out += "Every GPU, the most GPU-hours held idle first.\n\n";
      accounts_table(out, "HOST", r.gpus, r.gpus.size(), false, cost);
      return out;
    case ReportBy::Host:
      out += "Every host, the most GPU-hours held idle first.\n\n";
      accounts_table(out, "HOST", r.hosts, r.hosts.size(), false, cost);
      return out;
    case ReportBy::Job:
      if (r.jobs.empty()) return out + "No Slurm job or Kubernetes pod held a GPU in this range.\n";
      out += "Slurm jobs and pods, the most GPU-hours held idle first (reserved-idle: nothing ran; holding: memory "
             "held at 0 %).\n\n";
      accounts_table(out, "JOB", r.jobs, r.jobs.size(), true, cost);
      return out;
    case ReportBy::User:
      if (r.users.empty()) return out + "No process of any user ran on a GPU in this range.\n";
      out += "Users whose processes were on GPUs, the most GPU-hours first.\n\n";
      accounts_table(out, "USER", r.users, r.users.size(), false, cost);
      return out;
    case ReportBy::Report: break;
  }
  const double rec = r.fleet.recorded();
  out += fmt::format("Recorded {:.1f} GPU-hours: busy {} ({}), starved {}, holding {}, idle {} ({}), fault {}", rec,
                     report::format_hours(r.fleet.of(gpu::Activity::Busy)), pct(r.fleet.of(gpu::Activity::Busy), rec),
                     report::format_hours(r.fleet.of(gpu::Activity::Starved)),
                     report::format_hours(r.fleet.of(gpu::Activity::Holding)), report::format_hours(r.fleet.idle()),
                     pct(r.fleet.idle(), rec), report::format_hours(r.fleet.of(gpu::Activity::Fault)));
  // Every GPU's range may miss up to one recording interval at its edges: under 1 % is that.
  out += r.fleet.unrecorded > 0.01 * (rec + r.fleet.unrecorded)
             ? fmt::format("; not recorded {}.\n", report::format_hours(r.fleet.unrecorded))
             : ".\n";
  if (r.fleet_util_avg_pct) out += fmt::format("Mean utilization {:.1f} %.\n", *r.fleet_util_avg_pct);
  if (cost) {
    out += bold(fmt::format("Cost of idle GPUs: {}; of GPUs held doing nothing: {} (at {} per GPU-hour).",
                            report::format_money(r.idle_cost.value_or(0)), report::format_money(r.holding_cost.value_or(0)),
                            report::format_money(*r.price_per_gpu_hour)),
                color) +
           "\n";
  }
  out += "\nHosts, the most held idle first (all: --by host):\n";
  accounts_table(out, "HOST", r.hosts, kTextRows, false, cost);
  out += "\nGPUs, the most held idle first (all: --by gpu):\n";
  accounts_table(out, "HOST", r.gpus, kTextRows, false, cost);

  if (!r.heat.empty()) out += report::render_heat_text(r.heat);
  if (!r.users.empty()) {
    out += "\nGPU-hours by user (all: --by user):\n";
    accounts_table(out, "USER", r.users, kTextRows, false, cost);
  }
  std::vector<Account> idle_jobs;
  for (const auto& j : r.jobs) {
    if (j.held_idle() > 0 && idle_jobs.size() < kTextRows) idle_jobs.push_back(j);
  }
  if (!idle_jobs.empty()) {
    out += "\nSlurm jobs and pods that held GPUs idle (all jobs: --by job):\n";
    accounts_table(out, "JOB", idle_jobs, kTextRows, true, cost);
  }
  if (!r.idle_stretches.empty()) {
    out += "\nLongest idle stretches (where backfill would fit):\n";
    for (const auto& s : r.idle_stretches) {
      out += fmt::format("  {} GPU {:<3} {}\n", util::terminal_text(s.host), s.gpu,
                         report::format_hours(s.seconds / 3600));
    }
  }
  double reaped = 0;
  for (const auto& [outcome, n] : r.reaped) reaped += n;
  out += fmt::format("\nZombies (docs/reap.md): {:.0f} reaper actions", reaped);
  if (!r.reaped.empty()) {
    std::vector<std::string> parts;
    for (const auto& [outcome, n] : r.reaped) parts.push_back(fmt::format("{:.0f} {}", n, util::terminal_text(outcome)));
    out += fmt::format(" ({})", fmt::join(parts, ", "));
  }
  out += "\n";
  double requests = 0;
  for (const auto& [state, n] : r.backfill_requests) requests += state == "retried" ? 0 : n;
  if (requests > 0) {
    double tokens = 0;
    for (const auto& [kind, n] : r.backfill_tokens) tokens += n;
    out += fmt::format("Idle hours turned into work (docs/backfill.md): {:.0f} backfill requests ({:.0f} failed), {:.0f} "
                       "tokens\n",
                       requests, r.backfill_requests.contains("failed") ? r.backfill_requests.at("failed") : 0.0, tokens);
  }
  return out;
}

std::string render_report_json(const FleetReport& r, ReportBy by) {
  // Not the single-host report's document (docs/report.md): its own kind, schema 1 (docs/fleet.md).
  json out = {{"kind", "fleet-report"},
              {"schema", 1},
              {"source", r.source},
              {"since", report::format_iso(r.since_ms)},
              {"until", report::format_iso(r.until_ms)},
              {"since_ms", r.since_ms},
              {"until_ms", r.until_ms},
              {"price_per_gpu_hour", json_or_null(r.price_per_gpu_hour)}};
  switch (by) {
    case ReportBy::Gpu: out["gpus"] = accounts_json(r.gpus, "gpu"); break;
    case ReportBy::Host: out["hosts"] = accounts_json(r.hosts, "host"); break;
    case ReportBy::Job: out["jobs"] = accounts_json(r.jobs, "job"); break;
    case ReportBy::User: out["users"] = accounts_json(r.users, "user"); break;
    case ReportBy::Report: {
      out["fleet"] = {{"hours", hours_json(r.fleet)},
                      {"util_avg_pct", json_or_null(r.fleet_util_avg_pct)},
                      {"idle_cost", json_or_null(r.idle_cost)},
                      {"holding_cost", json_or_null(r.holding_cost)}};
      out["hosts"] = accounts_json(r.hosts, "host");
      out["gpus"] = accounts_json(r.gpus, "gpu");
      out["jobs"] = accounts_json(r.jobs, "job");
      out["users"] = accounts_json(r.users, "user");
      json heat = json::array();
      for (const auto& d : r.heat) {
        json cells = json::array();
        for (const auto& c : d.util_pct) cells.push_back(json_or_null(c));
        heat.push_back({{"day", report::format_iso(d.day_start_ms).substr(0, 10)}, {"util_pct_by_hour", std::move(cells)}});
      }
      out["heatmap"] = std::move(heat);
      json stretches = json::array();
      for (const auto& s : r.idle_stretches) stretches.push_back({{"host", s.host}, {"gpu", s.gpu}, {"seconds", s.seconds}});
      out["idle_stretches"] = std::move(stretches);
      out["reaped"] = r.reaped;
      out["backfill"] = {{"requests_by_state", r.backfill_requests}, {"tokens_by_kind", r.backfill_tokens}};
      break;
    }
  }
  return util::json_text(out, 2) + "\n";
}

}  // namespace tarmac::fleet
