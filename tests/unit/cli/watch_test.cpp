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

TEST(FrameJson, OneObjectPerFrame) {
  gpu::Snapshot snap;
  snap.timestamp_unix_ms = 1736154000000;
  snap.devices = {alerts::testing::device(0, 97, 30000), gpu::Device{}};
  const auto j = detail::frame_json(snap, {gpu::Activity::Busy, gpu::Activity::Idle});
  EXPECT_EQ(j["timestamp_unix_ms"], 1736154000000);
  ASSERT_EQ(j["gpus"].size(), 2U);
  EXPECT_EQ(j["gpus"][0]["activity"], "busy");
  EXPECT_EQ(j["gpus"][1]["activity"], "idle");
  EXPECT_EQ(util::json_text(j).find('\n'), std::string::npos);  // one line: NDJSON
  EXPECT_TRUE(detail::frame_json(gpu::Snapshot{}, {})["gpus"].empty());
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
