// `tarmac history` (recorded telemetry on the terminal or as JSON) and `tarmac export` (the same
// as CSV, NDJSON, JSON, nvidia-smi's CSV layout or the classic gpu_utilization.csv layout).
#pragma once

#include "tarmac/cli/cli_fwd.hpp"
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tarmac/cli/context.hpp"
#include "tarmac/store/reader.hpp"

namespace tarmac::cli {

void add_history_commands(CLI::App& app, const GlobalOptions& global, int& exit_code);

// The pieces of history's and export's output, declared for their unit tests.
namespace detail {

// What history and export read: one level of rows for the range and GPUs.
struct RecordedRows {
  store::Level level = store::Level::Samples;
  store::TimeRange range;
  std::vector<store::GpuInfo> gpus;
  std::vector<store::GpuSample> samples;
  std::vector<store::Rollup> rollups;
  std::vector<store::Event> events;
};

// --level: samples, minutes or hours; "auto" picks by the range's length (up to 6 h samples, up to
// 8 days minutes, else hours). An Invalid error naming the value otherwise.
[[nodiscard]] Result<store::Level> parse_level(const std::string& text, const store::TimeRange& range);

// The export formats: plain CSV (an empty cell for a missing value), nvidia-smi's --query-gpu CSV,
// gpu_utilization.csv (one line per timestamp), and the rows as a JSON array.
[[nodiscard]] std::string plain_csv(const RecordedRows& rows);
[[nodiscard]] std::string nvidia_smi_csv(const RecordedRows& rows);
[[nodiscard]] std::string gpu_utilization_csv(const RecordedRows& rows);
[[nodiscard]] nlohmann::json rows_json(const RecordedRows& rows);

// What `export --format FORMAT` writes; an Invalid error when FORMAT writes samples and `rows` are
// rollups, or FORMAT is none of them.
[[nodiscard]] Result<std::string> export_text(const RecordedRows& rows, const std::string& format);

// `history --json`, with the events when `with_events`.
[[nodiscard]] nlohmann::json history_json(const RecordedRows& rows, bool with_events);

// history's table (or the line that says nothing was recorded), and its --events list; recorded
// text (event details, process names) is shown escaped.
void print_history_table(std::FILE* out, const RecordedRows& rows, bool color);
[[nodiscard]] std::string events_text(const std::vector<store::Event>& events);

}  // namespace detail

}  // namespace tarmac::cli
