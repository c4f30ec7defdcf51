#include "tarmac/serve/service.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tarmac/util/units.hpp"

namespace tarmac::serve {
namespace {

Request get(std::string path, std::map<std::string, std::string> query = {}) {
  return Request{"GET", std::move(path), std::move(query)};
}

class ServiceTest : public ::testing::Test {
 protected:
  ServiceTest() : service_(live_, options()) {}
  static ServiceOptions options() {
    ServiceOptions o;
    o.db_path = "/nonexistent/tarmac.db";
    o.hostname = "node1";
    o.alerts = [] { return std::vector<FiringAlert>{{"holding", "warning", 3u, "GPU 3 holds", 5}}; };
    // A batch on GPU-a's card, and one on a GPU this box does not have (shown nowhere).
    o.batches_on_gpus = [] {
      return std::vector<GpuBatch>{{"GPU-a", "tiny", "night", 120, 200}, {"GPU-gone", "tiny", "night", 0, 1}};
    };
    return o;
  }
  void publish() {
    gpu::Snapshot s;
    gpu::Device d;
    d.id.index = 0;
    d.id.uuid = "GPU-a";
    d.sample.util_gpu_pct = 50;
    d.sample.mem_used_bytes = 100 * util::kMiB;
    d.sample.power_mw = 1500;
    gpu::GpuProcess p;
    p.pid = 7;
    p.host.user = "alice";
    p.host.command_line = "python train.py";
    d.processes.push_back(p);
    s.devices.push_back(d);
    d.id.index = 1;
    d.id.uuid = "GPU-b";
    d.processes.clear();
    s.devices.push_back(d);
    live_.publish(s, {{0, gpu::Activity::Busy}}, 1'796'000'000'000, {});  // Dec 2026
  }
  LiveState live_;
  Service service_;
};

TEST_F(ServiceTest, BeforeTheFirstSampleTheLiveRoutesSay503) {
  EXPECT_EQ(service_.handle(get("/metrics")).status, 503);
  EXPECT_EQ(service_.handle(get("/healthz")).status, 503);
  EXPECT_EQ(service_.handle(get("/api/v1/gpus")).status, 503);
  EXPECT_EQ(service_.handle(get("/")).status, 200);  // the page itself is always there
}

TEST_F(ServiceTest, Routes) {
  publish();
  EXPECT_EQ(service_.handle(get("/healthz")).body, "ok\n");
  const auto m = service_.handle(get("/metrics"));
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m.body.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""), std::string::npos);
  EXPECT_NE(m.body.find("tarmac_alert_firing{alertname=\"holding\""), std::string::npos);

  const auto g = nlohmann::json::parse(service_.handle(get("/api/v1/gpus")).body);
  EXPECT_EQ(g["hostname"], "node1");
  EXPECT_EQ(g["gpus"][0]["util_gpu_pct"], 50);
  EXPECT_EQ(g["gpus"][0]["mem_used_mib"], 100);
  EXPECT_DOUBLE_EQ(g["gpus"][0]["power_w"].get<double>(), 1.5);
  EXPECT_EQ(g["gpus"][0]["activity"], "busy");
  EXPECT_TRUE(g["gpus"][0]["temp_c"].is_null());
  EXPECT_EQ(g["alerts"][0]["gpu"], 3);
  ASSERT_EQ(g["gpus"][0]["backfill"].size(), 1U) << g;
  EXPECT_EQ(g["gpus"][0]["backfill"][0],
            nlohmann::json::parse(R"({"model":"tiny","server":"night","answered":120,"requests":200})"));
  EXPECT_EQ(g["gpus"][1]["backfill"], nlohmann::json::array()) << "no batch runs on GPU 1";

  const auto p = nlohmann::json::parse(service_.handle(get("/api/v1/processes")).body);
  EXPECT_EQ(p["processes"][0]["pid"], 7);
  EXPECT_EQ(p["processes"][0]["user"], "alice");
  EXPECT_EQ(p["processes"][0]["command"], "python train.py");

  const auto page = service_.handle(get("/"));
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("<html"), std::string::npos);
  EXPECT_EQ(page.body, std::string(dashboard_html()));

  const auto missing = service_.handle(get("/nope"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find("/metrics"), std::string::npos);
}

TEST_F(ServiceTest, TheApiListsEachMigDeviceWithItsClassAndWhichProcessesRunThere) {
  gpu::Snapshot s;
  gpu::Device d;
  d.id.index = 4;
  d.id.uuid = "GPU-m";
  d.modes.mig_mode_current = true;
  for (unsigned k = 0; k < 2; ++k) {
    gpu::MigDevice m;
    m.index = k;
    m.uuid = "MIG-" + std::to_string(k);
    m.profile = "1g.18gb";
    m.gpu_instance_id = 9 + k;
    m.mem_total_bytes = 16384 * util::kMiB;
    m.mem_used_bytes = k == 1 ? 512 * util::kMiB : 0;
    d.mig.push_back(m);
  }
  gpu::GpuProcess p;
  p.pid = 8;
  p.mig = 1U;
  d.processes.push_back(p);
  s.devices.push_back(d);
  live_.publish(s, {{4, gpu::Activity::Busy}}, 1'796'000'000'000, {}, {}, {}, false,
                {{4, {{gpu::Activity::Idle, true}, {gpu::Activity::Busy, false}}}});
  const auto g = nlohmann::json::parse(service_.handle(get("/api/v1/gpus")).body);
  const auto& gpu = g["gpus"][0];
  EXPECT_EQ(gpu["mig_mode_current"], true);
  ASSERT_EQ(gpu["mig"].size(), 2U) << gpu;
  EXPECT_EQ(gpu["mig"][1]["uuid"], "MIG-1");
  EXPECT_EQ(gpu["mig"][1]["gpu_instance_id"], 10);
  EXPECT_EQ(gpu["mig"][1]["mem_used_mib"], 512);
  EXPECT_EQ(gpu["mig"][1]["activity"], "busy");
  EXPECT_EQ(gpu["mig"][1]["processes"], 1);
  EXPECT_EQ(gpu["mig"][0]["activity"], "idle");
  EXPECT_EQ(gpu["mig"][0]["processes"], 0);
  const auto procs = nlohmann::json::parse(service_.handle(get("/api/v1/processes")).body);
  EXPECT_EQ(procs["processes"][0]["mig"], 1);
}

TEST_F(ServiceTest, HistoryRefusesBadParametersBeforeTouchingTheStore) {
  publish();
  EXPECT_EQ(service_.handle(get("/api/v1/history", {{"since", "yesterday"}})).status, 400);
  EXPECT_EQ(service_.handle(get("/api/v1/history", {{"step", "0s"}})).status, 400);
  EXPECT_EQ(service_.handle(get("/api/v1/history", {{"gpu", "x"}})).status, 400);
  EXPECT_EQ(service_.handle(get("/api/v1/history", {{"bogus", "1"}})).status, 400);
  EXPECT_EQ(service_.handle(get("/api/v1/history", {{"since", "30d"}, {"step", "1s"}})).status, 400);
  EXPECT_EQ(service_.handle(get("/api/v1/history", {{"since", "1h"}, {"until", "2h"}})).status, 400);
  EXPECT_EQ(service_.handle(get("/api/v1/history", {{"since", "99999999999999999999999"}})).status, 400);
  EXPECT_EQ(service_.handle(get("/api/v1/history", {{"since", "9999999999999999h"}})).status, 400);
  // Good parameters, no store: 503 that names it.
  const auto r = service_.handle(get("/api/v1/history", {{"since", "1h"}}));
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("/nonexistent/tarmac.db"), std::string::npos) << r.body;
  EXPECT_EQ(service_.handle(get("/report")).status, 503);
}

}  // namespace
}  // namespace tarmac::serve
