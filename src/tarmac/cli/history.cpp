#include "tarmac/cli/history.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fmt/format.h>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/store_access.hpp"
#include "tarmac/cli/table.hpp"
#include "tarmac/fields/format.hpp"
#include "tarmac/fields/table.hpp"
#include "tarmac/report/format.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/fs.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {

namespace {

struct HistoryFlags {
  RangeFlags range;
  std::string gpus;         // -i 0,2
  std::string level = "auto";
  std::string format = "csv";
  std::string output;       // -o FILE
  bool events = false;
};

constexpr long long kHourMs = 3600LL * 1000;

// The fields of nvidia-smi's CSV layout that the store holds, in its --query-gpu spelling.
constexpr std::string_view kNvidiaSmiFields =
    "timestamp,index,name,uuid,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,"
    "temperature.gpu,clocks.sm,clocks.mem";

nlohmann::json opt(const std::optional<long long>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }
std::string cell(const std::optional<long long>& v) { return v ? std::to_string(*v) : std::string(); }

// A stored value as a reading of the model, scaled; nullopt when it does not fit one (a store is a
// file anyone may hand over with --db: a negative or huge value is unknown, not a wrapped number).
template <typename T>
std::optional<T> reading(const std::optional<long long>& v, long long scale = 1) {
  if (!v || *v < 0 || static_cast<unsigned long long>(*v) > std::numeric_limits<T>::max() / static_cast<unsigned long long>(scale)) {
    return std::nullopt;
  }
  return static_cast<T>(*v) * static_cast<T>(scale);
}

nlohmann::json sample_json(const store::GpuSample& s) {
  return {{"ts_ms", s.ts_ms},           {"time", report::format_iso(s.ts_ms)}, {"gpu", s.gpu},
          {"util_pct", opt(s.util_pct)}, {"mem_util_pct", opt(s.mem_util_pct)}, {"mem_used_mib", opt(s.mem_used_mib)},
          {"power_w", opt(s.power_w)},   {"temp_c", opt(s.temp_c)},             {"sm_mhz", opt(s.sm_mhz)},
          {"mem_mhz", opt(s.mem_mhz)},   {"class", gpu::to_string(s.activity)}};
}

nlohmann::json rollup_json(const store::Rollup& r) {
  return {{"ts_ms", r.ts_ms},
          {"time", report::format_iso(r.ts_ms)},
          {"gpu", r.gpu},
          {"samples", r.samples},
          {"util_avg_pct", r.util_avg},
          {"util_max_pct", r.util_max},
          {"mem_util_avg_pct", r.mem_util_avg},
          {"mem_used_avg_mib", r.mem_used_mib_avg},
          {"mem_used_max_mib", r.mem_used_mib_max},
          {"power_avg_w", r.power_w_avg},
          {"temp_max_c", r.temp_c_max}};
}

const char* level_name(store::Level level) {
  return level == store::Level::Samples ? "samples" : level == store::Level::Minutes ? "minutes" : "hours";
}

}  // namespace

namespace detail {

Result<store::Level> parse_level(const std::string& text, const store::TimeRange& range) {
  if (text == "samples") return store::Level::Samples;
  if (text == "minutes") return store::Level::Minutes;
  if (text == "hours") return store::Level::Hours;
  if (text != "auto") return make_error(Error::Code::Invalid, fmt::format("--level {}: expected auto, samples, minutes or hours", text));
  const long long span = range.until_ms - range.since_ms;
  if (span <= 6 * kHourMs) return store::Level::Samples;
  if (span <= 8 * 24 * kHourMs) return store::Level::Minutes;
  return store::Level::Hours;
}

// nvidia-smi's CSV, byte for byte as `nvidia-smi --query-gpu=... --format=csv -l` logs it: each
// stored sample becomes a device of the model and goes through the same field readers as query.
std::string nvidia_smi_csv(const RecordedRows& rows) {
  const auto fields = *fields::parse_field_list(kNvidiaSmiFields);
  std::map<unsigned, const store::GpuInfo*> info;
  for (const auto& g : rows.gpus) info[g.gpu] = &g;
  std::string out = fields::csv_header(fields) + "\n";
  for (const auto& s : rows.samples) {
    gpu::Snapshot snap;
    snap.timestamp_unix_ms = s.ts_ms;
    gpu::Device d;
    d.id.index = s.gpu;
    if (auto it = info.find(s.gpu); it != info.end()) {
      d.id.name = it->second->name;
      d.id.uuid = it->second->uuid;
      d.id.mem_total_bytes = reading<std::uint64_t>(it->second->mem_total_mib, util::kMiB);
    }
    d.sample.util_gpu_pct = reading<unsigned>(s.util_pct);
    d.sample.util_mem_pct = reading<unsigned>(s.mem_util_pct);
    d.sample.mem_used_bytes = reading<std::uint64_t>(s.mem_used_mib, util::kMiB);
    d.sample.power_mw = reading<unsigned>(s.power_w, 1000);
    d.sample.temp_c = reading<unsigned>(s.temp_c);
    d.sample.clock_sm_mhz = reading<unsigned>(s.sm_mhz);
    d.sample.clock_mem_mhz = reading<unsigned>(s.mem_mhz);
    std::vector<fields::Value> values;
    const fields::ReadContext ctx{snap, d, rows.gpus.size(), nullptr};
    for (const auto* f : fields) values.push_back(fields::read_field(*f, ctx));
    out += fields::csv_row(values, fields, fields::Units::Print) + "\n";
  }
  return out;
}

// The classic gpu_utilization.csv: epoch seconds, then one util%|memutil%|usedMiB|powerW cell per GPU.
std::string gpu_utilization_csv(const RecordedRows& rows) {
  std::string out;
  long long current = -1;
  std::map<unsigned, std::string> cells;
  const auto emit = [&] {
    if (current < 0) return;
    out += std::to_string(current / 1000);
    for (const auto& [gpu, text] : cells) out += "," + text;
    out += "\n";
    cells.clear();
  };
  for (const auto& s : rows.samples) {
    if (s.ts_ms != current) {
      emit();
      current = s.ts_ms;
    }
    cells[s.gpu] = fmt::format("{}|{}|{}|{}", cell(s.util_pct), cell(s.mem_util_pct), cell(s.mem_used_mib), cell(s.power_w));
  }
  emit();
  return out;
}

std::string plain_csv(const RecordedRows& rows) {
  std::string out;
  if (rows.level == store::Level::Samples) {
    out = "ts_ms,time,gpu,util_pct,mem_util_pct,mem_used_mib,power_w,temp_c,sm_mhz,mem_mhz,class\n";
    for (const auto& s : rows.samples) {
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", s.ts_ms, report::format_iso(s.ts_ms), s.gpu,
                         cell(s.util_pct), cell(s.mem_util_pct), cell(s.mem_used_mib), cell(s.power_w), cell(s.temp_c),
                         cell(s.sm_mhz), cell(s.mem_mhz), gpu::to_string(s.activity));
    }
    return out;
  }
  out = "ts_ms,time,gpu,samples,util_avg_pct,util_max_pct,mem_util_avg_pct,mem_used_avg_mib,mem_used_max_mib,"
        "power_avg_w,temp_max_c\n";
  for (const auto& r : rows.rollups) {
    out += fmt::format("{},{},{},{},{:.2f},{},{:.2f},{:.1f},{},{:.1f},{}\n", r.ts_ms, report::format_iso(r.ts_ms), r.gpu,
                       r.samples, r.util_avg, r.util_max, r.mem_util_avg, r.mem_used_mib_avg, r.mem_used_mib_max,
                       r.power_w_avg, r.temp_c_max);
  }
  return out;
}

nlohmann::json rows_json(const RecordedRows& rows) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& s : rows.samples) list.push_back(sample_json(s));
  for (const auto& r : rows.rollups) list.push_back(rollup_json(r));
  return list;
}

std::string events_text(const std::vector<store::Event>& events) {
  std::string out = "\nEvents:\n";
  if (events.empty()) out += "  none\n";
  for (const auto& e : events) {
    out += fmt::format("  {}  {:<6} {:<15} {}\n", report::format_utc(e.ts_ms), e.gpu ? fmt::format("GPU {}", *e.gpu) : "",
                       util::terminal_text(e.kind), util::terminal_text(e.detail));
  }
  return out;
}

nlohmann::json history_json(const RecordedRows& rows, bool with_events) {
  nlohmann::json j{{"since", report::format_iso(rows.range.since_ms)},
                   {"until", report::format_iso(rows.range.until_ms)},
                   {"level", level_name(rows.level)},
                   {"rows", rows_json(rows)}};
  if (with_events) {
    j["events"] = nlohmann::json::array();
    for (const auto& e : rows.events) {
      j["events"].push_back({{"ts_ms", e.ts_ms}, {"time", report::format_iso(e.ts_ms)},
                             {"gpu", e.gpu ? nlohmann::json(*e.gpu) : nlohmann::json(nullptr)},
                             {"kind", e.kind}, {"detail", e.detail}});
    }
  }
  return j;
}

void print_history_table(std::FILE* out, const RecordedRows& rows, bool color) {
  if (rows.samples.empty() && rows.rollups.empty()) {
    fmt::print(out, "No samples recorded from {} to {} UTC.\n", report::format_utc(rows.range.since_ms),
               report::format_utc(rows.range.until_ms));
  } else if (rows.level == store::Level::Samples) {
    Table table({{"TIME (UTC)"}, {"GPU", Align::Right}, {"UTIL", Align::Right}, {"MEM UTIL", Align::Right},
                 {"MEM USED", Align::Right}, {"POWER", Align::Right}, {"TEMP", Align::Right}, {"SM", Align::Right},
                 {"CLASS"}});
    const auto with = [](const std::optional<long long>& v, const char* unit) {
      return Cell{v ? fmt::format("{}{}", *v, unit) : std::string("-")};
    };
    for (const auto& s : rows.samples) {
      table.add_row({{report::format_iso(s.ts_ms).substr(0, 19)}, {std::to_string(s.gpu)}, with(s.util_pct, " %"),
                     with(s.mem_util_pct, " %"), with(s.mem_used_mib, " MiB"), with(s.power_w, " W"),
                     with(s.temp_c, " C"), with(s.sm_mhz, " MHz"), {gpu::to_string(s.activity)}});
    }
    table.print(out, color);
  } else {
    Table table({{"TIME (UTC)"}, {"GPU", Align::Right}, {"UTIL AVG", Align::Right}, {"UTIL MAX", Align::Right},
                 {"MEM USED AVG", Align::Right}, {"MEM USED MAX", Align::Right}, {"POWER AVG", Align::Right},
                 {"TEMP MAX", Align::Right}});
    for (const auto& r : rows.rollups) {
      table.add_row({{report::format_utc(r.ts_ms)}, {std::to_string(r.gpu)}, {fmt::format("{:.1f} %", r.util_avg)},
                     {fmt::format("{} %", r.util_max)}, {fmt::format("{:.0f} MiB", r.mem_used_mib_avg)},
                     {fmt::format("{} MiB", r.mem_used_mib_max)}, {fmt::format("{:.0f} W", r.power_w_avg)},
                     {fmt::format("{} C", r.temp_c_max)}});
    }
    table.print(out, color);
  }
}

Result<std::string> export_text(const RecordedRows& rows, const std::string& format) {
  if (format == "csv") return plain_csv(rows);
  if (format == "json") return util::json_text(rows_json(rows), 2) + "\n";
  if (format == "ndjson") {
    std::string out;
    for (const auto& item : rows_json(rows)) out += util::json_text(item) + "\n";
    return out;
  }
  if (format == "nvidia-smi" || format == "gpu-utilization") {
    if (rows.level != store::Level::Samples) {
      return make_error(Error::Code::Invalid, fmt::format("--format {} writes samples: use --level samples", format));
    }
    return format == "nvidia-smi" ? nvidia_smi_csv(rows) : gpu_utilization_csv(rows);
  }
  return make_error(Error::Code::Invalid,
                    fmt::format("--format {}: expected csv, ndjson, json, nvidia-smi or gpu-utilization", format));
}

}  // namespace detail

namespace {

using detail::RecordedRows;

Result<RecordedRows> read_rows(const GlobalOptions& global, const HistoryFlags& flags, long long default_since_ms,
                       const std::string& default_level) {
  auto loaded = load_config(global);
  if (!loaded.ok()) return make_error(Error::Code::Invalid, "");  // load_config printed why
  TARMAC_TRY_ASSIGN(auto reader, open_store(loaded->config, flags.range));
  RecordedRows rows;
  TARMAC_TRY_ASSIGN(rows.range, resolve_range(reader, flags.range, default_since_ms));
  TARMAC_TRY_ASSIGN(const auto gpus, parse_gpu_list(flags.gpus));
  TARMAC_TRY_ASSIGN(rows.level, detail::parse_level(flags.level == "auto" ? default_level : flags.level, rows.range));
  TARMAC_TRY_ASSIGN(rows.gpus, reader.gpus());
  if (rows.level == store::Level::Samples) {
    TARMAC_TRY_ASSIGN(rows.samples, reader.samples(rows.range, gpus));
  } else {
    TARMAC_TRY_ASSIGN(rows.rollups, reader.rollups(rows.level, rows.range, gpus));
  }
  if (flags.events) {
    TARMAC_TRY_ASSIGN(rows.events, reader.events(rows.range));
  }
  return rows;
}

// Prints why rows could not be read (unless load_config already did); the exit code for it.
int read_failure(const Error& error) {
  if (!error.message.empty()) print_error(error);
  return error.code == Error::Code::Invalid ? kExitUsage : kExitCouldNotLook;
}

int run_history(const GlobalOptions& global, const HistoryFlags& flags) {
  auto rows = read_rows(global, flags, kHourMs, "auto");
  if (!rows.ok()) return read_failure(rows.error());
  if (global.json) {
    fmt::print("{}\n", util::json_text(detail::history_json(*rows, flags.events), 2));
    return kExitOk;
  }
  detail::print_history_table(stdout, *rows, use_color(global, stdout));
  if (flags.events) fmt::print("{}", detail::events_text(rows->events));
  return kExitOk;
}

int run_export(const GlobalOptions& global, const HistoryFlags& flags) {
  auto rows = read_rows(global, flags, 24 * kHourMs, "samples");
  if (!rows.ok()) return read_failure(rows.error());
  auto out = detail::export_text(*rows, flags.format);
  if (!out.ok()) {
    print_error(out.error());
    return kExitUsage;
  }
  if (flags.output.empty() || flags.output == "-") {
    std::fwrite(out->data(), 1, out->size(), stdout);
    return kExitOk;
  }
  if (!util::write_file_atomically(flags.output, *out)) {
    print_error(make_error(Error::Code::Io, fmt::format("cannot write {}", flags.output)));
    return kExitCouldNotLook;
  }
  return kExitOk;
}

void add_common(CLI::App& cmd, HistoryFlags& flags, const std::string& default_since) {
  add_range_flags(cmd, flags.range, default_since);
  cmd.add_option("-i,--id", flags.gpus, "GPU indices, comma-separated (default: all)");
  cmd.add_option("--level", flags.level, "samples, minutes (1-minute rollups), hours, or auto by the range's length")
      ->check(CLI::IsMember({"auto", "samples", "minutes", "hours"}));
}

}  // namespace

void add_history_commands(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* history = app.add_subcommand("history", "Recorded telemetry of a time range (default: the last hour recorded)");
  auto hflags = std::make_shared<HistoryFlags>();
  add_common(*history, *hflags, "1h");
  history->add_flag("--events", hflags->events, "Also list the events (processes, throttling, faults, agent starts)");
  history->callback([&global, &exit_code, hflags] { exit_code = run_history(global, *hflags); });

  auto* exp = app.add_subcommand("export", "Recorded telemetry as a file: csv, ndjson, json, nvidia-smi's CSV, or "
                                           "the classic gpu_utilization.csv layout (default: the last day, samples)");
  auto eflags = std::make_shared<HistoryFlags>();
  add_common(*exp, *eflags, "1d");
  exp->add_option("--format", eflags->format,
                  "csv, ndjson, json, nvidia-smi (its --query-gpu CSV) or gpu-utilization "
                  "(epoch,util%|memutil%|usedMiB|powerW per GPU)")
      ->check(CLI::IsMember({"csv", "ndjson", "json", "nvidia-smi", "gpu-utilization"}));
  exp->add_option("-o,--output", eflags->output, "Write to FILE (atomically) instead of standard output");
  exp->callback([&global, &exit_code, eflags] { exit_code = run_export(global, *eflags); });
}

}  // namespace tarmac::cli
