#include "tarmac/fleet/fleet_report.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace tarmac::fleet {
namespace {

constexpr long long kSince = 1764547200000;  // 2025-12-01 00:00 UTC
constexpr long long kUntil = kSince + 2 * 3600 * 1000;

std::string answer(const char* type, const std::string& results) {
  return fmt::format(R"({{"status":"success","data":{{"resultType":"{}","result":[{}]}}}})", type, results);
}

std::string point(const std::string& labels, const std::string& value) {
  return R"({"metric":{)" + labels + R"(},"value":[1764554400,")" + value + R"("]})";
}

std::string gpu_labels(const char* host, int gpu, const char* uuid, const std::string& more = "") {
  return fmt::format(R"("instance":"{0}:9478","hostname":"{0}","gpu":"{1}","uuid":"{2}"{3})", host, gpu, uuid, more);
}

// Two hours of two hosts: a's GPU 0 busy, GPU 1 held by Slurm job 77 and idle (reserved) for 1.5 h;
// b's GPU 0 held by bob's process at 0 % for 2 h, and held for pod ml/nb.
struct Answers {
  std::vector<std::string> instant = std::vector<std::string>(report_queries(7200).size(), answer("vector", ""));
  std::vector<std::string> heat{answer("matrix", "")};
};

Answers two_hosts() {
  Answers a;
  const auto cls = [](const char* host, int gpu, const char* uuid, const char* c, const char* seconds) {
    return point(gpu_labels(host, gpu, uuid, fmt::format(R"(,"class":"{}")", c)), seconds);
  };
  a.instant[0] = answer("vector", cls("a", 0, "GPU-a0", "busy", "7200") + "," + cls("a", 1, "GPU-a1", "reserved-idle", "5400") +
                                      "," + cls("a", 1, "GPU-a1", "busy", "1800") + "," +
                                      cls("b", 0, "GPU-b0", "holding", "7200") + "," +
                                      cls("b", 1, "", "busy", "7200") + "," +        // no UUID: not a GPU
                                      cls("b", 2, "GPU-b2", "flying", "7200") + "," +  // no such class
                                      cls("b", 2, "GPU-b2", "idle", "9e99") + "," +    // more than the range
                                      cls("b", 2, "GPU-b2", "busy", "NaN") + "," +
                                      cls("b", 2, "GPU-b2", "starved", "+Inf") + "," +
                                      cls("b", 3, "GPU-b3", "busy", "-5"));          // not seconds
  a.instant[1] = answer("vector", point(R"("instance":"a:9478","uuid":"GPU-a0","modelName":"NVIDIA H200")", "96") + "," +
                                      point(R"("instance":"a:9478","uuid":"GPU-a1","modelName":"NVIDIA H200")", "20") +
                                      "," + point(R"("instance":"b:9478","uuid":"GPU-b0","modelName":"NVIDIA A100")", "500"));
  a.instant[2] = answer("vector", point(R"("instance":"b:9478","uuid":"GPU-b0")", "20480"));
  // Idle since before the range: only the range's two hours count.
  a.instant[3] = answer("vector", point(gpu_labels("a", 1, "GPU-a1"), "5400") + "," +
                                      point(gpu_labels("a", 9, "GPU-a9"), "NaN"));
  a.instant[4] = answer("vector", point(gpu_labels("a", 1, "GPU-a1", R"(,"slurm_job":"77","class":"reserved-idle")"), "5400") +
                                      "," +
                                      point(gpu_labels("a", 1, "GPU-a1", R"(,"slurm_job":"77","class":"busy")"), "1800"));
  a.instant[5] = answer("vector",
                        point(gpu_labels("b", 0, "GPU-b0", R"(,"namespace":"ml","pod":"nb","class":"holding")"), "7200"));
  a.instant[6] = answer("vector", point(R"("user":"bob","class":"holding")", "7200") + "," +
                                      point(R"("user":"alice","class":"busy")", "9000"));
  a.instant[7] = answer("vector", point(R"("outcome":"ended")", "2") + "," + point(R"("outcome":"survived")", "1"));
  a.instant[8] = answer("vector", point(R"("state":"done")", "40") + "," + point(R"("state":"failed")", "2"));
  a.instant[9] = answer("vector", point(R"("kind":"prompt")", "1000") + "," + point(R"("kind":"completion")", "500"));
  // Hours ending 01:00 and 02:00 (in range) and 05:00 (after it: not shown).
  // The second week's answer is empty: a range's weeks are asked apart. A point out of the range of
  // times or of percentages is dropped.
  a.heat = {answer("matrix", R"({"metric":{},"values":[[1764550800,"40"],[1764554400,"60"],[1764565200,"99"],)"
                             R"([1e300,"50"],[-7200,"50"],[1764550800,"170"]]})"),
            answer("matrix", "")};
  return a;
}

TEST(FleetReport, AccountsPerGpuHostJobPodUser) {
  const Answers a = two_hosts();
  auto r = fleet_report_from_prometheus(a.instant, a.heat, kSince, kUntil, 2.0);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->gpus.size(), 3U);  // the unnamed, unknown-class and negative rows are dropped
  // Held idle most first: b's holding GPU, a's reserved GPU, a's busy GPU.
  EXPECT_EQ(r->gpus[0].host, "b");
  EXPECT_DOUBLE_EQ(r->gpus[0].hours.of(gpu::Activity::Holding), 2.0);
  EXPECT_EQ(r->gpus[0].model, "NVIDIA A100");
  EXPECT_EQ(r->gpus[0].mem_used_avg_mib, 20480);
  EXPECT_FALSE(r->gpus[0].util_avg_pct.has_value());  // 500 % is no utilization
  EXPECT_EQ(r->gpus[1].uuid, "GPU-a1");
  EXPECT_DOUBLE_EQ(r->gpus[1].hours.idle(), 1.5);
  EXPECT_DOUBLE_EQ(r->gpus[1].hours.unrecorded, 0);
  ASSERT_TRUE(r->gpus[1].idle_cost.has_value());
  ASSERT_TRUE(r->gpus[2].util_avg_pct.has_value());
  EXPECT_DOUBLE_EQ(*r->gpus[1].idle_cost, 3.0);
  EXPECT_EQ(r->gpus[2].util_avg_pct, 96);

  ASSERT_EQ(r->hosts.size(), 2U);
  EXPECT_EQ(r->hosts[0].name, "b");  // 2 h held idle against a's 1.5 h
  EXPECT_EQ(r->hosts[1].gpus, 2U);
  EXPECT_DOUBLE_EQ(r->hosts[1].hours.of(gpu::Activity::Busy), 2.5);
  ASSERT_TRUE(r->hosts[1].util_avg_pct.has_value());
  EXPECT_DOUBLE_EQ(*r->hosts[1].util_avg_pct, 58);
  EXPECT_DOUBLE_EQ(r->fleet.recorded(), 6.0);
  ASSERT_TRUE(r->idle_cost.has_value() && r->holding_cost.has_value());
  EXPECT_DOUBLE_EQ(*r->idle_cost, 3.0);
  EXPECT_DOUBLE_EQ(*r->holding_cost, 4.0);

  ASSERT_EQ(r->jobs.size(), 2U);
  EXPECT_EQ(r->jobs[0].name, "pod/ml/nb");
  EXPECT_EQ(r->jobs[0].host, "b");
  ASSERT_TRUE(r->jobs[0].idle_cost.has_value());
  EXPECT_DOUBLE_EQ(*r->jobs[0].idle_cost, 4.0);  // a pod's held idle counts its holding
  EXPECT_EQ(r->jobs[1].name, "77");
  EXPECT_EQ(r->jobs[1].gpus, 1U);
  EXPECT_DOUBLE_EQ(r->jobs[1].held_idle(), 1.5);

  ASSERT_EQ(r->users.size(), 2U);
  EXPECT_EQ(r->users[0].name, "alice");
  EXPECT_DOUBLE_EQ(r->users[1].held_idle(), 2.0);

  ASSERT_EQ(r->idle_stretches.size(), 1U);
  EXPECT_EQ(r->idle_stretches[0].gpu, 1U);
  EXPECT_EQ(r->idle_stretches[0].seconds, 5400);  // under the range: as measured
  EXPECT_EQ(r->reaped.at("ended"), 2);
  EXPECT_EQ(r->backfill_tokens.at("completion"), 500);

  ASSERT_EQ(r->heat.size(), 1U);
  EXPECT_EQ(r->heat[0].day_start_ms, kSince);
  EXPECT_EQ(r->heat[0].util_pct[0], 40);
  EXPECT_EQ(r->heat[0].util_pct[1], 60);
  EXPECT_FALSE(r->heat[0].util_pct[4].has_value());
}

TEST(FleetReport, RendersEachView) {
  const Answers a = two_hosts();
  auto r = fleet_report_from_prometheus(a.instant, a.heat, kSince, kUntil, 2.0);
  ASSERT_TRUE(r.ok());
  r->source = "Prometheus http://p:9090";
  const std::string text = render_report_text(*r, ReportBy::Report, false);
  EXPECT_NE(text.find("3 GPUs on 2 hosts"), std::string::npos) << text;
  EXPECT_NE(text.find("Cost of idle GPUs: $3.00; of GPUs held doing nothing: $4.00"), std::string::npos) << text;
  EXPECT_NE(text.find("pod/ml/nb"), std::string::npos);
  EXPECT_NE(text.find("3 reaper actions (2 ended, 1 survived)"), std::string::npos) << text;
  EXPECT_NE(text.find("42 backfill requests (2 failed), 1500 tokens"), std::string::npos) << text;
  const std::string by_user = render_report_text(*r, ReportBy::User, false);
  EXPECT_NE(by_user.find("alice"), std::string::npos);
  EXPECT_EQ(by_user.find("pod/ml/nb"), std::string::npos);
  const std::string json = render_report_json(*r, ReportBy::Host);
  EXPECT_NE(json.find(R"("hosts")"), std::string::npos);
  EXPECT_NE(json.find(R"("kind": "fleet-report")"), std::string::npos);
  EXPECT_NE(json.find(R"("gpu_count": 2)"), std::string::npos) << json;
  EXPECT_EQ(json.find(R"("gpus": [)"), std::string::npos);
  EXPECT_NE(render_report_json(*r, ReportBy::Report).find(R"("heatmap")"), std::string::npos);
}

TEST(FleetReport, NoRecordedSeriesSaysWhatIsMissing) {
  const Answers a;
  auto r = fleet_report_from_prometheus(a.instant, a.heat, kSince, kUntil, std::nullopt);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(render_report_text(*r, ReportBy::Report, false).find("tarmac alerts --prometheus-rules"), std::string::npos);
}

TEST(FleetReport, HostileAnswersAreRefused) {
  Answers a = two_hosts();
  a.instant[3] = answer("matrix", "");  // not an instant vector
  EXPECT_FALSE(fleet_report_from_prometheus(a.instant, a.heat, kSince, kUntil, std::nullopt).ok());
  a = two_hosts();
  a.heat = {answer("vector", "")};
  EXPECT_FALSE(fleet_report_from_prometheus(a.instant, a.heat, kSince, kUntil, std::nullopt).ok());
  a = two_hosts();
  // An object nested 100 deep is refused before it is parsed (at 9).
  std::string deep = R"({"status":"success","data":{"resultType":"vector","result":[)";
  for (int i = 0; i < 100; ++i) deep += R"({"a":)";
  deep += "1" + std::string(100, '}') + "]}}";
  a.instant[0] = deep;
  EXPECT_FALSE(fleet_report_from_prometheus(a.instant, a.heat, kSince, kUntil, std::nullopt).ok());
  a = two_hosts();
  a.instant[0] = R"({"status":"error","error":"bad \u001b[2J query"})";
  auto r = fleet_report_from_prometheus(a.instant, a.heat, kSince, kUntil, std::nullopt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.find('\x1b'), std::string::npos);
  a = two_hosts();
  a.instant.pop_back();
  EXPECT_FALSE(fleet_report_from_prometheus(a.instant, a.heat, kSince, kUntil, std::nullopt).ok());
}

TEST(FleetReport, NamesFromPrometheusAreEscapedOnTheTerminal) {
  Answers a = two_hosts();
  a.instant[6] = answer("vector", point(R"("user":"ev\u001b[2Jil","class":"busy")", "60"));
  auto r = fleet_report_from_prometheus(a.instant, a.heat, kSince, kUntil, std::nullopt);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string text = render_report_text(*r, ReportBy::User, false);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_NE(text.find("ev"), std::string::npos);
}

TEST(FleetReport, AJobOnSeveralHostsIsOneAccount) {
  Answers a = two_hosts();
  a.instant[4] = answer("vector", point(gpu_labels("a", 0, "GPU-a0", R"(,"slurm_job":"9","class":"busy")"), "3600") +
                                      "," +
                                      point(gpu_labels("b", 0, "GPU-b0", R"(,"slurm_job":"9","class":"busy")"), "3600"));
  auto r = fleet_report_from_prometheus(a.instant, a.heat, kSince, kUntil, std::nullopt);
  ASSERT_TRUE(r.ok());
  const auto job = std::find_if(r->jobs.begin(), r->jobs.end(), [](const Account& j) { return j.name == "9"; });
  ASSERT_NE(job, r->jobs.end());
  EXPECT_EQ(job->gpus, 2U);
  EXPECT_EQ(job->host, "a +1");
  EXPECT_DOUBLE_EQ(job->hours.of(gpu::Activity::Busy), 2.0);
}

TEST(FleetReport, RecordingRulesNameWhatTheQueriesRead) {
  const std::string rules = recording_rules_group(300'000);
  EXPECT_NE(rules.find("  - name: tarmac-recording\n    interval: 5m\n"), std::string::npos) << rules;
  EXPECT_NE(rules.find("increase(tarmac_gpu_activity_seconds_total[5m])"), std::string::npos);
  EXPECT_NE(rules.find("topk by (instance, gpu) (1, tarmac_gpu_activity == 1) * 300"), std::string::npos);
  // A counter series is new when it has no point in the day before, not when one scrape failed.
  EXPECT_NE(rules.find("(tarmac_reaped_processes_total unless last_over_time(tarmac_reaped_processes_total[1d] "
                       "offset 5m))"),
            std::string::npos);
  // Every series a query reads is recorded by a rule.
  for (const auto& q : report_queries(3600)) {
    const auto start = q.find("tarmac:");
    ASSERT_NE(start, std::string::npos) << q;
    const std::string name = q.substr(start, q.find('[', start) - start);
    EXPECT_NE(rules.find("record: " + name + "\n"), std::string::npos) << name;
  }
  EXPECT_NE(heat_query(3600).find("tarmac:gpu_util_percent:avg[1h]"), std::string::npos);
  // Over a day: the hourly series, each recorded by the hourly group from the first's.
  EXPECT_NE(rules.find("  - name: tarmac-recording-1h\n    interval: 1h\n"), std::string::npos);
  for (const auto& q : report_queries(2 * 86400)) {
    const auto start = q.find("tarmac:");
    const std::string name = q.substr(start, q.find('[', start) - start);
    ASSERT_TRUE(name.ends_with("1h")) << q;
    EXPECT_NE(rules.find("record: " + name + "\n"), std::string::npos) << name;
    EXPECT_NE(rules.find("_over_time(" + name.substr(0, name.size() - 2) + "[1h] offset 5m)'"), std::string::npos)
        << name;
  }
  EXPECT_NE(heat_query(2 * 86400).find("tarmac:gpu_util_percent:avg1h[1h]"), std::string::npos);
}

}  // namespace
}  // namespace tarmac::fleet
