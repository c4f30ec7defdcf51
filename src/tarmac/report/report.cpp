#include "tarmac/report/report.hpp"

#include <tuple>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tarmac/host/process_info.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::report {

namespace {

constexpr long long kDayMs = 86400LL * 1000;
constexpr long long kHourMs = 3600LL * 1000;

std::size_t class_slot(gpu::Activity a) {
  return static_cast<std::size_t>(std::find(gpu::kActivities.begin(), gpu::kActivities.end(), a) -
                                  gpu::kActivities.begin());
}

// The part of [start, end) inside the range, in ms (0 when outside).
long long clipped(long long start, long long end, const store::TimeRange& r) {
  return std::max(0LL, std::min(end, r.until_ms) - std::max(start, r.since_ms));
}

bool wanted(unsigned gpu, const std::vector<unsigned>& gpus) {
  return gpus.empty() || std::find(gpus.begin(), gpus.end(), gpu) != gpus.end();
}

// Runs of touching spans of one GPU whose class passes `keep`, clipped to the range.
template <typename Keep>
std::vector<IdleWindow> runs(const std::vector<store::ActivitySpan>& spans, const store::TimeRange& r, Keep keep) {
  std::vector<IdleWindow> out;  // spans are ordered by gpu, start
  for (const auto& s : spans) {
    if (!keep(s.activity)) continue;
    const long long start = std::max(s.start_ms, r.since_ms);
    const long long end = std::min(s.end_ms, r.until_ms);
    if (end <= start) continue;
    if (!out.empty() && out.back().gpu == s.gpu && out.back().end_ms >= s.start_ms) {
      out.back().end_ms = std::max(out.back().end_ms, end);
    } else {
      out.push_back({s.gpu, start, end});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const IdleWindow& a, const IdleWindow& b) {
    return a.end_ms - a.start_ms > b.end_ms - b.start_ms;
  });
  return out;
}

std::vector<Consumer> top(std::map<std::string, Consumer>& by_name, std::size_t limit) {
  std::vector<Consumer> out;
  for (auto& [name, c] : by_name) {
    c.name = name;
    out.push_back(c);
  }
  std::stable_sort(out.begin(), out.end(), [](const Consumer& a, const Consumer& b) { return a.gpu_hours > b.gpu_hours; });
  if (out.size() > limit) out.resize(limit);
  return out;
}

// Each GPU's hours per class, from its spans clipped to the range; the spans kept (by GPU, then
// start) for the windows and incidents. The GPUs: those the store knows, and any seen only in spans.
std::map<unsigned, GpuReport> class_hours(const ReportInput& in, const ReportOptions& options,
                                          std::vector<store::ActivitySpan>& spans) {
  std::map<unsigned, GpuReport> gpus;
  for (const auto& g : in.gpus) {
    if (!wanted(g.gpu, options.gpus)) continue;
    gpus[g.gpu] = GpuReport{g.gpu, g.name, g.uuid, {}, std::nullopt, std::nullopt, std::nullopt, std::nullopt};
  }
  for (const auto& s : in.activity) {
    if (!wanted(s.gpu, options.gpus)) continue;
    spans.push_back(s);
    gpus[s.gpu].gpu = s.gpu;
    gpus[s.gpu].hours.hours[class_slot(s.activity)] +=
        static_cast<double>(clipped(s.start_ms, s.end_ms, options.range)) / util::kMsPerHour;
  }
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
    return a.gpu != b.gpu ? a.gpu < b.gpu : a.start_ms < b.start_ms;
  });
  return gpus;
}

// A sum of values over samples, and the samples: the mean is weighted by samples.
struct Weighted {
  double sum = 0;
  long long samples = 0;
};

// Utilization and memory from the hourly rollups, weighted by samples: per GPU, and per hour for
// the whole fleet.
struct HourlyUse {
  std::map<unsigned, Weighted> util;
  std::map<unsigned, double> mem;  // sum of memory x samples
  std::map<long long, Weighted> by_hour;
};

HourlyUse hourly_use(const ReportInput& in, const ReportOptions& options) {
  HourlyUse use;
  for (const auto& h : in.hours) {
    // An hour that starts before the range but overlaps it counts (the range rarely starts on the hour).
    if (!wanted(h.gpu, options.gpus) || h.ts_ms + kHourMs <= options.range.since_ms ||
        h.ts_ms >= options.range.until_ms) {
      continue;
    }
    const auto n = static_cast<double>(h.samples);
    use.util[h.gpu].sum += h.util_avg * n;
    use.util[h.gpu].samples += h.samples;
    use.mem[h.gpu] += h.mem_used_mib_avg * n;
    use.by_hour[h.ts_ms].sum += h.util_avg * n;
    use.by_hour[h.ts_ms].samples += h.samples;
  }
  return use;
}

// Completes each GPU (unrecorded hours, means, costs) and sums the fleet.
void add_gpus(std::map<unsigned, GpuReport>& gpus, HourlyUse& use, const ReportOptions& options, Report& report) {
  const store::TimeRange& range = options.range;
  const double total_h = static_cast<double>(std::max(0LL, range.until_ms - range.since_ms)) / util::kMsPerHour;
  Weighted fleet;
  for (auto& [index, g] : gpus) {
    g.hours.unrecorded = std::max(0.0, total_h - g.hours.recorded());
    if (auto it = use.util.find(index); it != use.util.end() && it->second.samples > 0) {
      const auto n = static_cast<double>(it->second.samples);
      g.util_avg_pct = it->second.sum / n;
      g.mem_used_avg_mib = use.mem[index] / n;
      fleet.sum += it->second.sum;
      fleet.samples += it->second.samples;
    }
    if (options.price_per_gpu_hour) {
      g.idle_cost = g.hours.idle() * *options.price_per_gpu_hour;
      g.holding_cost = g.hours.of(gpu::Activity::Holding) * *options.price_per_gpu_hour;
    }
    for (std::size_t i = 0; i < g.hours.hours.size(); ++i) report.fleet.hours[i] += g.hours.hours[i];
    report.fleet.unrecorded += g.hours.unrecorded;
    report.gpus.push_back(g);
  }
  if (fleet.samples > 0) report.fleet_util_avg_pct = fleet.sum / static_cast<double>(fleet.samples);
  if (options.price_per_gpu_hour) {
    report.idle_cost = report.fleet.idle() * *options.price_per_gpu_hour;
    report.holding_cost = report.fleet.of(gpu::Activity::Holding) * *options.price_per_gpu_hour;
  }
}

// The heat map: whole UTC days covering the range, the fleet's mean utilization per hour.
std::vector<HeatDay> heat_map(const store::TimeRange& range, const std::map<long long, Weighted>& by_hour) {
  std::vector<HeatDay> heat;
  if (range.until_ms <= range.since_ms) return heat;
  const long long first_day = range.since_ms - ((range.since_ms % kDayMs) + kDayMs) % kDayMs;
  for (long long day = first_day; day < range.until_ms; day += kDayMs) {
    HeatDay row;
    row.day_start_ms = day;
    for (int h = 0; h < 24; ++h) {
      if (auto it = by_hour.find(day + h * kHourMs); it != by_hour.end() && it->second.samples > 0) {
        row.util_pct[static_cast<std::size_t>(h)] = it->second.sum / static_cast<double>(it->second.samples);
      }
    }
    heat.push_back(row);
  }
  return heat;
}

// Who used the GPU-hours: the top ten users, commands, containers and Slurm jobs.
void add_consumers(const ReportInput& in, const ReportOptions& options, Report& report) {
  std::map<std::string, Consumer> users, commands, containers, jobs;
  for (const auto& p : in.processes) {
    if (!wanted(p.gpu, options.gpus)) continue;
    const double h = static_cast<double>(clipped(p.first_ms, p.last_ms, options.range)) / util::kMsPerHour;
    if (h <= 0) continue;
    const auto count = [&](std::map<std::string, Consumer>& m, const std::string& key) {
      if (key.empty()) return;
      m[key].gpu_hours += h;
      ++m[key].processes;
    };
    count(users, p.user.empty() ? "(unknown)" : p.user);
    count(commands, p.command.empty() ? "(unknown)" : p.command);
    count(containers, p.container);
    count(jobs, p.slurm_job);
  }
  report.users = top(users, 10);
  report.commands = top(commands, 10);
  report.containers = top(containers, 10);
  report.slurm_jobs = top(jobs, 10);
}

// Each Slurm job's GPU-hours per class: its spans on each GPU, clipped to the range, against the
// GPU's class spans (sorted by GPU, then start); what no class span covers is unrecorded.
std::vector<JobUse> job_uses(const ReportInput& in, const ReportOptions& options,
                             const std::vector<store::ActivitySpan>& spans) {
  std::map<std::string, JobUse> by_job;
  for (const auto& j : in.jobs) {
    if (!wanted(j.gpu, options.gpus)) continue;
    const long long start = std::max(j.first_ms, options.range.since_ms);
    const long long end = std::min(j.last_ms, options.range.until_ms);
    if (end < start) continue;
    JobUse& use = by_job[j.job];
    if (use.job.empty()) {
      use.job = j.job;
      use.first_ms = start;
      use.last_ms = end;
    }
    if (!j.user.empty()) use.user = j.user;
    if (!j.partition.empty()) use.partition = j.partition;
    if (std::find(use.gpus.begin(), use.gpus.end(), j.gpu) == use.gpus.end()) use.gpus.push_back(j.gpu);
    use.first_ms = std::min(use.first_ms, start);
    use.last_ms = std::max(use.last_ms, end);
    long long covered = 0;
    // A GPU's spans do not overlap, so their ends rise with their starts: the first that ends
    // after the job's start is where the overlap begins.
    const auto first = std::lower_bound(spans.begin(), spans.end(), std::make_pair(j.gpu, start),
                                        [](const store::ActivitySpan& s, const std::pair<unsigned, long long>& at) {
                                          return s.gpu < at.first || (s.gpu == at.first && s.end_ms <= at.second);
                                        });
    for (auto it = first; it != spans.end() && it->gpu == j.gpu && it->start_ms < end; ++it) {
      const long long overlap = std::max(0LL, std::min(it->end_ms, end) - std::max(it->start_ms, start));
      use.hours.hours[class_slot(it->activity)] += static_cast<double>(overlap) / util::kMsPerHour;
      covered += overlap;
    }
    use.hours.unrecorded += static_cast<double>(std::max(0LL, end - start - covered)) / util::kMsPerHour;
  }
  std::vector<JobUse> out;
  for (auto& [id, use] : by_job) {
    std::sort(use.gpus.begin(), use.gpus.end());
    if (options.price_per_gpu_hour) use.idle_cost = use.held_idle() * *options.price_per_gpu_hour;
    out.push_back(std::move(use));
  }
  std::stable_sort(out.begin(), out.end(), [](const JobUse& a, const JobUse& b) {
    return a.held_idle() != b.held_idle() ? a.held_idle() > b.held_idle() : a.first_ms < b.first_ms;
  });
  return out;
}

// The longest runs of holding (at most 20), each with the processes that overlapped it and its
// well-known holder; and the hours of every run by well-known holder.
void add_holding(const std::vector<store::ActivitySpan>& spans, const store::TimeRange& range,
                 const std::vector<store::ProcessSpan>& processes, Report& report) {
  std::map<std::pair<std::string, std::string>, HolderHours> by_holder;
  for (const auto& w : runs(spans, range, [](gpu::Activity a) { return a == gpu::Activity::Holding; })) {
    HoldingIncident incident{w.gpu, w.start_ms, w.end_ms, {}, {}, {}};
    const store::ProcessSpan* biggest = nullptr;
    for (const auto& p : processes) {
      if (p.gpu != w.gpu || p.first_ms > w.end_ms || p.last_ms < w.start_ms) continue;
      if (biggest == nullptr || p.mem_used_mib_max > biggest->mem_used_mib_max) biggest = &p;
      if (report.holding.size() < 20) incident.processes.push_back(p);
    }
    if (biggest != nullptr) {
      if (auto kind = host::well_known_holder(biggest->command)) {
        incident.holder = *kind;
        incident.holder_user = biggest->user;
        HolderHours& h = by_holder[{*kind, biggest->user}];
        h.holder = *kind;
        h.user = biggest->user;
        h.gpu_hours += static_cast<double>(w.end_ms - w.start_ms) / 3600e3;
        ++h.incidents;
      }
    }
    if (report.holding.size() < 20) report.holding.push_back(std::move(incident));
  }
  for (auto& [key, h] : by_holder) report.holders.push_back(std::move(h));
  std::stable_sort(report.holders.begin(), report.holders.end(),
                   [](const HolderHours& a, const HolderHours& b) { return a.gpu_hours > b.gpu_hours; });
}

// A "reap" event's detail (written by reap::event_detail; read as hostile: any field may be
// missing or of another type), or nullopt when it is not a JSON object.
std::optional<ZombieAction> zombie_action(const store::Event& e) {
  const auto j = nlohmann::json::parse(e.detail, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  const auto text = [&j](const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  ZombieAction a;
  a.gpu = e.gpu.value_or(0);
  a.ts_ms = e.ts_ms;
  if (const auto it = j.find("pid"); it != j.end() && it->is_number_unsigned()) a.pid = it->get<unsigned>();
  a.user = text("user");
  a.command = text("command");
  a.outcome = text("outcome");
  const auto freed = j.find("memory_freed");
  const auto bytes = j.find("freed_bytes");
  if (freed != j.end() && freed->is_boolean() && freed->get<bool>()) {
    a.freed_bytes = bytes != j.end() && bytes->is_number_unsigned() ? bytes->get<std::uint64_t>() : 0;
  }
  return a;
}

Zombies zombies_of(const std::vector<store::Event>& events, const std::vector<unsigned>& gpus) {
  constexpr std::size_t kMaxRecent = 20;
  Zombies z;
  for (const auto& e : events) {
    if (e.gpu && !wanted(*e.gpu, gpus)) continue;
    if (e.kind == "hold") ++z.found;
    if (e.kind != "reap") continue;
    const auto action = zombie_action(e);
    if (!action) continue;
    ++z.actions;
    if (action->freed_bytes) {
      ++z.reaped;
      z.freed_bytes += *action->freed_bytes;
    }
    z.recent.push_back(*action);
  }
  std::stable_sort(z.recent.begin(), z.recent.end(), [](const auto& a, const auto& b) { return a.ts_ms > b.ts_ms; });
  if (z.recent.size() > kMaxRecent) z.recent.resize(kMaxRecent);
  return z;
}

// A "backfill" event's count `key` (dispatch.cpp record_stint; hostile: missing, negative, of
// another type or absurd is 0).
long long count_of(const nlohmann::json& j, const char* key) {
  constexpr long long kMost = 1LL << 50;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return 0;
  const auto v = it->get<long long>();
  return v < 0 || v > kMost ? 0 : v;
}

// Events with no GPU (an external server's work) count only in a report of every GPU.
BackfillWork backfill_of(const std::vector<store::Event>& events, const std::vector<unsigned>& gpus) {
  BackfillWork w;
  std::set<long long> batches;
  for (const auto& e : events) {
    if (e.kind != "backfill" || (e.gpu ? !wanted(*e.gpu, gpus) : !gpus.empty())) continue;
    const auto j = nlohmann::json::parse(e.detail, nullptr, false);
    if (!j.is_object()) continue;
    batches.insert(count_of(j, "batch"));
    w.requests += count_of(j, "done") + count_of(j, "failed");
    w.failed += count_of(j, "failed");
    w.prompt_tokens += count_of(j, "prompt_tokens");
    w.completion_tokens += count_of(j, "completion_tokens");
    const double hours = static_cast<double>(count_of(j, "busy_ms")) / 3600e3;
    w.busy_hours += hours;
    w.gpu_hours += hours * static_cast<double>(std::min(count_of(j, "gpus"), 1024LL));
  }
  w.batches = batches.size();
  return w;
}

}  // namespace

double ClassHours::of(gpu::Activity a) const { return hours[class_slot(a)]; }

double ClassHours::recorded() const {
  double sum = 0;
  for (double h : hours) sum += h;
  return sum;
}

namespace {

// Each MIG device's hours per class and idle slice-hours, from its spans clipped to the range.
void add_mig(const std::vector<store::MigSpan>& spans, const ReportOptions& options, Report& report) {
  std::map<std::tuple<unsigned, unsigned, std::string>, MigUse> uses;
  for (const auto& s : spans) {
    if (!wanted(s.gpu, options.gpus)) continue;
    MigUse& u = uses[{s.gpu, s.gpu_instance, s.profile}];
    u.gpu = s.gpu;
    u.gpu_instance = s.gpu_instance;
    u.profile = s.profile;
    u.slices = s.slices;
    const double h = static_cast<double>(clipped(s.start_ms, s.end_ms, options.range)) / util::kMsPerHour;
    u.hours.hours[class_slot(s.activity)] += h;
    if (!s.measured) u.unmeasured_hours += h;
    if (s.activity == gpu::Activity::Idle || s.activity == gpu::Activity::ReservedIdle) {
      u.idle_slice_hours += h * std::min(s.slices, 7U) / 7.0;
    }
  }
  for (auto& [key, u] : uses) {
    if (options.price_per_gpu_hour) u.idle_cost = u.idle_slice_hours * *options.price_per_gpu_hour;
    report.mig_idle_slice_hours += u.idle_slice_hours;
    report.mig.push_back(u);
  }
  if (options.price_per_gpu_hour && !report.mig.empty()) {
    report.mig_idle_cost = report.mig_idle_slice_hours * *options.price_per_gpu_hour;
  }
}

}  // namespace

double ClassHours::idle() const { return of(gpu::Activity::Idle) + of(gpu::Activity::ReservedIdle); }

Report compute(const ReportInput& in, const ReportOptions& options) {
  const store::TimeRange& range = options.range;
  Report report;
  report.since_ms = range.since_ms;
  report.until_ms = range.until_ms;
  report.price_per_gpu_hour = options.price_per_gpu_hour;

  std::vector<store::ActivitySpan> spans;
  std::map<unsigned, GpuReport> gpus = class_hours(in, options, spans);
  HourlyUse use = hourly_use(in, options);
  add_gpus(gpus, use, options, report);
  report.heat = heat_map(range, use.by_hour);
  add_consumers(in, options, report);
  report.idle_windows = runs(spans, range, [](gpu::Activity a) {
    return a == gpu::Activity::Idle || a == gpu::Activity::ReservedIdle;
  });
  if (report.idle_windows.size() > 10) report.idle_windows.resize(10);
  add_holding(spans, range, in.processes, report);
  report.jobs = job_uses(in, options, spans);
  for (const auto& e : in.events) {
    if (e.gpu && !wanted(*e.gpu, options.gpus)) continue;
    if (e.kind == "fault" || e.kind == "lost" || e.kind == "throttle-start") ++report.fault_events;
  }
  report.zombies = zombies_of(in.events, options.gpus);
  report.backfill = backfill_of(in.events, options.gpus);
  add_mig(in.mig, options, report);
  return report;
}

Result<Report> build(store::Reader& reader, const ReportOptions& options) {
  ReportInput in;
  TARMAC_TRY_ASSIGN(in.gpus, reader.gpus());
  TARMAC_TRY_ASSIGN(in.activity, reader.activity(options.range));
  TARMAC_TRY_ASSIGN(in.hours, reader.rollups(store::Level::Hours, options.range, options.gpus));
  TARMAC_TRY_ASSIGN(in.processes, reader.processes(options.range));
  TARMAC_TRY_ASSIGN(in.events, reader.events(options.range));
  TARMAC_TRY_ASSIGN(in.jobs, reader.jobs(options.range));
  TARMAC_TRY_ASSIGN(in.mig, reader.mig_activity(options.range));
  return compute(in, options);
}

}  // namespace tarmac::report
