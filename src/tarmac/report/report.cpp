#include "tarmac/report/report.hpp"

#include <algorithm>
#include <map>
#include <set>

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

}  // namespace

double ClassHours::of(gpu::Activity a) const { return hours[class_slot(a)]; }

double ClassHours::recorded() const {
  double sum = 0;
  for (double h : hours) sum += h;
  return sum;
}

double ClassHours::idle() const { return of(gpu::Activity::Idle) + of(gpu::Activity::ReservedIdle); }

Report compute(const ReportInput& in, const ReportOptions& options) {
  const store::TimeRange& range = options.range;
  Report report;
  report.since_ms = range.since_ms;
  report.until_ms = range.until_ms;
  report.price_per_gpu_hour = options.price_per_gpu_hour;

  // The GPUs: those the store knows, and any seen only in spans.
  std::map<unsigned, GpuReport> gpus;
  for (const auto& g : in.gpus) {
    if (!wanted(g.gpu, options.gpus)) continue;
    gpus[g.gpu] = GpuReport{g.gpu, g.name, g.uuid, {}, std::nullopt, std::nullopt, std::nullopt, std::nullopt};
  }
  std::vector<store::ActivitySpan> spans;
  for (const auto& s : in.activity) {
    if (!wanted(s.gpu, options.gpus)) continue;
    spans.push_back(s);
    gpus[s.gpu].gpu = s.gpu;
    gpus[s.gpu].hours.hours[class_slot(s.activity)] +=
        static_cast<double>(clipped(s.start_ms, s.end_ms, range)) / util::kMsPerHour;
  }
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
    return a.gpu != b.gpu ? a.gpu < b.gpu : a.start_ms < b.start_ms;
  });

  // Utilization from the hourly rollups, weighted by samples.
  std::map<unsigned, std::pair<double, long long>> util;  // sum of util x samples, samples
  std::map<unsigned, double> mem;
  std::map<long long, std::pair<double, long long>> by_hour;
  for (const auto& h : in.hours) {
    // An hour that starts before the range but overlaps it counts (the range rarely starts on the hour).
    if (!wanted(h.gpu, options.gpus) || h.ts_ms + kHourMs <= range.since_ms || h.ts_ms >= range.until_ms) continue;
    const auto n = static_cast<double>(h.samples);
    util[h.gpu].first += h.util_avg * n;
    util[h.gpu].second += h.samples;
    mem[h.gpu] += h.mem_used_mib_avg * n;
    by_hour[h.ts_ms].first += h.util_avg * n;
    by_hour[h.ts_ms].second += h.samples;
  }

  const double total_h = static_cast<double>(std::max(0LL, range.until_ms - range.since_ms)) / util::kMsPerHour;
  double fleet_util = 0;
  long long fleet_samples = 0;
  for (auto& [index, g] : gpus) {
    g.hours.unrecorded = std::max(0.0, total_h - g.hours.recorded());
    if (auto it = util.find(index); it != util.end() && it->second.second > 0) {
      const auto n = static_cast<double>(it->second.second);
      g.util_avg_pct = it->second.first / n;
      g.mem_used_avg_mib = mem[index] / n;
      fleet_util += it->second.first;
      fleet_samples += it->second.second;
    }
    if (options.price_per_gpu_hour) {
      g.idle_cost = g.hours.idle() * *options.price_per_gpu_hour;
      g.holding_cost = g.hours.of(gpu::Activity::Holding) * *options.price_per_gpu_hour;
    }
    for (std::size_t i = 0; i < g.hours.hours.size(); ++i) report.fleet.hours[i] += g.hours.hours[i];
    report.fleet.unrecorded += g.hours.unrecorded;
    report.gpus.push_back(g);
  }
  if (fleet_samples > 0) report.fleet_util_avg_pct = fleet_util / static_cast<double>(fleet_samples);
  if (options.price_per_gpu_hour) {
    report.idle_cost = report.fleet.idle() * *options.price_per_gpu_hour;
    report.holding_cost = report.fleet.of(gpu::Activity::Holding) * *options.price_per_gpu_hour;
  }

  // Heat map: whole UTC days covering the range.
  if (range.until_ms > range.since_ms) {
    const long long first_day = range.since_ms - ((range.since_ms % kDayMs) + kDayMs) % kDayMs;
    for (long long day = first_day; day < range.until_ms; day += kDayMs) {
      HeatDay row;
      row.day_start_ms = day;
      for (int h = 0; h < 24; ++h) {
        if (auto it = by_hour.find(day + h * kHourMs); it != by_hour.end() && it->second.second > 0) {
          row.util_pct[static_cast<std::size_t>(h)] = it->second.first / static_cast<double>(it->second.second);
        }
      }
      report.heat.push_back(row);
    }
  }

  // Who used the GPU-hours.
  std::map<std::string, Consumer> users, commands, containers, jobs;
  for (const auto& p : in.processes) {
    if (!wanted(p.gpu, options.gpus)) continue;
    const double h = static_cast<double>(clipped(p.first_ms, p.last_ms, range)) / util::kMsPerHour;
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

  report.idle_windows = runs(spans, range, [](gpu::Activity a) {
    return a == gpu::Activity::Idle || a == gpu::Activity::ReservedIdle;
  });
  if (report.idle_windows.size() > 10) report.idle_windows.resize(10);

  for (const auto& w : runs(spans, range, [](gpu::Activity a) { return a == gpu::Activity::Holding; })) {
    HoldingIncident incident{w.gpu, w.start_ms, w.end_ms, {}};
    for (const auto& p : in.processes) {
      if (p.gpu == w.gpu && p.first_ms <= w.end_ms && p.last_ms >= w.start_ms) incident.processes.push_back(p);
    }
    report.holding.push_back(std::move(incident));
    if (report.holding.size() == 20) break;
  }

  for (const auto& e : in.events) {
    if (e.gpu && !wanted(*e.gpu, options.gpus)) continue;
    if (e.kind == "fault" || e.kind == "lost" || e.kind == "throttle-start") ++report.fault_events;
  }
  return report;
}

Result<Report> build(store::Reader& reader, const ReportOptions& options) {
  ReportInput in;
  TARMAC_TRY_ASSIGN(in.gpus, reader.gpus());
  TARMAC_TRY_ASSIGN(in.activity, reader.activity(options.range));
  TARMAC_TRY_ASSIGN(in.hours, reader.rollups(store::Level::Hours, options.range, options.gpus));
  TARMAC_TRY_ASSIGN(in.processes, reader.processes(options.range));
  TARMAC_TRY_ASSIGN(in.events, reader.events(options.range));
  return compute(in, options);
}

}  // namespace tarmac::report
