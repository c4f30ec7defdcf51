#include "tarmac/cli/history.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <string>

#include "cli_test_support.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::cli {
namespace {

using detail::RecordedRows;
using testing::printed;

constexpr long long kHistoryT0 = 1736154000000;  // Monday 2025-01-06 09:00:00 UTC
constexpr long long kHistoryHourMs = 3600LL * 1000;

// Ten of nvidia-smi's markers for a value that is not there, as export writes them.
const std::string kNotSupportedTimesTen = [] {
  std::string out;
  for (int i = 0; i < 10; ++i) out += ", [Not Supported]";
  return out;
}();

store::GpuSample full_sample(long long ts_ms, unsigned gpu) {
  store::GpuSample s;
  s.ts_ms = ts_ms;
  s.gpu = gpu;
  s.util_pct = 50;
  s.mem_util_pct = 10;
  s.mem_used_mib = 1024;
  s.power_w = 250;
  s.temp_c = 60;
  s.sm_mhz = 1410;
  s.mem_mhz = 1215;
  s.activity = gpu::Activity::Busy;
  return s;
}

RecordedRows sample_rows() {
  RecordedRows rows;
  rows.range = {kHistoryT0, kHistoryT0 + kHistoryHourMs};
  rows.gpus.push_back({0, "GPU-aaaa", "NVIDIA A100-SXM4-40GB", "00000000:07:00.0", 40960});
  rows.samples.push_back(full_sample(kHistoryT0, 0));
  store::GpuSample bare;  // a sample of GPU 1 where nothing could be read
  bare.ts_ms = kHistoryT0;
  bare.gpu = 1;
  rows.samples.push_back(bare);
  rows.samples.push_back(full_sample(kHistoryT0 + 1000, 0));
  return rows;
}

RecordedRows rollup_rows() {
  RecordedRows rows;
  rows.level = store::Level::Hours;
  rows.range = {kHistoryT0, kHistoryT0 + 30 * 24 * kHistoryHourMs};
  rows.rollups.push_back(store::Rollup{kHistoryT0, 3, 3600, 87.456, 100, 20.0, 30000.4, 30500, 310.6, 71});
  return rows;
}

TEST(HistoryLevel, NamedLevels) {
  const store::TimeRange any{0, 1};
  EXPECT_EQ(*detail::parse_level("samples", any), store::Level::Samples);
  EXPECT_EQ(*detail::parse_level("minutes", any), store::Level::Minutes);
  EXPECT_EQ(*detail::parse_level("hours", any), store::Level::Hours);
}

TEST(HistoryLevel, AutoByTheRangesLength) {
  EXPECT_EQ(*detail::parse_level("auto", {0, 6 * kHistoryHourMs}), store::Level::Samples);
  EXPECT_EQ(*detail::parse_level("auto", {0, 6 * kHistoryHourMs + 1}), store::Level::Minutes);
  EXPECT_EQ(*detail::parse_level("auto", {0, 8 * 24 * kHistoryHourMs}), store::Level::Minutes);
  EXPECT_EQ(*detail::parse_level("auto", {0, 8 * 24 * kHistoryHourMs + 1}), store::Level::Hours);
}

TEST(HistoryLevel, AnythingElseNamesTheValue) {
  const auto r = detail::parse_level("seconds", {0, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::Invalid);
  EXPECT_EQ(r.error().message, "--level seconds: expected auto, samples, minutes or hours");
}

TEST(ExportCsv, SamplesWithEmptyCellsForMissingValues) {
  EXPECT_EQ(detail::plain_csv(sample_rows()),
            "ts_ms,time,gpu,util_pct,mem_util_pct,mem_used_mib,power_w,temp_c,sm_mhz,mem_mhz,class\n"
            "1736154000000,2025-01-06T09:00:00Z,0,50,10,1024,250,60,1410,1215,busy\n"
            "1736154000000,2025-01-06T09:00:00Z,1,,,,,,,,idle\n"
            "1736154001000,2025-01-06T09:00:01Z,0,50,10,1024,250,60,1410,1215,busy\n");
}

TEST(ExportCsv, Rollups) {
  EXPECT_EQ(detail::plain_csv(rollup_rows()),
            "ts_ms,time,gpu,samples,util_avg_pct,util_max_pct,mem_util_avg_pct,mem_used_avg_mib,mem_used_max_mib,"
            "power_avg_w,temp_max_c\n"
            "1736154000000,2025-01-06T09:00:00Z,3,3600,87.46,100,20.00,30000.4,30500,310.6,71\n");
}

TEST(ExportCsv, NoRowsIsTheHeaderOnly) {
  RecordedRows rows;
  EXPECT_EQ(detail::plain_csv(rows), "ts_ms,time,gpu,util_pct,mem_util_pct,mem_used_mib,power_w,temp_c,sm_mhz,mem_mhz,class\n");
  EXPECT_EQ(detail::gpu_utilization_csv(rows), "");
}

TEST(ExportGpuUtilization, OneLinePerTimestampOneCellPerGpu) {
  EXPECT_EQ(detail::gpu_utilization_csv(sample_rows()),
            "1736154000,50|10|1024|250,|||\n"
            "1736154001,50|10|1024|250\n");
}

TEST(ExportNvidiaSmi, SamplesThroughQuerysFieldReaders) {
  const std::string csv = detail::nvidia_smi_csv(sample_rows());
  const auto first_newline = csv.find('\n');
  ASSERT_NE(first_newline, std::string::npos);
  EXPECT_TRUE(csv.starts_with("timestamp, index, name, uuid, utilization.gpu [%]")) << csv;
  EXPECT_NE(csv.find(", 0, NVIDIA A100-SXM4-40GB, GPU-aaaa, 50 %, 10 %, 1024 MiB, 40960 MiB, 250.00 W, 60, 1410 MHz, "
                     "1215 MHz\n"),
            std::string::npos)
      << csv;
  // GPU 1 is not in the store's GPU list and read nothing: markers, not zeros.
  EXPECT_NE(csv.find(", 1" + kNotSupportedTimesTen + "\n"), std::string::npos)
      << csv;
}

// A store is a file anyone can hand over (--db). power_w * 1000 overflowed a long long (undefined)
// and wrapped into an unsigned; negative percentages wrapped into huge ones. Values that fit no
// reading are shown as unknown.
TEST(ExportNvidiaSmi, ValuesThatFitNoReadingAreUnknownNotWrapped) {
  RecordedRows rows;
  store::GpuSample s;
  s.ts_ms = kHistoryT0;
  s.gpu = 0;
  s.util_pct = -1;
  s.mem_used_mib = std::numeric_limits<long long>::max();
  s.power_w = std::numeric_limits<long long>::max() / 10;
  s.temp_c = 4294967356LL;  // 2^32 + 60: was shown as 60
  rows.samples.push_back(s);
  const std::string csv = detail::nvidia_smi_csv(rows);
  const std::string row = csv.substr(csv.find('\n') + 1);
  EXPECT_EQ(row.find("4294967295"), std::string::npos) << row;
  EXPECT_EQ(row.find(", 60,"), std::string::npos) << row;
  EXPECT_NE(row.find(", 0" + kNotSupportedTimesTen + "\n"), std::string::npos)
      << row;
}

TEST(ExportText, FormatsAndTheirLimits) {
  const auto rows = sample_rows();
  EXPECT_EQ(*detail::export_text(rows, "csv"), detail::plain_csv(rows));
  const auto ndjson = *detail::export_text(rows, "ndjson");
  EXPECT_EQ(std::count(ndjson.begin(), ndjson.end(), '\n'), 3);
  EXPECT_EQ(nlohmann::json::parse(*detail::export_text(rows, "json")).size(), 3U);
  // nvidia-smi's and gpu_utilization's layouts are of samples: rollups are refused by name.
  const auto refused = detail::export_text(rollup_rows(), "nvidia-smi");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Error::Code::Invalid);
  EXPECT_EQ(refused.error().message, "--format nvidia-smi writes samples: use --level samples");
  EXPECT_FALSE(detail::export_text(rollup_rows(), "gpu-utilization").ok());
  EXPECT_TRUE(detail::export_text(rollup_rows(), "csv").ok());
  EXPECT_FALSE(detail::export_text(rows, "xml").ok());
}

TEST(HistoryJson, RowsWithNullsAndEvents) {
  auto rows = sample_rows();
  rows.events.push_back({kHistoryT0, std::nullopt, "agent-start", "pid 1"});
  const auto j = detail::history_json(rows, true);
  EXPECT_EQ(j["since"], "2025-01-06T09:00:00Z");
  EXPECT_EQ(j["level"], "samples");
  ASSERT_EQ(j["rows"].size(), 3U);
  EXPECT_EQ(j["rows"][0]["util_pct"], 50);
  EXPECT_TRUE(j["rows"][1]["util_pct"].is_null());
  EXPECT_EQ(j["rows"][1]["class"], "idle");
  ASSERT_EQ(j["events"].size(), 1U);
  EXPECT_TRUE(j["events"][0]["gpu"].is_null());
  EXPECT_FALSE(detail::history_json(rows, false).contains("events"));
  EXPECT_EQ(detail::history_json(rollup_rows(), false)["rows"][0]["util_avg_pct"], 87.456);
}

TEST(HistoryTable, NothingRecordedSaysSo) {
  RecordedRows rows;
  rows.range = {kHistoryT0, kHistoryT0 + kHistoryHourMs};
  const std::string text = printed([&](std::FILE* out) { detail::print_history_table(out, rows, false); });
  EXPECT_TRUE(text.starts_with("No samples recorded from ")) << text;
  EXPECT_TRUE(text.ends_with(" UTC.\n")) << text;
}

TEST(HistoryTable, SamplesWithDashesForMissingValues) {
  const std::string text = printed([&](std::FILE* out) { detail::print_history_table(out, sample_rows(), false); });
  EXPECT_TRUE(text.starts_with("TIME (UTC)           GPU  UTIL  MEM UTIL  MEM USED  POWER  TEMP        SM  CLASS\n"))
      << text;
  EXPECT_NE(text.find("2025-01-06T09:00:00    0  50 %      10 %  1024 MiB  250 W  60 C  1410 MHz  busy\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("2025-01-06T09:00:00    1     -         -         -      -     -         -  idle\n"),
            std::string::npos)
      << text;
}

TEST(HistoryTable, Rollups) {
  const std::string text = printed([&](std::FILE* out) { detail::print_history_table(out, rollup_rows(), false); });
  EXPECT_NE(text.find("87.5 %"), std::string::npos) << text;
  EXPECT_NE(text.find("30000 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("311 W"), std::string::npos) << text;
}

TEST(HistoryEvents, NoneAndHostileDetails) {
  EXPECT_EQ(detail::events_text({}), "\nEvents:\n  none\n");
  const std::string text =
      detail::events_text({{kHistoryT0, 2U, "process-start", "pid 9 \x1b]0;owned\x07 python"},
                           {kHistoryT0, std::nullopt, "kind\x1b[2J", ""}});
  EXPECT_FALSE(testing::has_raw_control(text)) << text;
  EXPECT_NE(text.find("GPU 2  process-start   pid 9 \\x1b]0;owned\\x07 python\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kind\\x1b[2J"), std::string::npos) << text;
}

}  // namespace
}  // namespace tarmac::cli
