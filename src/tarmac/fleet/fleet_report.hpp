// `tarmac report --prometheus URL` (docs/fleet.md): the grounded-fleet report over every node a
// Prometheus scrapes, computed by PromQL from series that recording rules tarmac generates
// (`tarmac alerts --prometheus-rules`), so the heavy part runs in Prometheus at each rule
// evaluation and a week of a thousand nodes is a few million samples to add up. Pure: the rules'
// text, the queries, and the report from their answers are built here and tested on fixed answers;
// sources.cpp asks Prometheus.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tarmac/report/report.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::fleet {

// The recording rules: one rules-file group ("tarmac-recording", evaluated every `interval_ms`),
// as the lines that follow a rules file's `groups:`. Each rule records, per evaluation, what its
// interval added: seconds per GPU and class (from the agents' counters), mean utilization and
// memory, the longest idle stretch, GPU-seconds per Slurm job, pod and user and class (sampled at
// the evaluation), reaped holders and backfill requests. Names start with `tarmac:`, so a global
// Prometheus federates them with one matcher.
[[nodiscard]] std::string recording_rules_group(long long interval_ms);

// The smallest and largest recording interval: the rules need two scrapes in each interval.
constexpr long long kMinRecordIntervalMs = 2'000;
constexpr long long kMaxRecordIntervalMs = 3'600'000;

// A GPU-hours account of one GPU, host, Slurm job, pod or user over the range.
struct Account {
  std::string name;                 // host name, job id, "pod/NAMESPACE/NAME", user
  std::string host;                 // a GPU's host; a job's ("gpu-a +2": and 2 more); "" for hosts and users
  std::optional<unsigned> gpu;      // a GPU's index
  std::string uuid;                 // a GPU's
  std::string model;                // a GPU's
  std::size_t gpus = 0;             // GPUs (host and GPU pairs) counted in it
  report::ClassHours hours;         // unrecorded: a GPU's or host's range hours without a class
  std::optional<double> util_avg_pct;
  std::optional<double> mem_used_avg_mib;
  std::optional<double> idle_cost;     // (idle + reserved-idle) x price, holding added for jobs, pods, users
  std::optional<double> holding_cost;  // holding x price

  // GPU-hours held at 0 %: idle and reserved-idle and holding.
  [[nodiscard]] double held_idle() const { return hours.idle() + hours.of(gpu::Activity::Holding); }
};

// The longest idle (or reserved-idle) stretch a GPU had in the range, as its agent measured it.
struct IdleStretch {
  std::string host;
  unsigned gpu = 0;
  double seconds = 0;
};

struct FleetReport {
  std::string source;                       // "Prometheus URL"
  long long since_ms = 0;
  long long until_ms = 0;
  std::optional<double> price_per_gpu_hour;
  report::ClassHours fleet;                 // summed over the GPUs
  std::optional<double> fleet_util_avg_pct;
  std::optional<double> idle_cost;
  std::optional<double> holding_cost;
  std::vector<Account> gpus;                // held idle most first
  std::vector<Account> hosts;               // held idle most first
  std::vector<Account> jobs;                // Slurm jobs and pods, held idle most first
  std::vector<Account> users;               // GPU-hours most first
  std::vector<report::HeatDay> heat;
  std::vector<IdleStretch> idle_stretches;  // longest first, at most 10
  std::map<std::string, double> reaped;     // the agents' reaper actions by outcome
  std::map<std::string, double> backfill_requests;  // by state: done, failed, retried, interrupted
  std::map<std::string, double> backfill_tokens;    // by kind: prompt, completion
};

// The queries for a range of `range_s` seconds ending at the query's time. Instant queries, in
// the order their answers are passed to fleet_report_from_prometheus (ranges over a day read the
// hourly series, shorter ones the recording interval's); heat_query is a range query
// at one-hour steps, asked a week at a time (Prometheus holds every series' points of a range query
// at once: 8,000 GPUs x 168 hours is 1.3 M of its 50 M samples a query).
[[nodiscard]] std::vector<std::string> report_queries(long long range_s);
[[nodiscard]] std::string heat_query(long long range_s);

// The report from the answers to report_queries (same order) and to heat_query (matrices, a week's
// each).
[[nodiscard]] Result<FleetReport> fleet_report_from_prometheus(const std::vector<std::string>& answers,
                                                               const std::vector<std::string>& heat_answers,
                                                               long long since_ms, long long until_ms,
                                                               std::optional<double> price_per_gpu_hour);

// What `--by` lists: the full report, or one table with every row.
enum class ReportBy { Report, Gpu, Host, Job, User };

[[nodiscard]] std::string render_report_text(const FleetReport& report, ReportBy by, bool color);
[[nodiscard]] std::string render_report_json(const FleetReport& report, ReportBy by);

}  // namespace tarmac::fleet
