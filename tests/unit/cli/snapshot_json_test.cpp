#include "tarmac/cli/snapshot_json.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include "cli_test_support.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::cli {
namespace {

TEST(SnapshotJson, AnUnreadDeviceIsNullsNotZeros) {
  const auto j = to_json(gpu::Device{}, gpu::Activity::Idle);
  EXPECT_EQ(j["index"], 0);
  EXPECT_EQ(j["activity"], "idle");
  for (const char* key : {"uuid", "name", "mem_total_bytes", "mem_used_bytes", "util_gpu_pct", "temp_c", "power_mw",
                          "clock_event_reasons", "clock_event_reason_names", "lost", "numa_node", "pstate"}) {
    EXPECT_TRUE(j[key].is_null()) << key;
  }
  EXPECT_TRUE(j["processes"].is_array() && j["processes"].empty());
  EXPECT_TRUE(j["errors"].is_array() && j["errors"].empty());
  EXPECT_TRUE(j["cpu_affinity"].is_array());
  // Slow values are left out entirely when they were not asked for, and null when not read.
  EXPECT_FALSE(j.contains("gpm_sm_active_pct"));
  gpu::Device slow;
  slow.slow = gpu::DeviceSlowSample{};
  EXPECT_TRUE(to_json(slow, gpu::Activity::Idle)["gpm_sm_active_pct"].is_null());
}

TEST(SnapshotJson, HugeValuesKeepEveryDigit) {
  gpu::Device d;
  d.id.mem_total_bytes = std::numeric_limits<std::uint64_t>::max();
  d.sample.energy_mj = std::numeric_limits<std::uint64_t>::max() - 1;
  d.sample.clock_event_reasons = 0x4 | 0x40;
  const auto j = to_json(d, gpu::Activity::Busy);
  EXPECT_EQ(j["mem_total_bytes"].get<std::uint64_t>(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(util::json_text(j["energy_mj"]), "18446744073709551614");
  EXPECT_EQ(j["clock_event_reason_names"], nlohmann::json::array({"sw_power_cap", "hw_thermal_slowdown"}));
}

TEST(SnapshotJson, ProcessWithContainerAndState) {
  gpu::GpuProcess p;
  p.pid = 4242;
  p.used_mem_bytes = 1024;
  p.host.visibility = host::PidVisibility::Visible;
  p.host.user = "alice";
  p.host.state = 'R';
  p.host.container = host::ContainerRef{.runtime = "containerd", .id = "abc", .pod_uid = "pod-1"};
  const auto j = to_json(p);
  EXPECT_EQ(j["pid"], 4242);
  EXPECT_EQ(j["type"], gpu::to_string(gpu::ProcessType::Compute));
  EXPECT_EQ(j["visible"], true);
  EXPECT_EQ(j["state"], "R");
  EXPECT_EQ(j["container"]["runtime"], "containerd");
  EXPECT_EQ(j["container"]["pod_uid"], "pod-1");
  EXPECT_TRUE(j["sm_util_pct"].is_null());
  EXPECT_TRUE(j["slurm_job_id"].is_null());
  EXPECT_TRUE(to_json(host::ProcessInfo{})["container"].is_null());
}

// A command line is any bytes but NUL: control characters are escaped by JSON itself, invalid
// UTF-8 becomes U+FFFD when the document is written, and nothing throws.
TEST(SnapshotJson, HostileCommandLinesSurviveAsText) {
  gpu::GpuProcess p;
  p.host.command_line = std::string("\x1b]0;owned\x07 \xff\xfe\"}") + std::string(1, '\0') + "x";
  p.host.name = "\x9b" "31m";
  gpu::Device d;
  d.processes.push_back(p);
  const std::string text = util::json_text(to_json(d, gpu::Activity::Busy));
  EXPECT_FALSE(testing::has_raw_control(text)) << text;
  EXPECT_NE(text.find("\\u001b]0;owned\\u0007 \xEF\xBF\xBD\xEF\xBF\xBD\\\"}\\u0000x"), std::string::npos) << text;
  EXPECT_EQ(nlohmann::json::parse(text)["processes"][0]["name"], "\xEF\xBF\xBD" "31m");
}

TEST(SnapshotJson, ReadErrorsAreListed) {
  gpu::Device d;
  d.errors.push_back({"power", "Unknown Error"});
  const auto j = to_json(d, gpu::Activity::Fault);
  ASSERT_EQ(j["errors"].size(), 1U);
  EXPECT_EQ(j["errors"][0]["value"], "power");
  EXPECT_EQ(j["errors"][0]["message"], "Unknown Error");
}

TEST(TopologyToJson, NvLinkCountsInTheLinkNames) {
  gpu::Topology t;
  t.links = {{gpu::Link::Self, gpu::Link::NvLink, gpu::Link::Node},
             {gpu::Link::NvLink, gpu::Link::Self, gpu::Link::Unknown},
             {gpu::Link::Node, gpu::Link::Unknown, gpu::Link::Self}};
  t.nvlink_count = {{0, 12, 0}, {12, 0, 0}, {0, 0, 0}};
  const auto j = to_json(t);
  EXPECT_EQ(j["links"][0], nlohmann::json::array({"X", "NV12", "NODE"}));
  EXPECT_EQ(j["links"][1][2], "N/A");
  EXPECT_EQ(j["nvlink_count"][1][0], 12);
  const auto none = to_json(gpu::Topology{});
  EXPECT_TRUE(none["links"].is_array() && none["links"].empty());
}

}  // namespace
}  // namespace tarmac::cli
