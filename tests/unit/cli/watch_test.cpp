#include "tarmac/cli/watch.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "../alerts/test_support.hpp"
#include "cli_test_support.hpp"
#include "tarmac/cli/status.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::cli {
namespace {

TEST(InPlaceFrame, HomeEachLineClearedThenTheRestErased) {
  EXPECT_EQ(detail::in_place_frame("a\nbb"), "\033[Ha\033[K\nbb\033[K\n\033[J");
  EXPECT_EQ(detail::in_place_frame("a\n"), "\033[Ha\033[K\n\033[J");
  EXPECT_EQ(detail::in_place_frame("a\n\nb"), "\033[Ha\033[K\n\033[K\nb\033[K\n\033[J");
  EXPECT_EQ(detail::in_place_frame(""), "\033[H\033[J");
}

TEST(RenderFrame, TheIntervalThenStatus) {
  testing::ScopedEnv visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpu::Snapshot snap;
  snap.devices.push_back(alerts::testing::device(0, 97, 30000));
  const std::string frame = detail::render_frame(snap, {}, false, 0.5);
  EXPECT_TRUE(frame.starts_with("Every 0.5s: tarmac status\n")) << frame;
  EXPECT_NE(frame.find("busy"), std::string::npos) << frame;
  EXPECT_TRUE(detail::render_frame(snap, {}, false, 2).starts_with("Every 2s: tarmac status\n"));
}

// The frame is drawn in place with tarmac's own escapes: a process's name must add none.
TEST(RenderFrame, HostileProcessNamesAddNoEscapes) {
  testing::ScopedEnv visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpu::Snapshot snap;
  snap.devices.push_back(alerts::testing::device(0, 97, 30000));
  auto p = alerts::testing::process(9, 1000, "eve", "\x1b[2J\x1b[H fake status");
  p.host.visibility = host::PidVisibility::Visible;
  snap.devices[0].processes.push_back(p);
  const std::string frame = detail::render_frame(snap, {}, false, 1);
  EXPECT_FALSE(testing::has_raw_control(frame)) << frame;
}

TEST(FrameJson, OneObjectPerFrameAsStatusJson) {
  StatusView view;
  view.snapshot.timestamp_unix_ms = 1736154000000;
  view.snapshot.devices = {alerts::testing::device(0, 97, 30000), alerts::testing::device(1, 0, 0)};
  view.classes = {gpu::Activity::Busy, gpu::Activity::ReservedIdle};
  view.leases = {{}, {"job 12 alice", "12"}};
  view.backfill = {{{"qwen2.5-7b", "llama", 120, 200}}, {}};
  const auto j = detail::frame_json(view, std::nullopt, std::nullopt);
  EXPECT_EQ(j["timestamp_unix_ms"], 1736154000000);
  ASSERT_EQ(j["gpus"].size(), 2U);
  EXPECT_EQ(j["gpus"][0]["activity"], "busy");
  EXPECT_EQ(j["gpus"][1]["activity"], "reserved-idle");
  // What status --json says of the same view: the lease, the backfill batch, the verdicts.
  EXPECT_EQ(j, detail::status_json(view, std::nullopt, std::nullopt));
  EXPECT_EQ(j["gpus"][1]["lease"], "job 12 alice");
  EXPECT_TRUE(j["gpus"][0]["lease"].is_null());
  ASSERT_EQ(j["gpus"][0]["backfill"].size(), 1U);
  EXPECT_EQ(j["gpus"][0]["backfill"][0]["model"], "qwen2.5-7b");
  bool backfill_verdict = false;
  for (const auto& v : j["verdicts"]) backfill_verdict = backfill_verdict || v["code"] == "backfill";
  EXPECT_TRUE(backfill_verdict) << j.dump();
  EXPECT_EQ(util::json_text(j).find('\n'), std::string::npos);  // one line: NDJSON
  EXPECT_TRUE(detail::frame_json(StatusView{}, std::nullopt, std::nullopt)["gpus"].empty());
}

TEST(WatchCommand, IntervalAndCountAreChecked) {
  testing::ConfigFixture config;
  for (const std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"watch", "-n", "0.05"}, {"watch", "-n", "90000"}, {"watch", "-n", "soon"}, {"watch", "-c", "-1"},
           {"watch", "-c", "many"}}) {
    EXPECT_EQ(testing::run_command_line(add_watch_command, config.global, args), kExitUsage) << args[2];
  }
}

}  // namespace
}  // namespace tarmac::cli
