#include "tarmac/cli/report_command.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "cli_test_support.hpp"
#include "tarmac/store/recorder.hpp"

namespace tarmac::cli {
namespace {

using testing::ConfigFixture;
using testing::run_command_line;

constexpr long long kReportT0 = 1736154000000;  // Monday 2025-01-06 09:00:00 UTC

TEST(ReportOptions, PriceAndGpus) {
  const auto none = detail::report_options("", "");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->price_per_gpu_hour, std::nullopt);
  EXPECT_TRUE(none->gpus.empty());
  const auto some = detail::report_options("2.49", "0,3");
  ASSERT_TRUE(some.ok()) << some.error().message;
  EXPECT_EQ(some->price_per_gpu_hour, 2.49);
  EXPECT_EQ(some->gpus, (std::vector<unsigned>{0, 3}));
  EXPECT_EQ(detail::report_options("0", "")->price_per_gpu_hour, 0.0);
}

TEST(ReportOptions, ABadPriceNamesItself) {
  for (const char* bad : {"-1", "cheap", "$2", "2.49/h", "nan", "inf", "1e999"}) {
    const auto r = detail::report_options(bad, "");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, Error::Code::Invalid);
    EXPECT_EQ(r.error().message, fmt::format("--price {}: expected US dollars per GPU-hour, like 2.49", bad));
  }
}

TEST(ReportOptions, ABadGpuListIsInvalid) {
  const auto r = detail::report_options("1", "0,gpu1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::Invalid);
}

class ReportCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    store::Recorder rec({db_, {}, 1000});
    rec.update(store::ActivitySpan{0, gpu::Activity::Busy, kReportT0 - 3600 * 1000, kReportT0});
    const auto status = rec.flush();
    ASSERT_TRUE(status.ok) << status.message;
  }
  int report(std::vector<std::string> args) {
    args.insert(args.begin(), "report");
    return run_command_line(add_report_command, config_.global, args);
  }

  ConfigFixture config_;
  std::string db_ = config_.dir() / "tarmac.db";
};

TEST_F(ReportCommand, BadFlagsAreUsageErrors) {
  EXPECT_EQ(report({"--db", db_, "--price", "-1"}), kExitUsage);
  EXPECT_EQ(report({"--db", db_, "-i", "x"}), kExitUsage);
  EXPECT_EQ(report({"--db", db_, "--since", "a while"}), kExitUsage);
  EXPECT_EQ(report({"--db", db_, "--since", "2025-01-07", "--until", "2025-01-06"}), kExitUsage);
}

TEST_F(ReportCommand, AMissingStoreCouldNotBeRead) {
  EXPECT_EQ(report({"--db", config_.dir() / "none.db"}), kExitCouldNotLook);
}

TEST_F(ReportCommand, JsonOfTheRecording) {
  config_.global.json = true;
  const auto ran = testing::run_captured([&] { return report({"--db", db_, "--price", "2"}); });
  ASSERT_EQ(ran.code, kExitOk) << ran.err;
  EXPECT_TRUE(nlohmann::json::parse(ran.out, nullptr, false).is_object()) << ran.out;
}

}  // namespace
}  // namespace tarmac::cli
