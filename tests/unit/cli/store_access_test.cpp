#include "tarmac/cli/store_access.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "cli_test_support.hpp"
#include "tarmac/store/recorder.hpp"

namespace tarmac::cli {
namespace {

using testing::TempDir;

constexpr long long kRangeT0 = 1736154000000;  // Monday 2025-01-06 09:00:00 UTC
constexpr long long kRangeDayMs = 86400LL * 1000;

// A store at `path` recording from `since_ms` to `until_ms` (an empty store when they are equal).
void recorded_store(const std::string& path, long long since_ms, long long until_ms) {
  store::Recorder rec({path, {}, 1000});
  if (until_ms > since_ms) rec.update(store::ActivitySpan{0, gpu::Activity::Busy, since_ms, until_ms});
  const auto status = rec.flush();
  ASSERT_TRUE(status.ok) << status.message;
}

// A store in a directory of its own, open for reading.
class RangeStore {
 public:
  RangeStore(long long since_ms, long long until_ms) {
    recorded_store(path_, since_ms, until_ms);
    auto reader = store::Reader::open(path_);
    if (!reader.ok()) throw std::runtime_error(reader.error().message);
    reader_.emplace(std::move(*reader));
  }
  store::Reader& reader() { return *reader_; }

 private:
  TempDir dir_;
  std::string path_ = dir_ / "tarmac.db";
  std::optional<store::Reader> reader_;
};

Result<store::TimeRange> range_of(store::Reader& reader, const std::string& since, const std::string& until,
                                  long long default_since_ms = kRangeDayMs) {
  return resolve_range(reader, RangeFlags{.db = "", .since = since, .until = until}, default_since_ms);
}

TEST(ParseTimeMs, EveryDocumentedSpellingIsUtc) {
  EXPECT_EQ(parse_time_ms("2025-01-06"), kRangeT0 - 9 * 3600 * 1000);
  EXPECT_EQ(parse_time_ms("2025-01-06 09:00"), kRangeT0);
  EXPECT_EQ(parse_time_ms("2025-01-06T09:00"), kRangeT0);
  EXPECT_EQ(parse_time_ms("2025-01-06T09:00Z"), kRangeT0);
  EXPECT_EQ(parse_time_ms("2025-01-06 09:00:01"), kRangeT0 + 1000);
  EXPECT_EQ(parse_time_ms("2025-01-06T09:00:00Z"), kRangeT0);
  EXPECT_EQ(parse_time_ms("@1736154000"), kRangeT0);
  EXPECT_EQ(parse_time_ms("@1736154000.5"), kRangeT0 + 500);
}

TEST(ParseTimeMs, AnythingElseIsRefused) {
  for (const char* bad : {"", "yesterday", "2025-01-06 09", "2025-01-06x", "2025-13-01", "@", "@soon", "@nan",
                          "@inf", "7d", "2025-01-06 09:00 UTC"}) {
    EXPECT_EQ(parse_time_ms(bad), std::nullopt) << bad;
  }
}

// "@1e300" was converted to a long long of milliseconds without a check: undefined behaviour,
// and in practice a range that silently meant something else.
TEST(ParseTimeMs, EpochsOutsideYears1To9999AreRefused) {
  EXPECT_EQ(parse_time_ms("@1e300"), std::nullopt);
  EXPECT_EQ(parse_time_ms("@-1e300"), std::nullopt);
  EXPECT_EQ(parse_time_ms("@9223372036854775807"), std::nullopt);
  EXPECT_EQ(parse_time_ms("@253402300800"), std::nullopt);
  EXPECT_EQ(parse_time_ms("@253402300799"), 253402300799000LL);
  EXPECT_EQ(parse_time_ms("@0"), 0);
}

TEST(ParseGpuList, IndicesSpacesAndEmptyParts) {
  EXPECT_EQ(*parse_gpu_list(""), std::vector<unsigned>{});
  EXPECT_EQ(*parse_gpu_list("0,2"), (std::vector<unsigned>{0, 2}));
  EXPECT_EQ(*parse_gpu_list(" 3 ,, 1"), (std::vector<unsigned>{3, 1}));
}

TEST(ParseGpuList, BadIndicesNameTheText) {
  for (const char* bad : {"a", "-1", "0,x", "1.5", "0x1"}) {
    const auto r = parse_gpu_list(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, Error::Code::Invalid);
    EXPECT_EQ(r.error().message, fmt::format("-i {}: expected GPU indices like 0,2", bad));
  }
}

// 4294967296 wrapped to GPU 0 (and 4294967298 to GPU 2): a typo read another GPU's history.
TEST(ParseGpuList, AnIndexPastAnUnsignedIsRefusedNotWrapped) {
  EXPECT_FALSE(parse_gpu_list("4294967296").ok());
  EXPECT_FALSE(parse_gpu_list("1,4294967298").ok());
  EXPECT_FALSE(parse_gpu_list("99999999999999999999999").ok());
  EXPECT_EQ(*parse_gpu_list("4294967295"), std::vector<unsigned>{4294967295U});
}

TEST(StorePath, TheDbFlagWinsThenTheStateDirectory) {
  config::Config cfg;
  cfg.agent.state_dir = "/srv/tarmac-state";
  EXPECT_EQ(store_path(cfg, "/tmp/other.db"), "/tmp/other.db");
  EXPECT_EQ(store_path(cfg, ""), store::database_path("/srv/tarmac-state"));
}

TEST(ResolveRange, DefaultIsTheEndOfTheRecordingBack) {
  RangeStore s(kRangeT0 - 10 * kRangeDayMs, kRangeT0);
  const auto r = range_of(s.reader(), "", "");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->until_ms, kRangeT0 + 1);
  EXPECT_EQ(r->since_ms, kRangeT0 + 1 - kRangeDayMs);
}

// "The last 7 days" of a store that holds 2 days is those 2 days.
TEST(ResolveRange, ADurationStartsNoEarlierThanTheRecording) {
  RangeStore s(kRangeT0 - 2 * kRangeDayMs, kRangeT0);
  const auto r = range_of(s.reader(), "7d", "");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->since_ms, kRangeT0 - 2 * kRangeDayMs);
  EXPECT_EQ(r->until_ms, kRangeT0 + 1);
}

TEST(ResolveRange, ExplicitTimes) {
  RangeStore s(kRangeT0 - 2 * kRangeDayMs, kRangeT0);
  const auto r = range_of(s.reader(), "2025-01-01", "2025-01-06 09:00");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->since_ms, *parse_time_ms("2025-01-01"));  // a time is taken as given, recording or not
  EXPECT_EQ(r->until_ms, kRangeT0);
}

TEST(ResolveRange, AnEmptyStoreEndsNow) {
  RangeStore s(0, 0);
  const long long before = static_cast<long long>(std::time(nullptr)) * 1000;
  const auto r = range_of(s.reader(), "1h", "");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_GE(r->until_ms, before);
  EXPECT_EQ(r->until_ms - r->since_ms, 3600 * 1000);
}

TEST(ResolveRange, BadValuesAreInvalidAndNameTheFlag) {
  RangeStore s(kRangeT0 - kRangeDayMs, kRangeT0);
  const auto until = range_of(s.reader(), "", "tomorrow");
  ASSERT_FALSE(until.ok());
  EXPECT_EQ(until.error().code, Error::Code::Invalid);
  EXPECT_TRUE(until.error().message.starts_with("--until tomorrow: expected a time")) << until.error().message;
  const auto since = range_of(s.reader(), "last week", "");
  ASSERT_FALSE(since.ok());
  EXPECT_TRUE(since.error().message.starts_with("--since last week: expected a duration")) << since.error().message;
  const auto huge = range_of(s.reader(), "@1e300", "");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().code, Error::Code::Invalid);
}

TEST(ResolveRange, SinceMustComeBeforeUntil) {
  RangeStore s(kRangeT0 - kRangeDayMs, kRangeT0);
  const auto r = range_of(s.reader(), "2025-01-07", "2025-01-06");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::Invalid);
  EXPECT_EQ(r.error().message, "--since must be before --until");
}

TEST(OpenStore, AMissingStoreIsAnErrorNamingIt) {
  TempDir dir;
  config::Config cfg;
  const auto r = open_store(cfg, RangeFlags{.db = dir / "none.db", .since = "", .until = ""});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(dir / "none.db"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace tarmac::cli
