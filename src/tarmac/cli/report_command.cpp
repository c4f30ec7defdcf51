#include "tarmac/cli/report_command.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fmt/format.h>
#include <memory>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/store_access.hpp"
#include "tarmac/fleet/sources.hpp"
#include "tarmac/net/http_client.hpp"
#include "tarmac/report/report.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

namespace {

struct ReportFlags {
  RangeFlags range;
  std::string price;
  std::string html;
  std::string gpus;
  std::string by;
  std::string prometheus;
  bool prometheus_given = false;  // --prometheus, even empty
  std::string timeout;  // --timeout, with --prometheus (default 30s)
};

constexpr long long kWeekMs = 7LL * 86400 * 1000;
constexpr long long kMaxFleetRangeMs = 400LL * 86400 * 1000;

// `--prometheus URL`: the fleet's report from the recording rules' series (docs/fleet.md).
int run_fleet_report(const GlobalOptions& global, const ReportFlags& flags) {
  static const std::pair<const char*, fleet::ReportBy> kBy[] = {{"", fleet::ReportBy::Report},
                                                                {"gpu", fleet::ReportBy::Gpu},
                                                                {"host", fleet::ReportBy::Host},
                                                                {"job", fleet::ReportBy::Job},
                                                                {"user", fleet::ReportBy::User}};
  const auto by = std::find_if(std::begin(kBy), std::end(kBy), [&](const auto& b) { return flags.by == b.first; });
  if (by == std::end(kBy)) {
    print_error(make_error(Error::Code::Invalid, fmt::format("--by {}: expected gpu, host, job or user",
                                                             util::terminal_text(flags.by))));
    return kExitUsage;
  }
  if (!flags.html.empty() || !flags.gpus.empty() || !flags.range.db.empty()) {
    print_error(make_error(Error::Code::Invalid,
                           "--prometheus reads the fleet from Prometheus: --html, --id and --db are for one host's store"));
    return kExitUsage;
  }
  auto parsed = detail::report_options(flags.price, "");
  if (!parsed.ok()) {
    print_error(parsed.error());
    return kExitUsage;
  }
  const auto timeout = util::parse_duration_ms(flags.timeout.empty() ? "30s" : flags.timeout);
  if (!timeout || *timeout < 100 || *timeout > 10 * 60 * 1000) {
    print_error(make_error(Error::Code::Invalid, fmt::format("--timeout {}: expected a duration from 100ms to 10m",
                                                             util::terminal_text(flags.timeout))));
    return kExitUsage;
  }
  if (auto url = net::check_url(flags.prometheus); !url.ok()) {
    print_error(make_error(Error::Code::Invalid, fmt::format("--prometheus: {}", url.error().message)));
    return kExitUsage;
  }
  auto range = resolve_range(std::nullopt, flags.range, kWeekMs);
  if (!range.ok()) {
    print_error(range.error());
    return kExitUsage;
  }
  // A year and a month: the heat map is then 58 week-long range queries.
  if (range->until_ms - range->since_ms > kMaxFleetRangeMs || range->until_ms - range->since_ms < 1000) {
    print_error(make_error(Error::Code::Invalid, "--prometheus: the range must be from 1 s to 400 days"));
    return kExitUsage;
  }
  auto report = fleet::read_prometheus_report(flags.prometheus, range->since_ms, range->until_ms,
                                              parsed->price_per_gpu_hour, *timeout);
  if (!report.ok()) {
    print_error(report.error());
    return kExitCouldNotLook;
  }
  if (global.json) {
    std::fputs(fleet::render_report_json(*report, by->second).c_str(), stdout);
  } else {
    std::fputs(fleet::render_report_text(*report, by->second, use_color(global, stdout)).c_str(), stdout);
  }
  return kExitOk;
}

int run_report(const GlobalOptions& global, const ReportFlags& flags) {
  if (flags.prometheus_given) return run_fleet_report(global, flags);
  if (!flags.timeout.empty()) {
    print_error(make_error(Error::Code::Invalid, "--timeout goes with --prometheus: one host's report reads its store"));
    return kExitUsage;
  }
  const bool by_job = flags.by == "job";
  if (!flags.by.empty() && flags.by != "gpu" && !by_job) {
    print_error(make_error(Error::Code::Invalid, fmt::format("--by {}: expected gpu (the full report) or job; host and user "
                                                             "with --prometheus",
                                                             util::terminal_text(flags.by))));
    return kExitUsage;
  }
  if (by_job && !flags.html.empty()) {
    print_error(make_error(Error::Code::Invalid, "--by job prints a table: --html writes the full report, without --by"));
    return kExitUsage;
  }
  auto parsed = detail::report_options(flags.price, flags.gpus);
  if (!parsed.ok()) {
    print_error(parsed.error());
    return kExitUsage;
  }
  report::ReportOptions options = std::move(*parsed);
  auto loaded = load_config(global);
  if (!loaded.ok()) return kExitUsage;
  auto reader = open_store(loaded->config, flags.range);
  if (!reader.ok()) {
    print_error(reader.error());
    return kExitCouldNotLook;
  }
  auto range = resolve_range(*reader, flags.range, kWeekMs);
  if (!range.ok()) {
    print_error(range.error());
    return kExitUsage;
  }
  options.range = *range;
  auto built = report::build(*reader, options);
  if (!built.ok()) {
    print_error(built.error());
    return kExitCouldNotLook;
  }
  if (!flags.html.empty()) {
    if (!util::write_file_atomically(flags.html, report::render_html(*built))) {
      print_error(make_error(Error::Code::Io, fmt::format("cannot write {}", flags.html)));
      return kExitCouldNotLook;
    }
  }
  if (by_job) {
    fmt::print("{}", global.json ? report::render_jobs_json(*built) : report::render_jobs_text(*built, use_color(global, stdout)));
  } else if (global.json) {
    fmt::print("{}", report::render_json(*built));
  } else if (flags.html.empty()) {
    fmt::print("{}", report::render_text(*built, use_color(global, stdout)));
  } else {
    fmt::print("wrote {}\n", flags.html);
  }
  return kExitOk;
}

}  // namespace

namespace detail {

Result<report::ReportOptions> report_options(const std::string& price, const std::string& gpus) {
  report::ReportOptions options;
  if (!price.empty()) {
    const auto dollars = util::parse_double(price);
    if (!dollars || *dollars < 0) {
      return make_error(Error::Code::Invalid,
                        fmt::format("--price {}: expected US dollars per GPU-hour, like 2.49", price));
    }
    options.price_per_gpu_hour = *dollars;
  }
  TARMAC_TRY_ASSIGN(options.gpus, parse_gpu_list(gpus));
  return options;
}

}  // namespace detail

void add_report_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand("report", "The grounded-fleet report: hours per activity class, idle cost, heat map, "
                                           "top users, idle windows, holding incidents, zombies found / reaped (default: the last 7 days "
                                           "recorded); with --prometheus, the whole fleet's from recording rules");
  auto flags = std::make_shared<ReportFlags>();
  add_range_flags(*cmd, flags->range, "7d");
  cmd->add_option("--price", flags->price, "US dollars per GPU-hour: the cost of idle and holding time");
  cmd->add_option("--html", flags->html, "Also write the report as one self-contained HTML page to FILE");
  cmd->add_option("-i,--id", flags->gpus, "GPU indices, comma-separated (default: all)");
  cmd->add_option("--by", flags->by,
                  "gpu: the full report (the default); job: every Slurm job and Kubernetes pod that held a GPU, with "
                  "its user, partition and the GPU-hours it held idle, most first (docs/slurm.md, docs/kubernetes.md). "
                  "With --prometheus: gpu, host, job (with hosts, not user and partition) or user, each one table of "
                  "every row; without --by, the fleet's full report");
  cmd->add_option_function<std::string>(
      "--prometheus",
      [flags](const std::string& url) {
        flags->prometheus = url;
        flags->prometheus_given = true;
      },
      "The whole fleet's report from the Prometheus at URL (its root), which scrapes the agents with tarmac's "
      "recording rules (docs/fleet.md); --since/--until are then wall-clock times, until defaulting to now");
  cmd->add_option("--timeout", flags->timeout, "With --prometheus: how long to wait for each answer (default 30s)");
  cmd->callback([&global, &exit_code, flags] { exit_code = run_report(global, *flags); });
}

}  // namespace tarmac::cli
