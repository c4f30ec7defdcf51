#include "tarmac/tui/sources.hpp"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "tarmac/util/fd.hpp"

namespace tarmac::tui {
namespace {

constexpr const char* kGpus = R"({"hostname":"b","driver_version":"550.54","timestamp_ms":1700000000000,"gpus":[
 {"index":0,"uuid":"GPU-0","name":"NVIDIA H100","activity":"busy","util_gpu_pct":97,"util_mem_pct":40,
  "mem_used_mib":40960,"mem_total_mib":81920,"temp_c":70,"power_w":650.5,"power_limit_w":700,"clock_sm_mhz":1980,
  "processes":1,"backfill":[],"lost":null},
 {"index":1,"uuid":"GPU-1","name":"NVIDIA H100","activity":"fault","util_gpu_pct":null,"mem_used_mib":null,
  "mem_total_mib":81920,"temp_c":null,"power_w":null,"power_limit_w":null,"clock_sm_mhz":null,"lost":"GPU is lost"}],
 "alerts":[]})";
constexpr const char* kProcs = R"({"timestamp_ms":1700000000000,"processes":[
 {"gpu":0,"uuid":"GPU-0","pid":4242,"user":"alice","command":"/usr/bin/python3 train.py","container":"docker:0123456789ab",
  "job":"77","used_mib":40000,"sm_util_pct":97},
 {"gpu":7,"pid":1,"user":"x","command":"not on a listed GPU","used_mib":1,"sm_util_pct":1},
 {"gpu":0,"pid":4243,"user":"bob","command":"python x.py","used_mib":100,"sm_util_pct":null}]})";

TEST(AgentSource, AnAgentsAnswerBecomesASnapshot) {
  auto h = parse_agent(kGpus, kProcs);
  ASSERT_TRUE(h.ok()) << h.error().message;
  ASSERT_TRUE(h->snapshot);
  const auto& s = *h->snapshot;
  ASSERT_EQ(s.devices.size(), 2U);
  EXPECT_EQ(h->classes, (std::vector<gpu::Activity>{gpu::Activity::Busy, gpu::Activity::Fault}));
  EXPECT_EQ(s.devices[0].sample.util_gpu_pct, 97U);
  EXPECT_EQ(s.devices[0].sample.power_mw, 650500U);
  EXPECT_EQ(*s.devices[0].id.mem_total_bytes, 81920ULL << 20);
  EXPECT_EQ(s.devices[1].lost, "GPU is lost");
  ASSERT_EQ(s.devices[0].processes.size(), 2U);
  const auto& p = s.devices[0].processes[0];
  EXPECT_EQ(p.pid, 4242U);
  EXPECT_EQ(p.host.user, "alice");
  EXPECT_EQ(p.host.name, "python3");
  EXPECT_EQ(p.host.slurm_job_id, "77");
  EXPECT_EQ(p.sm_util_pct, 97U);
  EXPECT_FALSE(s.devices[0].processes[1].sm_util_pct);  // unknown stays unknown
}

TEST(AgentSource, MigDevicesAndTheirProcessesComeFromTheAgent) {
  auto h = parse_agent(
      R"({"gpus":[{"index":4,"activity":"busy","util_gpu_pct":null,"mig_mode_current":true,"mig":[
            {"index":0,"uuid":"MIG-a","profile":"3g.71gb","gpu_instance_id":2,"slices":3,"mem_used_mib":1024,
             "mem_total_mib":71168,"gpm_sm_active_pct":55.5,"activity":"busy","processes":1},
            {"index":1,"uuid":"MIG-b","profile":"1g.18gb","mem_used_mib":0,"activity":"idle"},
            "junk", {"index":-3,"activity":"nonsense","gpm_sm_active_pct":1e9}]}]})",
      R"({"processes":[{"gpu":4,"pid":9,"used_mib":1024,"mig":0},{"gpu":4,"pid":10,"mig":7}]})");
  ASSERT_TRUE(h.ok()) << h.error().message;
  const auto& d = h->snapshot->devices.at(0);
  EXPECT_EQ(d.modes.mig_mode_current, true);
  ASSERT_EQ(d.mig.size(), 3U);
  EXPECT_EQ(d.mig[0].uuid, "MIG-a");
  EXPECT_EQ(d.mig[0].profile, "3g.71gb");
  EXPECT_EQ(d.mig[0].mem_total_bytes, 71168ULL << 20);
  EXPECT_EQ(d.mig[0].gpm_sm_active_pct, 55.5);
  EXPECT_EQ(d.mig[2].gpm_sm_active_pct, 100.0) << "bounded";
  ASSERT_EQ(h->mig_classes.size(), 1U);
  ASSERT_EQ(h->mig_classes[0].size(), 3U);
  EXPECT_EQ(h->mig_classes[0][0].activity, gpu::Activity::Busy);
  EXPECT_TRUE(h->mig_classes[0][0].measured);
  EXPECT_FALSE(h->mig_classes[0][1].measured) << "no GPM: from processes";
  EXPECT_EQ(d.processes.at(0).mig, 0U);
  EXPECT_FALSE(d.processes.at(1).mig.has_value()) << "a MIG device the GPU does not have";
}

TEST(AgentSource, BackfillBatchesComeFromTheAgentWholeOrNotAtAll) {
  const std::string one = R"({"model":"m","server":"s","answered":1,"requests":2})";
  std::string batches = R"({"model":"qwen2.5-7b","server":"night","answered":120,"requests":200},)"
                        R"({"model":"m","server":"s","answered":-1,"requests":2},)"
                        R"({"model":7,"server":"s","answered":1,"requests":2},"junk",)"
                        R"({"model":")" + std::string(257, 'x') + R"(","server":"s","answered":1,"requests":2})";
  std::string many;
  for (int i = 0; i < 2500; ++i) many += one + ",";
  many.pop_back();
  // Junk and a second GPU 0 come first: each GPU's batches stay with that GPU.
  auto h = parse_agent(R"({"gpus":["junk",{"index":0,"activity":"idle"},{"index":0,"backfill":[)" + one +
                           R"(]},{"index":1,"activity":"busy","backfill":[)" + batches + "," + many +
                           R"(]},{"index":2,"backfill":[)" + many + "]}]}",
                       R"({"processes":[]})");
  ASSERT_TRUE(h.ok()) << h.error().message;
  ASSERT_EQ(h->snapshot->devices.size(), 3U);
  ASSERT_EQ(h->backfill.size(), 3U);
  EXPECT_TRUE(h->backfill[0].empty()) << "the second GPU 0's batch is not the first one's";
  ASSERT_EQ(h->backfill[1].size(), 2501U);
  EXPECT_EQ(h->backfill[1][0].model, "qwen2.5-7b");
  EXPECT_EQ(h->backfill[1][0].server, "night");
  EXPECT_EQ(h->backfill[1][0].answered, 120);
  EXPECT_EQ(h->backfill[1][0].requests, 200);
  EXPECT_EQ(h->backfill[1][1].model, "m") << "the malformed and oversized ones are left out";
  EXPECT_EQ(h->backfill[2].size(), 4096U - 2501U) << "at most 4096 in the whole answer";
}

TEST(AgentSource, HostileAnswersAreRefusedOrCut) {
  EXPECT_FALSE(parse_agent("[]", kProcs).ok());
  EXPECT_FALSE(parse_agent("{\"gpus\":5}", kProcs).ok());
  EXPECT_FALSE(parse_agent(kGpus, "{").ok());
  // Wrong types, negative and absurd numbers are dropped, not trusted.
  auto h = parse_agent(R"({"gpus":[{"index":-1},{"index":0,"util_gpu_pct":-5,"power_w":1e300,"name":7},{"index":0}]})",
                       R"({"processes":[{"gpu":0,"pid":"12"},{"gpu":0,"pid":5,"sm_util_pct":1000}]})");
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->snapshot->devices.size(), 1U);
  EXPECT_FALSE(h->snapshot->devices[0].sample.util_gpu_pct);
  EXPECT_FALSE(h->snapshot->devices[0].sample.power_mw);
  EXPECT_FALSE(h->snapshot->devices[0].id.name);
  ASSERT_EQ(h->snapshot->devices[0].processes.size(), 1U);
  EXPECT_FALSE(h->snapshot->devices[0].processes[0].sm_util_pct);
}

TEST(AgentSource, HistoryBecomesGraphPoints) {
  auto h = parse_agent_history(R"({"gpus":[{"gpu":0,"points":[{"ts_ms":1,"util_gpu_pct":10,"power_w":100,"temp_c":40},
    {"ts_ms":2,"util_gpu_pct":null,"power_w":110,"temp_c":41}]},{"gpu":"x"}]})");
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->size(), 1U);
  EXPECT_EQ(h->at(0).util_pct.points().size(), 1U);
  EXPECT_EQ(h->at(0).power_w.points().size(), 2U);
}

TEST(AgentSource, AddressesBecomeUrls) {
  EXPECT_EQ(agent_url("b:9478"), "http://b:9478");
  EXPECT_EQ(agent_url("https://b.example:9478/"), "https://b.example:9478");
}

TEST(Poller, ReadsOnItsThreadAndWakesTheLoop) {
  util::Fd wake(::eventfd(0, EFD_CLOEXEC));
  ASSERT_TRUE(wake);
  std::atomic<int> reads{0};
  Poller p(
      [&] {
        HostData h;
        h.received_ms = ++reads;
        return h;
      },
      std::chrono::milliseconds(10), wake.get());
  std::uint64_t n = 0;
  ASSERT_EQ(::read(wake.get(), &n, sizeof n), static_cast<ssize_t>(sizeof n));  // blocks until a read is done
  const auto got = p.take();
  ASSERT_TRUE(got);
  EXPECT_GE(got->received_ms, 1);
  EXPECT_TRUE(p.stop(std::chrono::milliseconds(5000)));
}

TEST(Poller, AReadThatHangsIsReportedAndDoesNotHoldTheStop) {
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto started = std::make_shared<std::atomic<bool>>(false);
  util::Fd wake(::eventfd(0, EFD_CLOEXEC));
  {
    Poller p(
        [release, started] {
          started->store(true);
          while (!release->load()) ::usleep(1000);
          return HostData{};
        },
        std::chrono::milliseconds(10), wake.get());
    while (!started->load()) ::usleep(1000);
    while (p.busy_for_ms() < 20) ::usleep(1000);
    EXPECT_FALSE(p.take());
    EXPECT_FALSE(p.stop(std::chrono::milliseconds(10)));  // left behind, not waited for
  }
  release->store(true);  // the detached thread ends on its own
}

}  // namespace
}  // namespace tarmac::tui
