#include "tarmac/cli/query.hpp"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fmt/format.h>
#include <optional>
#include <span>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/jobs_command.hpp"
#include "tarmac/cli/status_source.hpp"
#include "tarmac/gpu/backend.hpp"
#include "tarmac/fields/apps.hpp"
#include "tarmac/fields/format.hpp"
#include "tarmac/fields/select.hpp"
#include "tarmac/fields/table.hpp"
#include "tarmac/util/escape.hpp"
#include "tarmac/util/strings.hpp"

namespace tarmac::cli {

namespace {

// nvidia-smi exits with the NVML return code of what failed: NVML_ERROR_NOT_FOUND for a bad -i;
// with 255 when -i holds no id at all.
constexpr int kExitNoDevices = 6;
constexpr int kExitBadDeviceString = 255;
constexpr int kExitMissingValue = 255;
constexpr int kExitLibraryNotFound = 12;
constexpr int kExitDriverNotLoaded = 9;

// When NVML cannot be used at all, nvidia-smi's words and exit code on stdout (scripts test both):
// no library, no driver, or "Failed to initialize NVML: <the library's text>" with the return
// code as exit code.
int init_failure(const Error& error) {
  if (error.code == Error::Code::NotFound) {
    std::fputs("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA "
               "Display Driver is properly installed and present in your system.\nPlease also try adding directory "
               "that contains libnvidia-ml.so to your system PATH.\n",
               stdout);
    return kExitLibraryNotFound;
  }
  const std::optional<gpu::DriverFailure> failure = gpu::driver_failure(error);
  if (!failure || failure->code == 0) {
    print_error(error);  // not a library nvidia-smi would load: tarmac's own message
    return kExitCouldNotLook;
  }
  if (failure->code == kExitDriverNotLoaded) {  // NVML_ERROR_DRIVER_NOT_LOADED
    std::fputs("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
               "latest NVIDIA driver is installed and running.\n\n",
               stdout);
    return kExitDriverNotLoaded;
  }
  // nvidia-smi has its own words for a version mismatch, NVML's for the rest.
  constexpr int kVersionMismatch = 18;  // NVML_ERROR_LIB_RM_VERSION_MISMATCH
  const std::string text = failure->code == kVersionMismatch ? "Driver/library version mismatch"
                           : failure->text.empty()           ? error.message
                                                             : failure->text;
  fmt::print("Failed to initialize NVML: {}\n", text);
  return failure->code > 0 && failure->code < 256 ? failure->code : 255;
}

struct QueryArgs {
  std::optional<std::string> fields;   // --query-gpu
  std::optional<std::string> apps;     // --query-compute-apps
  std::optional<std::string> format;   // --format
  std::optional<std::string> ids;      // -i / --id
  std::optional<std::string> file;     // -f / --filename
  std::optional<long long> interval_ms;  // -l / -lms
  bool help = false;
  bool from_agent = false;             // --from-agent: the agent's last sample, when one answers
};

// A message nvidia-smi prints for bad input, on stdout as it does.
int usage(std::string_view message, int code = kExitUsage, std::string_view end = "\n") {
  fmt::print("{}{}", message, end);
  std::fflush(stdout);
  return code;
}

// Reads "--name=value", "--name value", "-n value" and "-n=value" spellings of one option.
// Returns the value and advances `i` past it; nullopt when args[i] is not this option.
std::optional<std::string> take(const std::vector<std::string>& args, std::size_t& i,
                                const std::vector<std::string_view>& spellings, bool& missing_value) {
  const std::string_view a = args[i];
  for (const auto s : spellings) {
    if (a == s) {
      if (i + 1 >= args.size()) {
        missing_value = true;
        return std::string();
      }
      return args[++i];
    }
    if (a.size() > s.size() && a.starts_with(s) && a[s.size()] == '=') return std::string(a.substr(s.size() + 1));
  }
  return std::nullopt;
}

// Parses the arguments after "query"; on failure `exit_code` is nvidia-smi's for that failure.
Result<QueryArgs> parse_args(const std::vector<std::string>& args, int& exit_code) {
  QueryArgs q;
  exit_code = kExitUsage;
  for (std::size_t i = 0; i < args.size(); ++i) {
    bool missing = false;
    auto bad_value = [&] {
      exit_code = kExitMissingValue;
      return make_error(Error::Code::Invalid, fmt::format("ERROR: Option {} is missing its value. Please run "
                                                          "'tarmac query --help' for help.\n", args[i]));
    };
    if (args[i] == "-h" || args[i] == "--help") {
      q.help = true;
      continue;
    }
    if (args[i] == "--from-agent") {
      q.from_agent = true;
      continue;
    }
    // Options whose value is kept as text.
    struct TextOption {
      std::vector<std::string_view> spellings;
      std::optional<std::string>* target;
    };
    const TextOption text_options[] = {
        {{"--query-gpu"}, &q.fields}, {{"--query-compute-apps"}, &q.apps}, {{"--format"}, &q.format},
        {{"-i", "--id"}, &q.ids},      {{"-f", "--filename"}, &q.file}};
    bool taken = false;
    for (const auto& [spellings, target] : text_options) {
      if (auto value = take(args, i, spellings, missing)) {
        if (missing) return bad_value();
        *target = std::move(*value);
        taken = true;
        break;
      }
    }
    if (taken) continue;
    if (auto v = take(args, i, {"-lms", "--loop-ms", "-l", "--loop"}, missing)) {
      if (missing) return bad_value();
      const bool ms = args[i].starts_with("-lms") || args[i].starts_with("--loop-ms") ||
                      (i > 0 && (args[i - 1] == "-lms" || args[i - 1] == "--loop-ms"));
      const auto n = util::parse_int(*v);
      if (!n || *n <= 0 || *n > 1'000'000'000LL) {
        return make_error(Error::Code::Invalid,
                          "Provided [-l(ms) | --loop(-ms)=] value is incorrect. Loop frequency must be greater than 0.\n");
      }
      q.interval_ms = ms ? *n : *n * 1000;
    } else {
      return make_error(Error::Code::Invalid, fmt::format("ERROR: Option {} is not recognized. Please run "
                                                          "'tarmac query --help' for help.\n", args[i]));
    }
  }
  return q;
}

void print_help() {
  fmt::print(
      "Usage: tarmac query --query-gpu=FIELD[,FIELD...] --format=csv[,noheader][,nounits]|json|ndjson\n"
      "                    [-i IDS] [-l SEC | -lms MS] [-f FILE]\n"
      "       tarmac query --query-compute-apps=FIELD[,FIELD...] --format=...\n"
      "                    [-i IDS] [-l SEC | -lms MS] [-f FILE]\n\n"
      "nvidia-smi's --query-gpu and --query-compute-apps: the same field names, CSV text and markers.\n"
      "  --query-gpu=F,...   fields to print (below; nvidia-smi's aliases work too)\n"
      "  --format=...        csv (with noheader, nounits), or tarmac's typed json / ndjson\n"
      "  -i, --id=IDS        GPUs by index, UUID, PCI bus id or serial, comma separated\n"
      "  -l, --loop=SEC      repeat every SEC seconds until Ctrl-C (header printed once)\n"
      "  -lms, --loop-ms=MS  repeat every MS milliseconds\n"
      "  -f, --filename=FILE write to FILE instead of stdout\n"
      "  --from-agent        the running agent's last sample (no NVML start-up; values up to\n"
      "                      a sample old, limits and modes up to a process interval), else NVML\n"
      "  --query-compute-apps=F,...  one row per compute process instead (fields below)\n\n"
      "Fields of --query-gpu:\n");
  const auto list = [](std::span<const fields::FieldSpec> table) {
    for (const auto& f : table) {
      std::string names(f.name);
      for (const auto& a : f.aliases) names += fmt::format(" or {}", a);
      if (!f.unit.empty()) names += fmt::format(" [{}]", f.unit);
      fmt::print("  {}\n      {}\n", names, f.description);
    }
  };
  list(fields::all_fields());
  fmt::print("\nFields of --query-compute-apps:\n");
  list(fields::all_app_fields());
}

// SIGINT and SIGTERM are blocked and waited for, so a loop stops between two samples and never
// in the middle of a line.
class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    sigprocmask(SIG_BLOCK, &set_, &old_);
  }
  ~StopSignals() { sigprocmask(SIG_SETMASK, &old_, nullptr); }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Waits up to `ms`; true when a stop signal arrived.
  [[nodiscard]] bool wait_ms(long long ms) const {
    if (ms < 0) ms = 0;
    timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1'000'000)};
    while (true) {
      const int sig = sigtimedwait(&set_, nullptr, &ts);
      if (sig == SIGINT || sig == SIGTERM) return true;
      if (sig < 0 && errno == EINTR) continue;
      return false;
    }
  }

 private:
  sigset_t set_{};
  sigset_t old_{};
};

long long now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

struct Output {
  std::FILE* stream = stdout;
  ~Output() {
    if (stream != stdout && stream != nullptr) std::fclose(stream);
  }
};

// Writes one row per context (and, the first time, the CSV header): GPUs for --query-gpu,
// processes for --query-compute-apps.
void write_rows(std::FILE* out, const std::vector<fields::ReadContext>& rows,
                const std::vector<const fields::FieldSpec*>& wanted, const fields::FormatOptions& format, bool first) {
  nlohmann::json list = nlohmann::json::array();
  if (first && format.form == fields::OutputForm::Csv && format.header == fields::Header::Print) {
    fmt::print(out, "{}\n", fields::csv_header(wanted));
  }
  std::vector<fields::Value> values;
  for (const auto& ctx : rows) {
    values.clear();
    for (const auto* f : wanted) values.push_back(fields::read_field(*f, ctx));
    switch (format.form) {
      case fields::OutputForm::Csv:  // process names are anybody's bytes: never raw to a terminal
        fmt::print(out, "{}\n", util::terminal_text(fields::csv_row(values, wanted, format.units)));
        break;
      case fields::OutputForm::Ndjson: fmt::print(out, "{}\n", util::json_text(fields::json_object(values, wanted))); break;
      case fields::OutputForm::Json: list.push_back(fields::json_object(values, wanted)); break;
    }
  }
  if (format.form == fields::OutputForm::Json) fmt::print(out, "{}\n", util::json_text(list, 2));
  std::fflush(out);
}

// What one snapshot's rows read: each selected GPU, or each compute process on a selected GPU.
std::vector<fields::ReadContext> rows_of(const gpu::Snapshot& snap, const std::vector<std::size_t>& selected,
                                         bool apps) {
  std::vector<fields::ReadContext> rows;
  if (apps) {
    for (const auto& app : fields::compute_apps(snap, selected)) {
      const auto& device = snap.devices[app.device];
      rows.push_back({snap, device, snap.devices.size(), &device.processes[app.process]});
    }
  } else {
    for (const std::size_t at : selected) rows.push_back({snap, snap.devices[at], snap.devices.size()});
  }
  return rows;
}

const fields::FieldSpec* first_group(const std::vector<const fields::FieldSpec*>& wanted) {
  for (const auto* f : wanted) {
    if (f->read == nullptr) return f;
  }
  return nullptr;
}

std::vector<std::size_t> all_positions(std::size_t n) {
  std::vector<std::size_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = i;
  return out;
}

}  // namespace

int run_query(const GlobalOptions& global, const std::vector<std::string>& args) {
  int parse_exit = kExitUsage;
  auto parsed = parse_args(args, parse_exit);
  if (!parsed.ok()) return usage(parsed.error().message, parse_exit);
  const QueryArgs& q = *parsed;
  if (q.help) {
    print_help();
    return kExitOk;
  }
  if (q.fields.has_value() == q.apps.has_value()) {
    fmt::print(stderr,
               "tarmac: query needs one of --query-gpu=FIELD[,FIELD...] or --query-compute-apps=FIELD[,FIELD...] "
               "(see `tarmac query --help`)\n");
    return kExitUsage;
  }
  const bool apps = q.apps.has_value();
  auto wanted = apps ? fields::parse_app_field_list(*q.apps) : fields::parse_field_list(*q.fields);
  if (!wanted.ok()) return usage(fmt::format("Field \"{}\" is not a valid field to query.\n", wanted.error().message));
  fields::FormatOptions format;
  if (q.format) {
    auto f = fields::parse_format(*q.format);
    if (!f.ok()) return usage(f.error().message);
    format = *f;
  } else if (global.json) {
    format.form = fields::OutputForm::Json;
  } else {
    return usage("\"--format=\" switch is missing. Please run 'tarmac query --help' for help.\n");
  }

  // By default NVML now, as nvidia-smi (its contract is "now"); --from-agent: the agent's view
  // (docs/recorder.md "Commands through the agent"), the same bytes from its last sample.
  // Only what the fields (and -i) read: the NVML calls for every other value are skipped.
  gpu::SnapshotOptions options{.processes = apps, .slow = false, .topology = false};
  options.values = fields::value_groups(*wanted);
  if (q.ids) options.values |= fields::kSelectionGroups;
  std::optional<StatusSource> agent;
  Result<std::unique_ptr<gpu::Backend>> backend = make_error(Error::Code::NotFound, "not opened");
  if (q.from_agent) {  // without an agent, NVML read as without --from-agent
    agent.emplace(global, gpu::ActivityThresholds{}, agent_socket(global), LeaseFiles{}, options.values);
  } else {
    backend = gpu::open_nvml_backend(global.nvml_lib);
    if (!backend.ok()) return init_failure(backend.error());
  }
  Output output;
  if (q.file) {
    output.stream = std::fopen(q.file->c_str(), "w");
    if (output.stream == nullptr) {
      fmt::print(stderr, "tarmac: cannot write {}: {}\n", *q.file, std::strerror(errno));
      return kExitUsage;
    }
  }
  std::optional<StopSignals> signals;
  if (q.interval_ms) signals.emplace();
  for (bool first = true;; first = false) {
    const long long started = now_ms();
    Result<gpu::Snapshot> snap = make_error(Error::Code::Io, "no snapshot");
    if (agent) {
      auto view = agent->read();  // prints why when neither the agent nor NVML can be read
      if (!view) return kExitCouldNotLook;
      snap = std::move(view->snapshot);
    } else {
      snap = (*backend)->snapshot(options);
    }
    if (!snap.ok()) {
      print_error(snap.error());
      return kExitCouldNotLook;
    }
    // nvidia-smi answers a machine without GPUs as it answers an -i that names none.
    if (snap->devices.empty()) return usage(fields::kNoDevicesFound, kExitNoDevices);
    std::vector<std::size_t> selected = all_positions(snap->devices.size());
    if (q.ids) {
      auto chosen = fields::select_devices(*q.ids, snap->devices);
      if (!chosen.ok() && chosen.error().code == Error::Code::Invalid) {
        return usage(chosen.error().message, kExitBadDeviceString, "");
      }
      if (!chosen.ok()) return usage(chosen.error().message, kExitNoDevices);
      selected = std::move(*chosen);
    }
    if (const fields::FieldSpec* group = first_group(*wanted)) {
      // As nvidia-smi: a section name passes parsing, shows in the header, then fails.
      if (format.form == fields::OutputForm::Csv && format.header == fields::Header::Print) {
        fmt::print(output.stream, "{}\n", fields::csv_header(*wanted));
        std::fflush(output.stream);
      }
      return usage(fmt::format("{} : not a valid field to query.\n", group->name));
    }
    write_rows(output.stream, rows_of(*snap, selected, apps), *wanted, format, first);
    if (!q.interval_ms) return kExitOk;
    if (signals->wait_ms(*q.interval_ms - (now_ms() - started))) return kExitOk;
  }
}

void add_query_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand("query",
                                 "nvidia-smi's --query-gpu and --query-compute-apps: the same fields, CSV text "
                                 "and exit codes (query --help lists the fields)");
  // Every argument after "query" is ours: CLI11 neither parses nor passes them up to the parent.
  cmd->fallthrough(false);
  cmd->allow_extras();
  cmd->prefix_command();
  cmd->set_help_flag();
  cmd->callback([cmd, &global, &exit_code] { exit_code = run_query(global, cmd->remaining()); });
}

}  // namespace tarmac::cli
