#include "tarmac/cli/doctor.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "cli_test_support.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::cli {
namespace {

using detail::DoctorReport;

// The agent's 3 s window at 1 s, sampled until a moment ago: doctor takes it.
detail::WindowFacts good_window() {
  detail::WindowFacts f;
  f.window_ms = 3000;
  f.samples = 4;
  f.span_ms = 3000;
  f.max_gap_ms = 1000;
  f.newest_unix_ms = 1'700'000'000'000;
  f.newest_age_ms = 300;
  f.interval_ms = 1000;
  f.process_interval_ms = 5000;
  return f;
}

TEST(DoctorWindow, TheAgentsSamplesStandOnlyWhenTheyCoverWhatDoctorWouldSample) {
  EXPECT_EQ(detail::window_refusal(good_window()).why, "");
  const auto refused = [](auto change) {
    auto f = good_window();
    change(f);
    return detail::window_refusal(f);
  };
  // Stale: named, as a stuck agent is news.
  const auto stale = refused([](auto& f) { f.newest_age_ms = 10'000; });
  EXPECT_EQ(stale.why, "the agent's last sample is 10s old");
  EXPECT_TRUE(stale.warn);
  EXPECT_EQ(refused([](auto& f) { f.newest_age_ms = 7900; }).why, "");  // within three intervals and 5 s (a late sample)
  EXPECT_TRUE(refused([](auto& f) { f.span_ms = -1; }).warn);
  EXPECT_TRUE(refused([](auto& f) { f.span_ms = 3'600'000; }).warn);
  // Too few samples, or too seldom: no condition could be sustained.
  EXPECT_FALSE(refused([](auto& f) { f.samples = 1; }).why.empty());
  EXPECT_FALSE(refused([](auto& f) { f.interval_ms = 2000; }).why.empty());
  EXPECT_FALSE(refused([](auto& f) { f.interval_ms = 5000; f.samples = 1; f.span_ms = 0; f.newest_age_ms = 0; }).why.empty());
  // Not watched for the whole window yet; one interval short is the window sampled at its ends.
  EXPECT_FALSE(refused([](auto& f) { f.span_ms = 1000; f.samples = 2; }).why.empty());
  EXPECT_EQ(refused([](auto& f) { f.span_ms = 2000; f.samples = 3; }).why, "");
  // A stall inside the window: two samples 25 s apart do not stand for a 10 s window.
  EXPECT_FALSE(refused([](auto& f) { f.window_ms = 10'000; f.samples = 2; f.span_ms = 25'000; f.max_gap_ms = 25'000; }).why.empty());
  EXPECT_EQ(refused([](auto& f) { f.max_gap_ms = 3000; }).why, "");  // late by an interval: max(2 s, 1.5 s) + 1 s
  EXPECT_FALSE(refused([](auto& f) { f.max_gap_ms = 3001; }).why.empty());
  // --interval: the agent's spacing (thinned answers included) must be as fine.
  EXPECT_EQ(refused([](auto& f) { f.asked_interval_ms = 1000; }).why, "");
  EXPECT_FALSE(refused([](auto& f) { f.asked_interval_ms = 500; }).why.empty());
  EXPECT_FALSE(refused([](auto& f) { f.asked_interval_ms = 1000; f.samples = 2; }).why.empty());  // 3 s apart
  // --window 0: the latest sample alone.
  EXPECT_EQ(refused([](auto& f) { f.window_ms = 0; f.samples = 1; f.span_ms = 0; }).why, "");
  // --pid: every process of the job older than the window and the process interval (and a second).
  const long long listed_since_s = (good_window().newest_unix_ms - 3000 - 5000) / 1000;
  EXPECT_EQ(refused([&](auto& f) { f.job_starts_unix_s = {listed_since_s - 600, listed_since_s - 2}; }).why, "");
  EXPECT_FALSE(refused([&](auto& f) { f.job_starts_unix_s = {listed_since_s - 600, listed_since_s - 1}; }).why.empty());
  EXPECT_FALSE(refused([&](auto& f) { f.job_starts_unix_s = {listed_since_s + 4}; }).why.empty());
}

diagnose::Finding starved_finding() {
  diagnose::Finding f;
  f.code = "input-starved";
  f.severity = diagnose::Severity::Warning;
  f.summary = "GPU 1 waits for data";
  f.gpus = {1};
  f.evidence = {{1, {{"util_gpu_pct", 12.4}, {"mem_used_bytes", 30LL << 30}, {"mem_total_bytes", 40LL << 30},
                     {"processes", 1LL}, {"temp_c", 61LL}}}};
  f.facts = {"dataloader workers: 0"};
  f.causes = {"too few dataloader workers"};
  f.fixes = {"DataLoader(num_workers=8)", "pin_memory=True"};
  return f;
}

diagnose::GpuSummary gpu_summary(unsigned index, double util, unsigned temp) {
  diagnose::GpuSummary g;
  g.index = index;
  g.util_median_pct = util;
  g.temp_max_c = temp;
  return g;
}

TEST(EvidenceText, UnitsFromTheKey) {
  EXPECT_EQ(detail::evidence_text("mem_used_bytes", 1LL << 30), "mem_used " + util::format_bytes(1ULL << 30));
  EXPECT_EQ(detail::evidence_text("held_age_s", 3600LL), "held_age " + util::format_age(3600));
  EXPECT_EQ(detail::evidence_text("temp_c", 83LL), "temp 83 C");
  EXPECT_EQ(detail::evidence_text("clock_sm_mhz", 1410LL), "clock_sm 1410 MHz");
  EXPECT_EQ(detail::evidence_text("util_gpu_pct", 98LL), "util_gpu 98 %");
  EXPECT_EQ(detail::evidence_text("util_gpu_pct", 97.6), "util_gpu 98 %");
  EXPECT_EQ(detail::evidence_text("ratio", 1.25), "ratio 1.2");
  EXPECT_EQ(detail::evidence_text("xid", 79LL), "xid 79");
  EXPECT_EQ(detail::evidence_text("lost", true), "lost yes");
  EXPECT_EQ(detail::evidence_text("nccl_p2p_disable", std::string("1")), "nccl_p2p_disable 1");
}

TEST(EvidenceLine, CommonValuesFirstMemoryTogether) {
  const auto f = starved_finding();
  EXPECT_EQ(detail::evidence_line(f.evidence[0]),
            "GPU 1: util_gpu 12 %, memory " + util::format_bytes(30ULL << 30) + " of " + util::format_bytes(40ULL << 30) +
                ", processes 1, temp 61 C");
  diagnose::GpuEvidence used_only{2, {{"mem_used_bytes", 5LL}}};  // no total: shown on its own
  EXPECT_EQ(detail::evidence_line(used_only), "GPU 2: mem_used " + util::format_bytes(5));
  EXPECT_EQ(detail::evidence_line(diagnose::GpuEvidence{3, {}}), "GPU 3: ");
}

TEST(DoctorText, NothingFound) {
  DoctorReport r;
  r.gpus = {gpu_summary(0, 95, 70), gpu_summary(1, 97.4, 72)};
  r.driver_version = "550.54.15";
  r.samples = 7;
  r.window_ms = 3000;
  EXPECT_EQ(detail::doctor_text(r, "node7", false),
            "tarmac doctor  node7  2 GPUs  driver 550.54.15  sampled 3s (7 samples)\n"
            "\n"
            "healthy: GPUs 0-1 (utilization 95-97 %, up to 72 C)\n"
            "0 critical, 0 warnings, 0 info: exit 0\n");
}

TEST(DoctorText, FindingsBySeverityWithTheirEvidence) {
  DoctorReport r;
  r.gpus = {gpu_summary(0, 95, 70), gpu_summary(1, 12, 61)};
  r.findings = {starved_finding()};
  r.samples = 1;
  r.exit_code = kExitProblems;
  r.job = diagnose::JobScope{4242, {4242, 4243}};
  r.job_gpus = {0, 1};
  const std::string text = detail::doctor_text(r, "node7", false);
  EXPECT_NE(text.find("tarmac doctor  node7  2 GPUs  driver -  one snapshot\n"), std::string::npos) << text;
  EXPECT_NE(text.find("job: PID 4242 and 1 descendant, on GPUs 0-1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nWARNING\n  input-starved  GPU 1 waits for data\n    evidence  GPU 1: util_gpu 12 %"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("              dataloader workers: 0\n    causes    too few dataloader workers\n"
                      "    fix       DataLoader(num_workers=8)\n              pin_memory=True\n"),
            std::string::npos)
      << text;
  // GPU 1 is flagged by a warning: only GPU 0 counts as healthy.
  EXPECT_NE(text.find("healthy: GPU 0 (utilization 95 %, up to 70 C)\n0 critical, 1 warning, 0 info: exit 1\n"),
            std::string::npos)
      << text;
}

TEST(DoctorText, CouldNotLook) {
  DoctorReport r;
  r.exit_code = kExitCouldNotLook;
  r.findings = {diagnose::no_gpus_visible("NVML not found", {})};
  const std::string text = detail::doctor_text(r, "node7", false);
  EXPECT_TRUE(text.starts_with("tarmac doctor  node7  could not look at the GPUs\n")) << text;
  EXPECT_TRUE(text.ends_with(": exit 3\n")) << text;
  EXPECT_EQ(text.find("healthy"), std::string::npos) << text;
}

// Summaries, facts and causes quote the machine: process names, environment variables.
TEST(DoctorText, HostileTextInFindingsIsShownEscaped) {
  DoctorReport r;
  auto f = starved_finding();
  f.summary = "GPU 1 \x1b]0;owned\x07";
  f.facts = {"NCCL_SOCKET_IFNAME=\x1b[2J"};
  f.evidence[0].values["command"] = std::string("python \x1b[31mevil");
  r.findings = {f};
  const std::string text = detail::doctor_text(r, "node7", false);
  EXPECT_FALSE(testing::has_raw_control(text)) << text;
  EXPECT_NE(text.find("GPU 1 \\x1b]0;owned\\x07"), std::string::npos) << text;
  EXPECT_NE(text.find("command python \\x1b[31mevil"), std::string::npos) << text;
}

TEST(DoctorText, AJobWithoutDescendantsOrGpus) {
  DoctorReport r;
  r.job = diagnose::JobScope{10, {10}};
  EXPECT_NE(detail::doctor_text(r, "h", false).find("job: PID 10 and 0 descendants, on no GPU\n"), std::string::npos);
  r.job->pids.clear();  // not what doctor builds, but never a wrapped count
  EXPECT_NE(detail::doctor_text(r, "h", false).find("job: PID 10 and 0 descendants"), std::string::npos);
}

TEST(DoctorJson, SchemaCountsAndNulls) {
  DoctorReport r;
  r.findings = {starved_finding()};
  r.gpus = {gpu_summary(1, 12, 61)};
  r.environment.nccl = {{"NCCL_DEBUG", "INFO"}};
  r.exit_code = 1;
  const auto j = detail::doctor_json(r);
  EXPECT_EQ(j["schema"], 1);
  EXPECT_EQ(j["summary"], (nlohmann::json{{"critical", 0}, {"warning", 1}, {"info", 0}}));
  EXPECT_TRUE(j["job"].is_null());
  EXPECT_TRUE(j["driver_version"].is_null());
  EXPECT_TRUE(j["expect_gpus"].is_null());
  EXPECT_EQ(j["environment"]["nccl"]["NCCL_DEBUG"], "INFO");
  EXPECT_TRUE(j["environment"]["cuda_visible_devices"].is_null());
  ASSERT_EQ(j["findings"].size(), 1U);
  EXPECT_EQ(j["findings"][0]["evidence"][0]["gpu"], 1);
  EXPECT_EQ(j["findings"][0]["evidence"][0]["temp_c"], 61);
  EXPECT_EQ(j["findings"][0]["evidence"][0]["util_gpu_pct"], 12.4);
  EXPECT_TRUE(j["gpus"][0]["name"].is_null());
  EXPECT_EQ(j["gpus"][0]["util_gpu_median_pct"], 12.0);
}

TEST(DoctorCommand, BadFlagsAreUsageErrors) {
  testing::ConfigFixture config;
  for (const std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--window", "a while"}, {"--interval", "10ms"}, {"--interval", "x"}, {"--expect-gpus", "0"},
           {"--expect-gpus", "2000"}, {"--pid", "0"}, {"--pid", "-5"}}) {
    std::vector<std::string> line = {"doctor"};
    line.insert(line.end(), args.begin(), args.end());
    EXPECT_EQ(testing::run_command_line(add_doctor_command, config.global, line), kExitUsage) << args[0] << " " << args[1];
  }
}

}  // namespace
}  // namespace tarmac::cli
