#include "tarmac/cli/pick_command.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "cli_test_support.hpp"

namespace tarmac::cli {
namespace {

using detail::PickFlags;

// GPUs 0 and 2 of 4 chosen; GPU 1 runs a process, GPU 3 is leased by someone.
sched::Acquired two_of_four() {
  sched::Acquired a;
  a.snapshot.devices.resize(4);
  a.pick.chosen = {0, 2};
  a.pick.free = {2, 0};
  a.uuids = {"GPU-aaaa", "GPU-cccc"};
  a.pick.excluded = {{1, sched::Exclusion::Process, "1 process (pid 12)"},
                     {3, sched::Exclusion::Leased, "by alice, job j1, pid 99"}};
  return a;
}

std::string pick_error(const PickFlags& flags) {
  const auto r = detail::parse_pick(flags);
  return r.ok() ? std::string() : r.error().message;
}

TEST(ParseRequest, FlagsAsTyped) {
  const auto r = parse_request({.n = 2, .min_free = "20GiB", .max_util = 30});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->n, 2U);
  EXPECT_EQ(r->min_free_bytes, 20ULL << 30);
  EXPECT_EQ(r->max_util_pct, 30U);
  EXPECT_EQ(parse_request({})->min_free_bytes, 0U);
}

TEST(ParseRequest, BadFlagsNameThemselves) {
  const auto zero = parse_request({.n = 0});
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().code, Error::Code::Invalid);
  EXPECT_EQ(zero.error().message, "-n must be at least 1");
  EXPECT_EQ(parse_request({.n = 1, .min_free = "lots"}).error().message,
            "--min-free: 'lots' is not a size (like 20GiB, 512MiB)");
  EXPECT_EQ(parse_request({.n = 1, .min_free = "-1G"}).error().message,
            "--min-free: '-1G' is not a size (like 20GiB, 512MiB)");
  EXPECT_EQ(parse_request({.n = 1, .min_free = "", .max_util = 101}).error().message, "--max-util must be 0 to 100");
}

TEST(ParseRequest, MigIsAProfileOrAnyForOneDevice) {
  EXPECT_EQ(parse_request({.mig = "any"})->mig, "");
  EXPECT_EQ(parse_request({.mig = "1g.18gb"})->mig, "1g.18gb");
  EXPECT_EQ(parse_request({})->mig, std::nullopt);
  EXPECT_EQ(parse_request({.mig = "x"}).error().message, "--mig: 'x' is not a MIG profile (like 1g.18gb, 3g.40gb) or any");
  EXPECT_FALSE(parse_request({.n = 2, .mig = "any"}).ok());
  EXPECT_FALSE(parse_request({.max_util = 10, .mig = "any"}).ok());
}

TEST(ParsePick, AHoldLongerThanTheMachineAllowsIsRefused) {
  const detail::PickFlags flags{.request = {}, .format = "index", .hold = "2d"};
  const auto r = detail::parse_pick(flags, 24 * 3600 * 1000LL);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::Invalid);
  EXPECT_NE(r.error().message.find("--hold 2d is longer than this machine allows (scheduler.max_hold = "),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ(*detail::parse_pick(flags, 0)->hold_ms, 2 * 24 * 3600 * 1000LL) << "0: no bound";
  EXPECT_TRUE(detail::parse_pick({.request = {}, .format = "index", .hold = "1d"}, 24 * 3600 * 1000LL).ok());
}

TEST(ParsePick, FormatAndHold) {
  EXPECT_EQ(pick_error({}), "");
  EXPECT_EQ(pick_error({.request = {}, .format = "uuid", .hold = "10m"}), "");
  EXPECT_EQ(*detail::parse_pick({.request = {}, .format = "env", .hold = "30s"})->hold_ms, 30000);
  EXPECT_EQ(detail::parse_pick({})->hold_ms, std::nullopt);
  EXPECT_EQ(pick_error({.request = {}, .format = "csv"}), "--format must be index, uuid or env, not 'csv'");
  EXPECT_EQ(pick_error({.request = {}, .format = "index", .hold = "0"}), "--hold: '0' is not a duration (like 30s, 10m)");
  EXPECT_EQ(pick_error({.request = {}, .format = "index", .hold = "soon"}),
            "--hold: 'soon' is not a duration (like 30s, 10m)");
  EXPECT_EQ(pick_error({.request = {.n = 0}}), "-n must be at least 1");
}

TEST(VisibleDevices, IndicesOrUuids) {
  const auto a = two_of_four();
  EXPECT_EQ(visible_devices(a, false), "0,2");
  EXPECT_EQ(visible_devices(a, true), "GPU-aaaa,GPU-cccc");
  EXPECT_EQ(visible_devices(sched::Acquired{}, false), "");
}

TEST(PickLine, EachFormat) {
  const auto a = two_of_four();
  EXPECT_EQ(detail::pick_line(a, "index"), "0,2\n");
  EXPECT_EQ(detail::pick_line(a, "uuid"), "GPU-aaaa,GPU-cccc\n");
  EXPECT_EQ(detail::pick_line(a, "env"), "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,2\n");
}

TEST(NotEnoughMessage, SaysWhyEachGpuIsNotFree) {
  auto a = two_of_four();
  a.pick.chosen.clear();
  a.pick.free = {2};
  EXPECT_EQ(not_enough_message(a, 2),
            "no 2 free GPUs: 1 free of 4\n"
            "  GPU 1: process: 1 process (pid 12)\n"
            "  GPU 3: leased: by alice, job j1, pid 99\n");
  EXPECT_TRUE(not_enough_message(a, 1).starts_with("no 1 free GPU: ")) << not_enough_message(a, 1);
}

// A lease file in the shared lock directory is written by whoever holds the lease: its job id and
// user are any bytes but a space. They reached the terminal of the next user to run pick raw.
TEST(NotEnoughMessage, AHostileLeaseHolderIsShownEscaped) {
  sched::Acquired a;
  a.snapshot.devices.resize(1);
  a.pick.excluded = {{0, sched::Exclusion::Leased, "by m\x1b[8mallory, job \x1b]0;owned\x07\x9b" "2J"}};
  const std::string text = not_enough_message(a, 1);
  EXPECT_FALSE(testing::has_raw_control(text)) << text;
  EXPECT_EQ(text.find('\x9b'), std::string::npos) << text;
  EXPECT_EQ(text, "no 1 free GPU: 0 free of 1\n  GPU 0: leased: by m\\x1b[8mallory, job \\x1b]0;owned\\x07\\x9b2J\n");
}

TEST(PickJson, ChosenFreeExcludedAndTheHold) {
  const auto j = detail::pick_json(two_of_four(), 1736154000000LL);
  EXPECT_EQ(j["gpus"], nlohmann::json::parse(R"([{"index":0,"uuid":"GPU-aaaa"},{"index":2,"uuid":"GPU-cccc"}])"));
  EXPECT_EQ(j["cuda_visible_devices"], "0,2");
  EXPECT_EQ(j["held_until_unix_ms"], 1736154000000LL);
  EXPECT_EQ(j["free"], nlohmann::json::array({2, 0}));
  ASSERT_EQ(j["excluded"].size(), 2U);
  EXPECT_EQ(j["excluded"][1]["reason"], "leased");
  EXPECT_TRUE(detail::pick_json(two_of_four(), std::nullopt)["held_until_unix_ms"].is_null());
}

TEST(PickCommand, BadFlagsAreUsageErrorsBeforeAnythingIsLeased) {
  testing::ConfigFixture config;
  const auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "pick");
    return testing::run_captured([&] { return testing::run_command_line(add_pick_command, config.global, args); })
        .code_and_err();
  };
  for (const std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"-n", "0"}, {"--max-util", "101"}, {"--min-free", "x"}, {"--format", "csv"}, {"--hold=-1s"}}) {
    const auto [code, err] = run(args);
    EXPECT_EQ(code, kExitUsage) << args[0];
    EXPECT_TRUE(err.starts_with("tarmac pick: ")) << err;
  }
  EXPECT_EQ(run({"-n", "many"}).first, kExitUsage);  // CLI11 refuses a count that is not a number
}

TEST(CurrentUser, ANameOrTheUid) { EXPECT_FALSE(current_user().empty()); }

}  // namespace
}  // namespace tarmac::cli
