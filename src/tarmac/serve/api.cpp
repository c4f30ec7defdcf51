#include "tarmac/serve/api.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tarmac/diagnose/backfill_json.hpp"
#include "tarmac/store/reader.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::serve {

namespace {

using nlohmann::json;

constexpr long long kMaxPoints = 5000;  // per GPU and request
constexpr long long kHourMs = 3600LL * 1000;

template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json opt_scaled(const std::optional<unsigned>& v, double scale) {
  return v ? json(static_cast<double>(*v) * scale) : json(nullptr);
}

json mib(const std::optional<std::uint64_t>& bytes) {
  return bytes ? json(*bytes / util::kMiB) : json(nullptr);
}

Error bad(std::string message) { return make_error(Error::Code::Invalid, std::move(message)); }

// "1h" (ago, from now) or epoch milliseconds (a bare number), up to a year from now.
Result<long long> parse_when(const std::string& text, long long now_ms, const char* what) {
  constexpr long long kYearMs = 366LL * 24 * 3600 * 1000;
  std::optional<long long> when;
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    when = util::parse_int(text);  // nullopt when it overflows
  } else if (auto ago = util::parse_duration_ms(text); ago && *ago >= 0) {
    when = *ago >= now_ms ? 0 : now_ms - *ago;  // a range reaching before 1970 starts there
  }
  if (!when || *when < 0 || *when > now_ms + kYearMs) {
    return bad(fmt::format("{}={}: expected a duration ago (like 1h) or milliseconds since the epoch", what, text));
  }
  return *when;
}

// What /api/v1/history was asked for, checked.
struct HistoryQuery {
  long long since = 0;
  long long until = 0;
  long long step = 0;
  std::vector<unsigned> gpus;  // empty: every GPU
  // Whether the samples themselves are read (fine steps, short ranges) rather than rollups.
  [[nodiscard]] bool raw() const { return step < 60 * 1000 || until - since <= 6 * kHourMs; }
};

Result<HistoryQuery> parse_history_query(const std::map<std::string, std::string>& query, long long now_ms) {
  for (const auto& [name, value] : query) {
    if (name != "gpu" && name != "since" && name != "until" && name != "step") {
      return bad(fmt::format("unknown parameter '{}': expected gpu, since, until, step", name));
    }
  }
  const auto get = [&](const char* name, const char* fallback) {
    auto it = query.find(name);
    return it == query.end() || it->second.empty() ? std::string(fallback) : it->second;
  };
  HistoryQuery q;
  TARMAC_TRY_ASSIGN(q.since, parse_when(get("since", "1h"), now_ms, "since"));
  TARMAC_TRY_ASSIGN(q.until, parse_when(get("until", "0s"), now_ms, "until"));
  if (q.until <= q.since) return bad("since must be before until");
  q.step = std::max(1000LL, (q.until - q.since) / 120);
  if (auto it = query.find("step"); it != query.end() && !it->second.empty()) {
    auto s = util::parse_duration_ms(it->second);
    if (!s || *s < 1000) return bad(fmt::format("step={}: expected a duration of at least 1s", it->second));
    q.step = *s;
  }
  if ((q.until - q.since) / q.step > kMaxPoints) {
    return bad(fmt::format("{} points per GPU is too many (at most {}): use a larger step",
                           (q.until - q.since) / q.step, kMaxPoints));
  }
  if (auto it = query.find("gpu"); it != query.end() && !it->second.empty()) {
    for (const auto& part : util::split(it->second, ',')) {
      auto n = util::parse_int(util::trim(part));
      if (!n || *n < 0 || *n > 1023) return bad(fmt::format("gpu={}: expected GPU indices like 0,1", it->second));
      q.gpus.push_back(static_cast<unsigned>(*n));
    }
  }
  return q;
}

// One point of a GPU's history: the average of each value over `step`, and the class seen most.
struct Bucket {
  struct Mean {
    double sum = 0;
    long long n = 0;
    void add(const std::optional<double>& v) {
      if (v) {
        sum += *v;
        ++n;
      }
    }
    [[nodiscard]] json value() const { return n ? json(sum / static_cast<double>(n)) : json(nullptr); }
  };
  Mean util, mem_util, mem, power, temp;
  std::map<gpu::Activity, long long> classes;

  void add(const store::GpuSample& s) {
    const auto as = [](const std::optional<long long>& v) {
      return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
    };
    util.add(as(s.util_pct));
    mem_util.add(as(s.mem_util_pct));
    mem.add(as(s.mem_used_mib));
    power.add(as(s.power_w));
    temp.add(as(s.temp_c));
    ++classes[s.activity];
  }
  void add(const store::Rollup& r) {
    util.add(r.util_avg);
    mem_util.add(r.mem_util_avg);
    mem.add(r.mem_used_mib_avg);
    power.add(r.power_w_avg);
    temp.add(static_cast<double>(r.temp_c_max));
  }
  [[nodiscard]] json point(long long ts_ms) const {
    json activity = nullptr;
    if (!classes.empty()) {
      const auto most = std::max_element(classes.begin(), classes.end(),
                                         [](const auto& a, const auto& c) { return a.second < c.second; });
      activity = gpu::to_string(most->first);
    }
    return {{"ts_ms", ts_ms},         {"util_gpu_pct", util.value()}, {"util_mem_pct", mem_util.value()},
            {"mem_used_mib", mem.value()}, {"power_w", power.value()},     {"temp_c", temp.value()},
            {"activity", activity}};
  }
};

// Per GPU, its buckets by start time.
using Buckets = std::map<unsigned, std::map<long long, Bucket>>;

// The samples, or for long ranges the minute or hour rollups, in buckets of the query's step.
Result<Buckets> read_buckets(store::Reader& reader, const HistoryQuery& q) {
  const store::TimeRange range{q.since, q.until};
  Buckets buckets;
  if (q.raw()) {
    TARMAC_TRY_ASSIGN(auto samples, reader.samples(range, q.gpus));
    for (const auto& s : samples) buckets[s.gpu][q.since + (s.ts_ms - q.since) / q.step * q.step].add(s);
    return buckets;
  }
  const auto level =
      q.step >= kHourMs && q.until - q.since > 8 * 24 * kHourMs ? store::Level::Hours : store::Level::Minutes;
  TARMAC_TRY_ASSIGN(auto rollups, reader.rollups(level, range, q.gpus));
  for (const auto& r : rollups) {
    buckets[r.gpu][q.since + (std::max(r.ts_ms, q.since) - q.since) / q.step * q.step].add(r);
  }
  return buckets;
}

}  // namespace

std::string gpus_json(const LiveView& view, const std::string& hostname, const std::vector<FiringAlert>& alerts,
                      const std::vector<GpuBatch>& batches, Commands commands) {
  json gpus = json::array();
  for (const auto& d : view.snapshot.devices) {
    const auto cls = view.classes.find(d.id.index);
    json backfill = json::array();
    for (const auto& b : batches) {
      if (!d.id.uuid || b.uuid != *d.id.uuid) continue;
      backfill.push_back(diagnose::backfill_json({b.model, b.server, b.answered, b.requests}));
    }
    json idle_seconds = nullptr;  // idle or reserved-idle without a break, for how long
    if (const auto c = view.counters.find(d.id.index); c != view.counters.end() && c->second.idle_since_ms) {
      idle_seconds = static_cast<double>(view.ts_ms - *c->second.idle_since_ms) / 1000.0;
    }
    json jobs = json::array();
    if (const auto it = view.jobs.find(d.id.index); it != view.jobs.end()) jobs = it->second;
    json pods = json::array();
    if (const auto it = view.pods.find(d.id.index); it != view.pods.end()) {
      for (const auto& p : it->second) {
        pods.push_back({{"pod", p.name}, {"namespace", p.namespace_}, {"container", p.container}});
      }
    }
    // Its MIG devices (docs/mig.md): no utilization, which MIG mode does not give; each one's class.
    json mig = json::array();
    const auto mig_classes = view.mig_classes.find(d.id.index);
    for (std::size_t k = 0; k < d.mig.size(); ++k) {
      const gpu::MigDevice& m = d.mig[k];
      const bool classed = mig_classes != view.mig_classes.end() && k < mig_classes->second.size();
      const auto on = std::count_if(d.processes.begin(), d.processes.end(), [k](const auto& p) { return p.mig == k; });
      mig.push_back({{"index", m.index},
                     {"uuid", opt(m.uuid)},
                     {"profile", opt(m.profile)},
                     {"gpu_instance_id", opt(m.gpu_instance_id)},
                     {"slices", opt(m.slices)},
                     {"mem_used_mib", mib(m.mem_used_bytes)},
                     {"mem_total_mib", mib(m.mem_total_bytes)},
                     {"gpm_sm_active_pct", opt(m.gpm_sm_active_pct)},
                     {"activity", classed ? json(gpu::to_string(mig_classes->second[k].activity)) : json(nullptr)},
                     {"processes", on}});
    }
    gpus.push_back({{"index", d.id.index},
                    {"uuid", opt(d.id.uuid)},
                    {"name", opt(d.id.name)},
                    {"pci_bus_id", opt(d.id.pci_bus_id)},
                    {"activity", cls == view.classes.end() ? json(nullptr) : json(gpu::to_string(cls->second))},
                    {"util_gpu_pct", opt(d.sample.util_gpu_pct)},
                    {"util_mem_pct", opt(d.sample.util_mem_pct)},
                    {"mem_used_mib", mib(d.sample.mem_used_bytes)},
                    {"mem_total_mib", mib(d.id.mem_total_bytes)},
                    {"temp_c", opt(d.sample.temp_c)},
                    {"power_w", opt_scaled(d.sample.power_mw, 0.001)},
                    {"power_limit_w", opt_scaled(d.modes.enforced_power_limit_mw, 0.001)},
                    {"clock_sm_mhz", opt(d.sample.clock_sm_mhz)},
                    {"processes", d.processes.size()},
                    {"backfill", std::move(backfill)},
                    {"idle_seconds", std::move(idle_seconds)},
                    {"slurm_jobs", std::move(jobs)},
                    {"pods", std::move(pods)},
                    {"lost", opt(d.lost)},
                    {"mig_mode_current", opt(d.modes.mig_mode_current)},
                    {"mig", std::move(mig)}});
  }
  json firing = json::array();
  for (const auto& a : alerts) {
    firing.push_back({{"rule", a.rule},
                      {"severity", a.severity},
                      {"gpu", opt(a.gpu)},
                      {"summary", commands == Commands::Full ? a.summary : a.brief_summary},
                      {"since_ms", a.since_ms}});
  }
  json out = {{"hostname", hostname},
              {"driver_version", opt(view.snapshot.driver_version)},
              {"timestamp_ms", view.ts_ms},
              {"gpus", std::move(gpus)},
              {"alerts", std::move(firing)}};
  return util::json_text(out);
}

std::string processes_json(const LiveView& view, Commands commands) {
  json procs = json::array();
  for (const auto& d : view.snapshot.devices) {
    for (const auto& p : d.processes) {
      json container = nullptr;
      if (p.host.container) {
        container = p.host.container->id.empty() ? p.host.container->runtime
                                                 : p.host.container->runtime + ":" + p.host.container->id.substr(0, 12);
      }
      procs.push_back({{"gpu", d.id.index},
                       {"uuid", opt(d.id.uuid)},
                       {"pid", p.pid},
                       {"user", opt(p.host.user)},
                       {"command", shown_command(p, commands)},
                       {"container", container},
                       {"job", opt(p.host.slurm_job_id)},
                       {"used_mib", mib(p.used_mem_bytes)},
                       {"sm_util_pct", opt(p.sm_util_pct)},
                       {"mig", opt(p.mig)}});  // its MIG device, by position in the GPU's "mig"
    }
  }
  return util::json_text(json{{"timestamp_ms", view.ts_ms}, {"processes", std::move(procs)}});
}

Result<std::string> history_json(const std::string& db_path, const std::map<std::string, std::string>& query,
                                 long long now_ms) {
  TARMAC_TRY_ASSIGN(const HistoryQuery q, parse_history_query(query, now_ms));
  auto opened = store::Reader::open(db_path);
  if (!opened.ok()) {
    Error e = opened.error();
    e.code = Error::Code::Io;  // the store, not the request: not a 400
    return e;
  }
  TARMAC_TRY_ASSIGN(const Buckets buckets, read_buckets(*opened, q));
  json out_gpus = json::array();
  for (const auto& [g, series] : buckets) {
    json points = json::array();
    for (const auto& [ts, b] : series) points.push_back(b.point(ts));
    out_gpus.push_back({{"gpu", g}, {"points", std::move(points)}});
  }
  return util::json_text(json{{"since_ms", q.since}, {"until_ms", q.until}, {"step_ms", q.step},
                              {"level", q.raw() ? "samples" : "rollups"}, {"gpus", std::move(out_gpus)}});
}

}  // namespace tarmac::serve
