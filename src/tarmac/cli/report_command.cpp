#include "tarmac/cli/report_command.hpp"

#include <cstdio>
#include <fmt/format.h>
#include <memory>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/store_access.hpp"
#include "tarmac/report/report.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::cli {

namespace {

struct ReportFlags {
  RangeFlags range;
  std::string price;
  std::string html;
  std::string gpus;
  std::string by;
};

constexpr long long kWeekMs = 7LL * 86400 * 1000;

int run_report(const GlobalOptions& global, const ReportFlags& flags) {
  const bool by_job = flags.by == "job";
  if (!flags.by.empty() && flags.by != "gpu" && !by_job) {
    print_error(make_error(Error::Code::Invalid, fmt::format("--by {}: expected gpu (the full report) or job",
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
                                           "recorded)");
  auto flags = std::make_shared<ReportFlags>();
  add_range_flags(*cmd, flags->range, "7d");
  cmd->add_option("--price", flags->price, "US dollars per GPU-hour: the cost of idle and holding time");
  cmd->add_option("--html", flags->html, "Also write the report as one self-contained HTML page to FILE");
  cmd->add_option("-i,--id", flags->gpus, "GPU indices, comma-separated (default: all)");
  cmd->add_option("--by", flags->by,
                  "gpu: the full report (the default); job: every Slurm job and Kubernetes pod that held a GPU, with "
                  "its user, partition and the GPU-hours it held idle, most first (docs/slurm.md, docs/kubernetes.md)");
  cmd->callback([&global, &exit_code, flags] { exit_code = run_report(global, *flags); });
}

}  // namespace tarmac::cli
