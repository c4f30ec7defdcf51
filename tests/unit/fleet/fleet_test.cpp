#include "tarmac/fleet/fleet.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "tarmac/fleet/sources.hpp"

namespace tarmac::fleet {
namespace {

std::string vector_of(const std::string& results) {
  return R"({"status":"success","data":{"resultType":"vector","result":[)" + results + "]}}";
}

std::string sample(const std::string& labels, const std::string& value) {
  return R"({"metric":{)" + labels + R"(},"value":[1764800000.5,")" + value + R"("]})";
}

// Two hosts: a's GPU 0 busy, GPU 1 reserved-idle for a pod for an hour; b's GPU 0 holding (bob),
// GPU 1 idle for a day; and a target down.
PromAnswers answers() {
  const auto act = [](const char* host, int gpu, const char* uuid, const char* cls) {
    return sample(fmt::format(R"("__name__":"tarmac_gpu_activity","gpu":"{}","uuid":"{}","hostname":"{}","class":"{}")",
                              gpu, uuid, host, cls),
                  "1");
  };
  const auto dcgm = [](const char* name, const char* uuid, const char* value, const std::string& extra = "") {
    return sample(fmt::format(R"("__name__":"{}","UUID":"{}","modelName":"NVIDIA A100"{})", name, uuid, extra), value);
  };
  PromAnswers a(std::size(PromQueries::kAll));
  a[0] = vector_of(act("a", 0, "GPU-a0", "busy") + "," + act("a", 1, "GPU-a1", "reserved-idle") + "," +
                   act("b", 0, "GPU-b0", "holding") + "," + act("b", 1, "GPU-b1", "idle"));
  a[1] = vector_of(dcgm("DCGM_FI_DEV_GPU_UTIL", "GPU-a0", "97") + "," +
                   dcgm("DCGM_FI_DEV_GPU_UTIL", "GPU-a1", "0", R"(,"pod":"nb","namespace":"ml")") + "," +
                   dcgm("DCGM_FI_DEV_GPU_UTIL", "GPU-b0", "0") + "," + dcgm("DCGM_FI_DEV_GPU_UTIL", "GPU-b1", "0") +
                   "," + dcgm("DCGM_FI_DEV_GPU_UTIL", "GPU-zz", "50"));  // dcgm-exporter alone: no tarmac row
  a[2] = vector_of(dcgm("DCGM_FI_DEV_FB_USED", "GPU-b0", "20480"));
  a[3] = vector_of(dcgm("DCGM_FI_DEV_FB_FREE", "GPU-b0", "20480"));
  a[4] = vector_of(sample(R"("uuid":"GPU-a1")", "3600") + "," + sample(R"("uuid":"GPU-b1")", "86400") + "," +
                   sample(R"("uuid":"GPU-a0")", "0"));
  a[5] = vector_of(sample(R"("uuid":"GPU-a0","slurm_job":"77")", "1"));
  a[6] = vector_of(sample(R"("uuid":"GPU-a1","pod":"nb","namespace":"ml","container":"jupyter")", "1"));
  a[7] = vector_of(sample(R"("uuid":"GPU-b0","user":"bob")", "1"));
  a[8] = vector_of(sample(R"("__name__":"up","instance":"c:9478","job":"tarmac")", "0"));
  return a;
}

TEST(Fleet, PrometheusAnswersJoinByUuidGroundedFirst) {
  auto f = fleet_from_prometheus(answers());
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ(f->rows.size(), 4U);
  // holding, reserved-idle, idle, busy: grounded first.
  EXPECT_EQ(f->rows[0].uuid, "GPU-b0");
  EXPECT_EQ(f->rows[1].uuid, "GPU-a1");
  EXPECT_EQ(f->rows[2].uuid, "GPU-b1");
  EXPECT_EQ(f->rows[3].uuid, "GPU-a0");
  EXPECT_EQ(f->rows[0].users, std::set<std::string>{"bob"});
  EXPECT_EQ(*f->rows[0].mem_used_mib, 20480);
  EXPECT_EQ(*f->rows[0].mem_total_mib, 40960);
  EXPECT_EQ(f->rows[1].pods, std::set<std::string>{"ml/nb"});
  EXPECT_EQ(*f->rows[1].idle_seconds, 3600);
  EXPECT_EQ(f->rows[3].jobs, std::set<std::string>{"77"});
  EXPECT_EQ(*f->rows[3].util_pct, 97);
  EXPECT_FALSE(f->rows[3].idle_seconds);  // 0: not idle
  EXPECT_EQ(f->rows[3].model, "NVIDIA A100");
  EXPECT_EQ(f->problems, std::vector<std::string>{"target c:9478 (job tarmac) is down in Prometheus"});

  const std::string text = render_text(*f);
  EXPECT_NE(text.find("4 GPUs on 2 hosts: 3 grounded (1 holding, 1 reserved-idle, 1 idle), 1 busy\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("1d"), std::string::npos) << text;
  EXPECT_NE(text.find("pod ml/nb"), std::string::npos) << text;
  EXPECT_NE(text.find("20.0/40 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("warning: target c:9478"), std::string::npos) << text;
  const std::string json = render_json(*f);
  EXPECT_NE(json.find(R"("activity": "holding")"), std::string::npos) << json;
}

TEST(Fleet, TwoAgentsClaimingOneUuidAreTwoGpus) {
  auto a = answers();
  a[0] = vector_of(sample(R"("instance":"a:9478","gpu":"0","uuid":"GPU-same","hostname":"a","class":"idle")", "1") + "," +
                   sample(R"("instance":"b:9478","gpu":"0","uuid":"GPU-same","hostname":"b","class":"busy")", "1"));
  a[1] = vector_of(sample(R"("instance":"b:9478","UUID":"GPU-same")", "90"));
  auto f = fleet_from_prometheus(a);
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ(f->rows.size(), 2U);
  EXPECT_EQ(f->rows[0].host, "a");
  EXPECT_FALSE(f->rows[0].util_pct);
  EXPECT_EQ(*f->rows[1].util_pct, 90);
}

TEST(Fleet, APrometheusErrorOrAnythingElseIsRefused) {
  auto a = answers();
  a[3] = R"({"status":"error","errorType":"bad_data","error":"parse error\u001b[31m"})";
  auto f = fleet_from_prometheus(a);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("parse error"), std::string::npos);
  EXPECT_EQ(f.error().message.find('\x1b'), std::string::npos) << "escaped for the terminal";
  a = answers();
  a[0] = std::string(100, '[') + std::string(100, ']');
  EXPECT_FALSE(fleet_from_prometheus(a).ok());
  a = answers();
  a[1] = R"({"status":"success","data":{"resultType":"matrix","result":[]}})";
  EXPECT_FALSE(fleet_from_prometheus(a).ok());
}

TEST(Fleet, HostileValuesAreDroppedNotBelieved) {
  auto a = answers();
  a[1] = vector_of(sample(R"("UUID":"GPU-a0")", "NaN") + "," + sample(R"("UUID":"GPU-b0")", "1e300") + "," +
                   sample(R"("UUID":"GPU-a1")", "-5") + "," + sample(R"("UUID":"GPU-b1")", "x"));
  a[0] = vector_of(a[0].substr(a[0].find("[{") + 1, a[0].rfind("}]") - a[0].find("[{")) + "," +
                   sample(R"("gpu":"99999","uuid":"GPU-big","class":"idle")", "1") + "," +
                   sample(R"("gpu":"1","uuid":"","class":"idle")", "1"));
  auto f = fleet_from_prometheus(a);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->rows.size(), 4U);
  for (const auto& r : f->rows) EXPECT_FALSE(r.util_pct) << r.uuid;
}

TEST(Fleet, AnAnswerOfTooManySeriesIsRefused) {
  auto a = answers();
  std::string many;
  for (int i = 0; i <= (1 << 20); ++i) many += i ? ",{}" : "{}";
  a[2] = vector_of(many);
  auto f = fleet_from_prometheus(a);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("more than 1048576 series"), std::string::npos) << f.error().message;
}

TEST(Fleet, AnAgentsAnswers) {
  const std::string gpus = R"({"hostname":"node-1","gpus":[
    {"index":0,"uuid":"GPU-0","name":"NVIDIA H100","activity":"idle","util_gpu_pct":0,"mem_used_mib":0,
     "mem_total_mib":81920,"idle_seconds":120.5,"slurm_jobs":[],"pods":[]},
    {"index":1,"uuid":"GPU-1","name":"NVIDIA H100","activity":"busy","util_gpu_pct":88,"mem_used_mib":40000,
     "mem_total_mib":81920,"idle_seconds":null,"slurm_jobs":["77"],"pods":[{"pod":"p","namespace":"n","container":"c"}]},
    {"index":1,"uuid":"GPU-dup"}, "junk"]})";
  const std::string procs =
      R"({"processes":[{"gpu":1,"user":"alice","pid":5},{"gpu":7,"user":"ghost"},{"gpu":1},)"
      R"({"gpu":4294967297,"user":"wraps-to-1"},{"gpu":-1,"user":"negative"}]})";
  auto rows = rows_from_agent(gpus, procs, "10.0.0.1:9478");
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 2U);
  EXPECT_EQ((*rows)[0].host, "node-1");
  EXPECT_EQ(*(*rows)[0].idle_seconds, 120.5);
  EXPECT_EQ((*rows)[1].users, std::set<std::string>{"alice"});
  EXPECT_EQ((*rows)[1].jobs, std::set<std::string>{"77"});
  EXPECT_EQ((*rows)[1].pods, std::set<std::string>{"n/p"});
  EXPECT_FALSE(rows_from_agent("{}", procs, "x").ok());
  EXPECT_FALSE(rows_from_agent("[]", procs, "x").ok());
}

TEST(Fleet, QueriesAreEncoded) {
  EXPECT_EQ(query_encode("tarmac_gpu_activity == 1"), "tarmac_gpu_activity%20%3D%3D%201");
  EXPECT_EQ(query_encode("count by (uuid, user) (x)"), "count%20by%20%28uuid%2C%20user%29%20%28x%29");
}

}  // namespace
}  // namespace tarmac::fleet
