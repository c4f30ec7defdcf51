#include "tarmac/cli/report_command.hpp"

#include <cstdio>
#include <fmt/format.h>
#include <memory>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/store_access.hpp"
#include "tarmac/report/report.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::cli {

namespace {

struct ReportFlags {
  RangeFlags range;
  std::string price;
  std::string html;
  std::string gpus;
};

constexpr long long kWeekMs = 7LL * 86400 * 1000;

// Writes `text` to `path` through a temporary file and a rename, so a reader never sees half a page.
Result<void> write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  const bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f != nullptr && std::fclose(f) != 0) return make_error(Error::Code::Io, fmt::format("cannot write {}", path));
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return make_error(Error::Code::Io, fmt::format("cannot write {}", path));
  }
  return {};
}

int run_report(const GlobalOptions& global, const ReportFlags& flags) {
  report::ReportOptions options;
  if (!flags.price.empty()) {
    auto price = util::parse_double(flags.price);
    if (!price || *price < 0) {
      print_error(make_error(Error::Code::Invalid,
                             fmt::format("--price {}: expected US dollars per GPU-hour, like 2.49", flags.price)));
      return kExitUsage;
    }
    options.price_per_gpu_hour = *price;
  }
  for (const auto& part : util::split(flags.gpus, ',')) {
    if (util::trim(part).empty()) continue;
    auto n = util::parse_int(util::trim(part));
    if (!n || *n < 0) {
      print_error(make_error(Error::Code::Invalid, fmt::format("-i {}: expected GPU indices like 0,2", flags.gpus)));
      return kExitUsage;
    }
    options.gpus.push_back(static_cast<unsigned>(*n));
  }
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
    if (auto w = write_atomically(flags.html, report::render_html(*built)); !w.ok()) {
      print_error(w.error());
      return kExitCouldNotLook;
    }
  }
  if (global.json) {
    fmt::print("{}", report::render_json(*built));
  } else if (flags.html.empty()) {
    fmt::print("{}", report::render_text(*built, use_color(global, stdout)));
  } else {
    fmt::print("wrote {}\n", flags.html);
  }
  return kExitOk;
}

}  // namespace

void add_report_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand("report", "The grounded-fleet report: hours per activity class, idle cost, heat map, "
                                           "top users, idle windows, holding incidents (default: the last 7 days "
                                           "recorded)");
  auto flags = std::make_shared<ReportFlags>();
  add_range_flags(*cmd, flags->range, "7d");
  cmd->add_option("--price", flags->price, "US dollars per GPU-hour: the cost of idle and holding time");
  cmd->add_option("--html", flags->html, "Also write the report as one self-contained HTML page to FILE");
  cmd->add_option("-i,--id", flags->gpus, "GPU indices, comma-separated (default: all)");
  cmd->callback([&global, &exit_code, flags] { exit_code = run_report(global, *flags); });
}

}  // namespace tarmac::cli
