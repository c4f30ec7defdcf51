#include "tarmac/serve/metrics.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>

#include "tarmac/util/units.hpp"

namespace tarmac::serve {
namespace {

gpu::Device a100(unsigned index, unsigned util) {
  gpu::Device d;
  d.id.index = index;
  d.id.uuid = "GPU-0000000" + std::to_string(index);
  d.id.name = "NVIDIA A100-SXM4-40GB";
  d.id.pci_bus_id = "00000000:07:00.0";
  d.id.minor_number = index;
  d.id.mem_total_bytes = 40960 * util::kMiB;
  d.sample.util_gpu_pct = util;
  d.sample.util_mem_pct = 41;
  d.sample.mem_used_bytes = 38900 * util::kMiB;
  d.sample.mem_free_bytes = 2060 * util::kMiB;
  d.sample.temp_c = 68;
  d.sample.power_mw = 250500;
  d.sample.energy_mj = 123456789;
  d.sample.clock_sm_mhz = 1410;
  d.sample.clock_mem_mhz = 1215;
  d.sample.clock_event_reasons = 0x40;
  return d;
}

LiveView view_of(std::vector<gpu::Device> devices, std::map<unsigned, gpu::Activity> classes) {
  LiveView v;
  v.ts_ms = 1'000'000;
  v.snapshot.driver_version = "535.129.03";
  v.snapshot.devices = std::move(devices);
  v.classes = std::move(classes);
  return v;
}

// Every sample line: name{labels} value.
std::vector<std::string> samples(const std::string& text, const std::string& name) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0) out.push_back(line);
  }
  return out;
}

TEST(Metrics, DcgmNamesLabelsAndUnits) {
  auto d = a100(0, 96);
  const auto text = render_metrics(view_of({d}, {{0, gpu::Activity::Busy}}), {.hostname = "node1"});
  const std::string labels =
      R"(gpu="0",UUID="GPU-00000000",pci_bus_id="00000000:07:00.0",device="nvidia0",)"
      R"(modelName="NVIDIA A100-SXM4-40GB",Hostname="node1",DCGM_FI_DRIVER_VERSION="535.129.03")";
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_UTIL{" + labels + "} 96\n"), std::string::npos) << text;
  EXPECT_NE(text.find("DCGM_FI_DEV_FB_USED{" + labels + "} 38900\n"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_FB_FREE{" + labels + "} 2060\n"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_POWER_USAGE{" + labels + "} 250.5\n"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" + labels + "} 123456789\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"), std::string::npos);
  const std::string own = R"(gpu="0",uuid="GPU-00000000",pci_bus_id="00000000:07:00.0",hostname="node1")";
  EXPECT_NE(text.find("tarmac_gpu_clock_events_thermal{" + own + "} 1\n"), std::string::npos) << text;
  // Not read: not invented. No GPM here, no XID watch.
  EXPECT_EQ(text.find("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), std::string::npos);
  EXPECT_EQ(text.find("DCGM_FI_DEV_XID_ERRORS"), std::string::npos);
  EXPECT_EQ(text.find("DCGM_FI_DEV_ENC_UTIL"), std::string::npos);
}

TEST(Metrics, GpmValuesAreRatiosAndXidIsTheLastOne) {
  auto d = a100(0, 96);
  d.slow = gpu::DeviceSlowSample{};
  d.slow->gpm_tensor_active_pct = 42.5;
  d.last_xid = 79;
  const auto text = render_metrics(view_of({d}, {}), {.hostname = "h"});
  ASSERT_EQ(samples(text, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE").size(), 1u);
  EXPECT_NE(samples(text, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")[0].find("} 0.425"), std::string::npos);
  EXPECT_NE(samples(text, "DCGM_FI_DEV_XID_ERRORS")[0].find("} 79"), std::string::npos);
}

TEST(Metrics, MigDevicesHaveTheirOwnMemoryAndGpmSeriesWithDcgmExportersLabels) {
  auto d = a100(3, 0);
  d.sample.util_gpu_pct.reset();  // MIG mode: no utilization
  d.modes.mig_mode_current = true;
  d.slow = gpu::DeviceSlowSample{};
  d.slow->gpm_sm_active_pct = 50;  // the board's: not exported beside its MIG devices' own
  gpu::MigDevice busy;
  busy.index = 0;
  busy.uuid = "MIG-aaaaaaaa-0000-5000-8000-000000000000";
  busy.profile = "3g.20gb";
  busy.gpu_instance_id = 2;
  busy.compute_instance_id = 0;
  busy.slices = 3;
  busy.mem_used_bytes = 12000 * util::kMiB;
  busy.mem_free_bytes = 7968 * util::kMiB;
  busy.gpm_sm_active_pct = 80;
  gpu::MigDevice empty = busy;
  empty.index = 1;
  empty.uuid = "MIG-bbbbbbbb-0000-5000-8000-000000000000";
  empty.profile = "1g.5gb";
  empty.gpu_instance_id = 13;
  empty.slices = 1;
  empty.mem_used_bytes = 0;
  empty.gpm_sm_active_pct.reset();
  d.mig = {busy, empty};
  auto v = view_of({d}, {{3, gpu::Activity::Busy}});
  v.mig_classes[3] = {{gpu::Activity::Busy, true}, {gpu::Activity::Idle, true}};
  const auto text = render_metrics(v, {.hostname = "node1"});
  const auto used = samples(text, "DCGM_FI_DEV_FB_USED");
  ASSERT_EQ(used.size(), 2u) << text;  // one per MIG device, none for the board
  EXPECT_NE(used[0].find(R"(GPU_I_PROFILE="3g.20gb",GPU_I_ID="2"} 12000)"), std::string::npos) << used[0];
  EXPECT_NE(used[1].find(R"(GPU_I_PROFILE="1g.5gb",GPU_I_ID="13"} 0)"), std::string::npos) << used[1];
  const auto sm = samples(text, "DCGM_FI_PROF_SM_ACTIVE");
  ASSERT_EQ(sm.size(), 1u) << text;  // the empty one has no GPM here: not invented
  EXPECT_NE(sm[0].find(R"(GPU_I_ID="2"} 0.8)"), std::string::npos) << sm[0];
  EXPECT_TRUE(samples(text, "DCGM_FI_DEV_GPU_UTIL").empty());
  // Board-level families keep the board's labels alone.
  ASSERT_EQ(samples(text, "DCGM_FI_DEV_POWER_USAGE").size(), 1u);
  EXPECT_EQ(samples(text, "DCGM_FI_DEV_POWER_USAGE")[0].find("GPU_I_"), std::string::npos);
  const auto activity = samples(text, "tarmac_mig_activity");
  ASSERT_EQ(activity.size(), 2 * gpu::kActivities.size());
  int ones = 0;
  for (const auto& line : activity) {
    if (line.ends_with(" 1")) {
      ++ones;
      EXPECT_TRUE(line.find(R"(GPU_I_ID="2")") != std::string::npos ? line.find(R"(class="busy")") != std::string::npos
                                                                      : line.find(R"(class="idle")") != std::string::npos)
          << line;
    }
  }
  EXPECT_EQ(ones, 2);
  EXPECT_NE(text.find(R"(source="gpm",class="busy"} 1)"), std::string::npos) << text;
  const auto slices = samples(text, "tarmac_mig_slices");
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_TRUE(slices[0].ends_with(" 3"));
  EXPECT_TRUE(slices[1].ends_with(" 1"));
  // MIG devices whose instance ids could not be read have no series: two would be one series twice.
  v.snapshot.devices[0].mig[0].gpu_instance_id.reset();
  v.snapshot.devices[0].mig[1].gpu_instance_id.reset();
  const auto unnamed = render_metrics(v, {.hostname = "node1"});
  EXPECT_TRUE(samples(unnamed, "DCGM_FI_DEV_FB_USED").empty()) << unnamed;
  EXPECT_TRUE(samples(unnamed, "tarmac_mig_activity").empty());
}

TEST(Metrics, ActivityIsOneClassAndCountsSeconds) {
  auto v = view_of({a100(0, 0), a100(1, 96)}, {{0, gpu::Activity::Idle}, {1, gpu::Activity::Busy}});
  v.counters[0].class_seconds[activity_slot(gpu::Activity::Idle)] = 90;
  v.counters[0].idle_since_ms = v.ts_ms - 45'000;
  const auto text = render_metrics(v, {.hostname = "h"});
  const auto activity = samples(text, "tarmac_gpu_activity");
  ASSERT_EQ(activity.size(), 12u);  // six classes for each of two GPUs
  int ones = 0;
  for (const auto& line : activity) ones += line.back() == '1';
  EXPECT_EQ(ones, 2);
  EXPECT_NE(text.find(R"(gpu="0",)"), std::string::npos);
  bool idle_one = false;
  for (const auto& line : activity) {
    if (line.find(R"(gpu="0")") != std::string::npos && line.find(R"(class="idle")") != std::string::npos) {
      idle_one = line.back() == '1';
    }
  }
  EXPECT_TRUE(idle_one);
  const auto idle_s = samples(text, "tarmac_gpu_idle_seconds");
  ASSERT_EQ(idle_s.size(), 2u);
  EXPECT_NE(idle_s[0].find("} 45"), std::string::npos) << idle_s[0];
  EXPECT_NE(idle_s[1].find("} 0"), std::string::npos) << idle_s[1];
  const auto seconds = samples(text, "tarmac_gpu_activity_seconds_total");
  EXPECT_EQ(seconds.size(), 6u);  // only GPU 0 has counters
}

TEST(Metrics, TheHostLabelCanBeSpelledAsDcgmExportersNewerCode) {
  MetricsExtras extras{.hostname = "node1"};
  extras.hostname_label = "hostname";
  const auto text = render_metrics(view_of({a100(0, 96)}, {{0, gpu::Activity::Busy}}), extras);
  const auto util = samples(text, "DCGM_FI_DEV_GPU_UTIL");
  ASSERT_EQ(util.size(), 1u);
  EXPECT_NE(util[0].find(R"(,hostname="node1",)"), std::string::npos) << util[0];
  EXPECT_EQ(util[0].find("Hostname"), std::string::npos) << util[0];
}

TEST(Metrics, PodsAndJobsEachGetTheirOwnSeriesOfTheirGpus) {
  MetricsExtras extras{.hostname = "node1"};
  extras.pods = {{0, {{"notebook", "alice", "jupyter"}, {"trainer", "ml", "main"}}}, {2, {{"x\"y", "ns", "c"}}}};
  extras.jobs = {{2, {"77"}}};
  const auto text = render_metrics(
      view_of({a100(0, 0), a100(1, 0), a100(2, 0)},
              {{0, gpu::Activity::ReservedIdle}, {1, gpu::Activity::Idle}, {2, gpu::Activity::ReservedIdle}}),
      extras);
  const auto util = samples(text, "DCGM_FI_DEV_GPU_UTIL");
  ASSERT_EQ(util.size(), 4u) << text;
  // dcgm-exporter's labels, after the GPU's own, one series per pod's container.
  EXPECT_NE(util[0].find(R"(,pod="notebook",namespace="alice",container="jupyter"} 0)"), std::string::npos) << util[0];
  EXPECT_NE(util[1].find(R"(,pod="trainer",namespace="ml",container="main"} 0)"), std::string::npos) << util[1];
  EXPECT_EQ(util[2].find("pod="), std::string::npos) << util[2];
  // Once the kubelet has answered, a GPU of no pod says so with empty labels, as dcgm-exporter
  // does: a scrape that honors labels then adds no pod of its own (the agent's).
  extras.pods_listed = true;
  const auto listed = samples(render_metrics(view_of({a100(1, 0)}, {{1, gpu::Activity::Idle}}), extras),
                              "DCGM_FI_DEV_GPU_UTIL");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_NE(listed[0].find(R"(,pod="",namespace="",container=""} 0)"), std::string::npos) << listed[0];
  // A GPU with a Slurm job and a pod (which only a hostile or confused node has) gets both labels,
  // each escaped.
  EXPECT_NE(util[3].find(R"(,hpc_job="77",pod="x\"y",namespace="ns",container="c"} 0)"), std::string::npos)
      << util[3];
  const auto info = samples(text, "tarmac_gpu_pod_info");
  ASSERT_EQ(info.size(), 3u);
  EXPECT_EQ(info[0], R"(tarmac_gpu_pod_info{gpu="0",uuid="GPU-00000000",pci_bus_id="00000000:07:00.0",)"
                     R"(hostname="node1",pod="notebook",namespace="alice",container="jupyter"} 1)");
}

TEST(Metrics, AProcessInAPodsCgroupOnThatPodsGpuCarriesThePod) {
  gpu::GpuProcess in_pod;
  in_pod.pid = 10;
  in_pod.host.container = host::ContainerRef{"containerd", std::string(64, 'a'), "uid-1"};
  gpu::GpuProcess on_host;
  on_host.pid = 11;
  auto one = a100(0, 50);
  one.processes = {in_pod, on_host};
  auto shared = a100(1, 50);
  shared.processes = {in_pod};
  MetricsExtras extras{.hostname = "h"};
  // GPU 0: one pod (two of its containers); GPU 1: two pods, so no process can be told whose.
  extras.pods = {{0, {{"trainer", "ml", "main"}, {"trainer", "ml", "side"}}},
                 {1, {{"a", "ml", "main"}, {"b", "ml", "main"}}}};
  auto two_pods = a100(2, 50);
  gpu::GpuProcess other_pod = in_pod;
  other_pod.pid = 12;
  other_pod.host.container->pod_uid = "uid-2";  // a privileged pod that sees every GPU
  two_pods.processes = {in_pod, other_pod};
  extras.pods[2] = {{"trainer", "ml", "main"}};
  const auto info = samples(render_metrics(view_of({one, shared, two_pods}, {}), extras), "tarmac_process_info");
  ASSERT_EQ(info.size(), 5u);
  EXPECT_NE(info[3].find(R"(,pod="",namespace=""})"), std::string::npos) << info[3];
  EXPECT_NE(info[4].find(R"(,pod="",namespace=""})"), std::string::npos) << info[4];
  EXPECT_NE(info[0].find(R"(pid="10",)"), std::string::npos);
  EXPECT_NE(info[0].find(R"(,pod="trainer",namespace="ml"})"), std::string::npos) << info[0];
  EXPECT_NE(info[1].find(R"(pid="11",)"), std::string::npos);
  EXPECT_NE(info[1].find(R"(,pod="",namespace=""})"), std::string::npos) << info[1];
  EXPECT_NE(info[2].find(R"(,pod="",namespace=""})"), std::string::npos) << info[2];
}

TEST(Metrics, BeyondLoopbackOnlyTheProgramsNameIsSent) {
  auto d = a100(0, 0);
  gpu::GpuProcess p;
  p.pid = 7;
  p.host.command_line = "/opt/conda/bin/python3 train.py --hf-token hf_secret";
  d.processes.push_back(p);
  gpu::GpuProcess kernel_thread;
  kernel_thread.pid = 8;
  kernel_thread.host.name = "kworker";
  kernel_thread.host.command_line = "";
  d.processes.push_back(kernel_thread);
  MetricsExtras extras{.hostname = "h"};
  extras.commands = Commands::ProgramOnly;
  const auto text = render_metrics(view_of({d}, {}), extras);
  EXPECT_EQ(text.find("hf_secret"), std::string::npos);
  EXPECT_EQ(text.find("train.py"), std::string::npos);
  EXPECT_NE(text.find(R"(pid="7",user="",command="python3",)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(pid="8",user="",command="kworker",)"), std::string::npos);
  EXPECT_NE(render_metrics(view_of({d}, {}), {.hostname = "h"}).find("hf_secret"), std::string::npos)
      << "whole lines by default (loopback)";
}

TEST(Metrics, ProcessesCarryTheirOwnersAndHoldingIsMarked) {
  auto d = a100(3, 0);
  gpu::GpuProcess p;
  p.pid = 4242;
  p.used_mem_bytes = 20480 * util::kMiB;
  p.host.user = "bob";
  p.host.command_line = "python -m ipykernel_launcher -f \"/run/kernel.json\"\nx\\y";
  p.host.slurm_job_id = "77";
  d.processes.push_back(p);
  const auto text = render_metrics(view_of({d}, {{3, gpu::Activity::Holding}}), {.hostname = "h"});
  const auto info = samples(text, "tarmac_process_info");
  ASSERT_EQ(info.size(), 1u);
  EXPECT_NE(info[0].find(R"(pid="4242",user="bob",command="python -m ipykernel_launcher -f \"/run/kernel.json\"\nx\\y",container="",slurm_job="77")"),
            std::string::npos)
      << info[0];
  const auto holding = samples(text, "tarmac_process_holding");
  ASSERT_EQ(holding.size(), 1u);
  EXPECT_NE(holding[0].find("} 21474836480"), std::string::npos) << holding[0];
  EXPECT_NE(samples(text, "tarmac_gpu_holding_processes")[0].find("} 1"), std::string::npos);
}

TEST(Metrics, ALostGpuHasNoValuesButSaysItIsLost) {
  auto lost = a100(2, 0);
  lost.lost = "GPU is lost";
  const auto text = render_metrics(view_of({a100(0, 90), lost}, {}), {.hostname = "h"});
  EXPECT_EQ(samples(text, "DCGM_FI_DEV_GPU_UTIL").size(), 1u);
  const auto l = samples(text, "tarmac_gpu_lost");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[1].back(), '1');
}

TEST(Metrics, EveryFamilyHasHelpAndTypeOnceAndNamesAreValid) {
  auto v = view_of({a100(0, 96)}, {{0, gpu::Activity::Busy}});
  MetricsExtras extras{.hostname = "h", .alerts = {{"thermal", "warning", 0u, "GPU 0 is hot", 1}}};
  const auto text = render_metrics(v, extras);
  std::set<std::string> typed;
  std::istringstream in(text);
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (-?[0-9.e+]+)$)");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      const auto name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(typed.insert(name).second) << "TYPE twice for " << name;
    } else if (line.rfind("# HELP ", 0) != 0) {
      std::smatch m;
      ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
      EXPECT_TRUE(typed.count(m[1].str())) << "no TYPE before " << line;
    }
  }
  for (const auto& name : metric_names()) {
    EXPECT_TRUE(std::regex_match(name, std::regex("[a-zA-Z_:][a-zA-Z0-9_:]*"))) << name;
  }
  EXPECT_EQ(samples(text, "tarmac_alert_firing").size(), 1u);
}

TEST(Metrics, TheReapersHoldersAndActionsByGpuAndOutcome) {
  auto odd = a100(3, 0);
  odd.id.uuid = "GPU-\"x\n";
  const auto view = view_of({a100(0, 0), odd}, {{0, gpu::Activity::Holding}});
  MetricsExtras extras{.hostname = "node1"};
  EXPECT_EQ(render_metrics(view, extras).find("tarmac_holding_processes"), std::string::npos)
      << "no reaper, no reaper series";
  ReaperMetrics reaper;
  reaper.passes = 3;
  reaper.holding = {{0, 2}};  // GPU 3 holds none: 0, not a missing series
  reaper.reaped = {{0, "GPU-00000000", "ended", 4}, {0, "GPU-00000000", "survived", 1}};
  extras.reaper = reaper;
  const auto text = render_metrics(view, extras);
  EXPECT_EQ(samples(text, "tarmac_holding_processes"),
            (std::vector<std::string>{R"(tarmac_holding_processes{gpu="0",uuid="GPU-00000000",hostname="node1"} 2)",
                                      R"(tarmac_holding_processes{gpu="3",uuid="GPU-\"x\n",hostname="node1"} 0)"}));
  EXPECT_EQ(samples(text, "tarmac_reaped_processes_total"),
            (std::vector<std::string>{
                R"(tarmac_reaped_processes_total{gpu="0",uuid="GPU-00000000",outcome="ended",hostname="node1"} 4)",
                R"(tarmac_reaped_processes_total{gpu="0",uuid="GPU-00000000",outcome="survived",hostname="node1"} 1)"}));
  EXPECT_NE(text.find("# TYPE tarmac_reaped_processes_total counter\n"), std::string::npos);
  EXPECT_EQ(samples(text, "tarmac_reaper_passes_total"), std::vector<std::string>{"tarmac_reaper_passes_total 3"});
  EXPECT_NE(text.find("# TYPE tarmac_holding_processes gauge\n"), std::string::npos);
}

TEST(Metrics, TheBatchesRequestsByStateTokensAndWhatIsInFlight) {
  const auto view = view_of({a100(0, 0)}, {{0, gpu::Activity::Busy}});
  MetricsExtras extras{.hostname = "node1"};
  EXPECT_EQ(render_metrics(view, extras).find("tarmac_backfill"), std::string::npos) << "no batches, no series";
  extras.backfill = BackfillMetrics{.done = 7, .failed = 2, .retried = 3, .interrupted = 1, .prompt_tokens = 40,
                                    .completion_tokens = 90, .in_flight = 4, .batches_sending = 1, .yields = 3,
                                    .yield_seconds = 0.25};
  const auto text = render_metrics(view, extras);
  EXPECT_EQ(samples(text, "tarmac_backfill_requests_total"),
            (std::vector<std::string>{R"(tarmac_backfill_requests_total{state="done",hostname="node1"} 7)",
                                      R"(tarmac_backfill_requests_total{state="failed",hostname="node1"} 2)",
                                      R"(tarmac_backfill_requests_total{state="retried",hostname="node1"} 3)",
                                      R"(tarmac_backfill_requests_total{state="interrupted",hostname="node1"} 1)"}));
  EXPECT_EQ(samples(text, "tarmac_backfill_tokens_total"),
            (std::vector<std::string>{R"(tarmac_backfill_tokens_total{kind="prompt",hostname="node1"} 40)",
                                      R"(tarmac_backfill_tokens_total{kind="completion",hostname="node1"} 90)"}));
  EXPECT_EQ(samples(text, "tarmac_backfill_requests_in_flight"),
            std::vector<std::string>{R"(tarmac_backfill_requests_in_flight{hostname="node1"} 4)"});
  EXPECT_EQ(samples(text, "tarmac_backfill_batches_sending"),
            std::vector<std::string>{R"(tarmac_backfill_batches_sending{hostname="node1"} 1)"});
  EXPECT_EQ(samples(text, "tarmac_backfill_yields_total"),
            std::vector<std::string>{R"(tarmac_backfill_yields_total{hostname="node1"} 3)"});
  EXPECT_EQ(samples(text, "tarmac_backfill_yield_seconds_total"),
            std::vector<std::string>{R"(tarmac_backfill_yield_seconds_total{hostname="node1"} 0.25)"});
  EXPECT_NE(text.find("# TYPE tarmac_backfill_requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE tarmac_backfill_requests_in_flight gauge\n"), std::string::npos);
}

TEST(LiveState, CountsSecondsInTheClassThatHeldAndIdleStreaks) {
  LiveState live;
  EXPECT_EQ(live.view(), nullptr);
  gpu::Snapshot s;
  s.devices.push_back(a100(0, 0));
  live.publish(s, {{0, gpu::Activity::Busy}}, 10'000, {});
  live.publish(s, {{0, gpu::Activity::Idle}}, 12'000, {});  // the 2 s before were busy
  live.publish(s, {{0, gpu::Activity::Idle}}, 15'000, {});
  auto v = live.view();
  ASSERT_NE(v, nullptr);
  const auto& c = v->counters.at(0);
  EXPECT_DOUBLE_EQ(c.class_seconds[activity_slot(gpu::Activity::Busy)], 2.0);
  EXPECT_DOUBLE_EQ(c.class_seconds[activity_slot(gpu::Activity::Idle)], 3.0);
  EXPECT_EQ(c.idle_since_ms, 12'000);
  live.publish(s, {{0, gpu::Activity::Busy}}, 16'000, {});
  EXPECT_FALSE(live.view()->counters.at(0).idle_since_ms);
}

}  // namespace
}  // namespace tarmac::serve
