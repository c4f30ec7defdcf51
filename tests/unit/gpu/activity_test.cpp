#include "tarmac/gpu/activity.hpp"

#include <gtest/gtest.h>

#include "tarmac/diagnose/verdicts.hpp"
#include "tarmac/gpu/clock_events.hpp"
#include "tarmac/host/process_info.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::gpu {
namespace {

constexpr long long kNow = 1'800'000'000;

Device device(unsigned index, unsigned util, std::uint64_t used_mib, int processes = 0, long long age_s = 3600) {
  Device d;
  d.id.index = index;
  d.id.mem_total_bytes = 40960 * util::kMiB;
  d.sample.util_gpu_pct = util;
  d.sample.mem_used_bytes = used_mib * util::kMiB;
  for (int i = 0; i < processes; ++i) {
    GpuProcess p;
    p.pid = 1000 + static_cast<unsigned>(i);
    p.host.start_time_unix = kNow - age_s;
    d.processes.push_back(p);
  }
  return d;
}

TEST(Activity, ClassifiesTheFiveEverydayCases) {
  const ActivityThresholds t;
  EXPECT_EQ(classify(device(0, 96, 38900, 1), t, kNow), Activity::Busy);
  EXPECT_EQ(classify(device(0, 0, 400), t, kNow), Activity::Idle);
  EXPECT_EQ(classify(device(0, 0, 400), t, kNow, Leased::Yes), Activity::ReservedIdle);
  EXPECT_EQ(classify(device(0, 5, 39000, 1), t, kNow), Activity::Starved);
  EXPECT_EQ(classify(device(0, 0, 20480, 1, 3 * 3600), t, kNow), Activity::Holding);
}

TEST(Activity, AYoungProcessAtZeroPercentIsNotYetHolding) {
  // Started two minutes ago: it cannot have held its memory idle for the 10-minute threshold.
  EXPECT_EQ(classify(device(0, 0, 20480, 1, 120), ActivityThresholds{}, kNow), Activity::Starved);
}

TEST(Activity, ALightProcessLeavesTheGpuIdle) {
  EXPECT_EQ(classify(device(0, 3, 512, 1), ActivityThresholds{}, kNow), Activity::Idle);
}

TEST(Activity, ThermalSlowdownAndLostGpusAreFaults) {
  Device hot = device(0, 96, 38900, 1);
  hot.sample.clock_event_reasons = 0x40;  // HW thermal slowdown
  EXPECT_EQ(classify(hot, ActivityThresholds{}, kNow), Activity::Fault);
  EXPECT_NE(fault_reason(hot)->find("HW thermal"), std::string::npos);
  Device lost = device(2, 0, 0);
  lost.lost = "fallen off the bus";
  EXPECT_EQ(classify(lost, ActivityThresholds{}, kNow), Activity::Fault);
  Device capped = device(0, 96, 38900, 1);
  capped.sample.clock_event_reasons = 0x1 | 0x4;  // idle + software power cap: normal operation
  EXPECT_EQ(classify(capped, ActivityThresholds{}, kNow), Activity::Busy);
}

// A board in MIG mode (no utilization) with two MIG devices: each with `used_mib` and, when
// `processes`, one process of that age; GPM where given.
Device mig_board(std::vector<std::optional<double>> gpm, std::vector<bool> processes, long long age_s = 3600) {
  Device d = device(0, 0, 0);
  d.sample.util_gpu_pct.reset();
  d.modes.mig_mode_current = true;
  for (std::size_t k = 0; k < gpm.size(); ++k) {
    MigDevice m;
    m.index = static_cast<unsigned>(k);
    m.mem_total_bytes = 20480 * util::kMiB;
    m.mem_used_bytes = (processes[k] ? 15000 : 0) * util::kMiB;
    m.gpm_sm_active_pct = gpm[k];
    d.mig.push_back(m);
    if (processes[k]) {
      GpuProcess p;
      p.pid = 2000 + static_cast<unsigned>(k);
      p.host.start_time_unix = kNow - age_s;
      p.mig = static_cast<unsigned>(k);
      d.processes.push_back(p);
    }
  }
  return d;
}

TEST(Activity, AMigDeviceIsClassifiedByItsGpmOrElseByItsProcesses) {
  const ActivityThresholds t;
  const Device gpm = mig_board({85.0, 0.0}, {true, true});
  EXPECT_EQ(classify_mig(gpm, 0, t, kNow).activity, Activity::Busy);
  EXPECT_TRUE(classify_mig(gpm, 0, t, kNow).measured);
  EXPECT_EQ(classify_mig(gpm, 1, t, kNow).activity, Activity::Holding);  // 15 of 20 GiB at 0 % for an hour
  EXPECT_EQ(classify(gpm, t, kNow), Activity::Busy);                     // the board: its most active slice
  // Without GPM (A100): a slice in use is busy by presence, and says it was not measured.
  const Device a100 = mig_board({std::nullopt, std::nullopt}, {true, false});
  EXPECT_EQ(classify_mig(a100, 0, t, kNow).activity, Activity::Busy);
  EXPECT_FALSE(classify_mig(a100, 0, t, kNow).measured);
  EXPECT_EQ(classify_mig(a100, 1, t, kNow).activity, Activity::Idle);
  // A board whose only process holds memory at 0 % is holding, never from a made-up 0 %.
  const Device held = mig_board({0.0, std::nullopt}, {true, false});
  EXPECT_EQ(classify(held, t, kNow), Activity::Holding);
  EXPECT_EQ(classify_with_history(held, t, 0), Activity::Starved);  // held for no time yet
  const Device empty = mig_board({std::nullopt, std::nullopt}, {false, false});
  EXPECT_EQ(classify(empty, t, kNow), Activity::Idle);
  EXPECT_EQ(classify(empty, t, kNow, Leased::Yes), Activity::ReservedIdle);
}

TEST(Activity, ALeasedMigDeviceIsReservedIdleOnlyWhileNothingRunsOnIt) {
  const ActivityThresholds t;
  const Device d = mig_board({0.0, std::nullopt}, {true, false});
  EXPECT_EQ(classify_mig(d, 1, t, kNow, Leased::Yes).activity, Activity::ReservedIdle);
  EXPECT_TRUE(classify_mig(d, 1, t, kNow, Leased::Yes).measured);
  EXPECT_EQ(classify_mig(d, 1, t, kNow).activity, Activity::Idle);
  // What runs on a leased one keeps its class: holding its memory at 0 %, not reserved-idle.
  EXPECT_EQ(classify_mig(d, 0, t, kNow, Leased::Yes).activity, Activity::Holding);
  // A fault is a fault, leased or not.
  Device lost = d;
  lost.lost = "fell off the bus";
  EXPECT_EQ(classify_mig(lost, 1, t, kNow, Leased::Yes).activity, Activity::Fault);
}

TEST(Activity, ProcessesFollowTheirInstanceIdsIntoANewLayoutAndUnplacedOnesKeepTheBoardInUse) {
  const ActivityThresholds t;
  Device d = mig_board({std::nullopt, std::nullopt}, {false, false});
  d.mig[0].gpu_instance_id = 7;
  d.mig[1].gpu_instance_id = 8;
  d.mig[0].compute_instance_id = d.mig[1].compute_instance_id = 0;
  GpuProcess p;
  p.pid = 1;
  p.mig_instance = std::pair{8U, 0U};
  p.mig = 0;  // stale: an older layout's position
  d.processes = {p};
  match_mig_processes(d.mig, d.processes);
  EXPECT_EQ(d.processes[0].mig, 1U);
  d.mig.pop_back();  // instance 8 is gone: the process is placed nowhere
  match_mig_processes(d.mig, d.processes);
  EXPECT_FALSE(d.processes[0].mig.has_value());
  EXPECT_EQ(classify_mig(d, 0, t, kNow).activity, Activity::Idle);
  EXPECT_EQ(classify(d, t, kNow), Activity::Busy);  // it runs somewhere on the board
}

TEST(ClockEvents, DecodesKnownAndUnknownBits) {
  EXPECT_EQ(clock_event_keys(0x60), (std::vector<std::string>{"sw_thermal_slowdown", "hw_thermal_slowdown"}));
  EXPECT_EQ(clock_event_keys(0x1000), (std::vector<std::string>{"0x1000"}));
  EXPECT_EQ(harmful_clock_events(0x1 | 0x2 | 0x4 | 0x10), 0U);
  EXPECT_EQ(harmful_clock_events(0x88), 0x88U);
}

TEST(Verdicts, OneGpuWorkingWhileTheOthersIdleIsNamed) {
  Snapshot s;
  s.devices = {device(0, 98, 39000, 1), device(1, 0, 500), device(2, 0, 400), device(3, 0, 450)};
  std::vector<Activity> classes;
  for (const auto& d : s.devices) classes.push_back(classify(d, ActivityThresholds{}, kNow));
  const auto v = diagnose::verdicts(s, classes);
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v[0].code, "single-gpu-active");
  EXPECT_EQ(v[0].text, "GPUs 1-3 idle while GPU 0 works: see `tarmac doctor`");
}

TEST(Verdicts, NearOomAndHoldingAreReported) {
  Snapshot s;
  s.devices = {device(0, 96, 40500, 1), device(1, 0, 20480, 1, 5 * 3600)};
  std::vector<Activity> classes;
  for (const auto& d : s.devices) classes.push_back(classify(d, ActivityThresholds{}, kNow));
  std::vector<std::string> codes;
  for (const auto& v : diagnose::verdicts(s, classes)) codes.push_back(v.code);
  EXPECT_NE(std::find(codes.begin(), codes.end(), "near-oom"), codes.end());
  EXPECT_NE(std::find(codes.begin(), codes.end(), "holding"), codes.end());
}

TEST(Verdicts, AWellKnownHolderIsNamedWithItsOwnerAndMemory) {
  Snapshot s;
  s.devices = {device(0, 0, 20480, 2, 5 * 3600), device(1, 0, 20480, 1, 5 * 3600), device(2, 0, 8192, 1, 5 * 3600)};
  s.devices[0].processes[0].host.command_line = "python3 train.py";
  s.devices[0].processes[0].used_mem_bytes = 2 * util::kGiB;
  s.devices[0].processes[1].host.command_line =
      "/opt/conda/bin/python -m ipykernel_launcher -f /home/bob/.local/share/jupyter/runtime/kernel-1.json";
  s.devices[0].processes[1].host.user = "bob\x1b[2J";
  s.devices[0].processes[1].used_mem_bytes = 18 * util::kGiB;
  s.devices[1].processes[0].host.command_line = "python train.py";  // nothing well known: the plain verdict
  s.devices[2].processes[0].host.command_line = "/usr/local/bin/ollama serve";
  s.devices[2].processes[0].used_mem_bytes = 8 * util::kGiB;
  std::vector<Activity> classes(3, Activity::Holding);
  std::vector<std::string> texts;
  for (const auto& v : diagnose::verdicts(s, classes)) {
    if (v.code == "holding") texts.push_back(v.text);
  }
  ASSERT_EQ(texts.size(), 3U);
  EXPECT_EQ(texts[0].find("an idle Jupyter kernel of bob\\x1b[2J holds 18.0 GiB on GPU 0 (started "), 0U) << texts[0];
  EXPECT_EQ(texts[1].find("an idle Ollama server of ? holds 8.0 GiB on GPU 2"), 0U) << texts[1];
  EXPECT_EQ(texts[2], "GPU 1 holds memory at 0 % utilization: a forgotten process? (`tarmac reap`)");
}

TEST(Verdicts, AReservedGpuNothingRunsOnNamesItsLease) {
  Snapshot s;
  s.devices = {device(0, 0, 500), device(1, 0, 500), device(2, 0, 500), device(3, 0, 500)};
  const std::vector<Activity> classes{Activity::ReservedIdle, Activity::ReservedIdle, Activity::ReservedIdle,
                                      Activity::Idle};
  std::vector<std::string> texts;
  for (const auto& v : diagnose::verdicts(s, classes, {}, {{"job 12 alice", "12"}, {"job x;rm bob\x1b[2J", ""}, {}, {"job 9 carol", "9"}})) {
    if (v.code == "reserved-idle") texts.push_back(v.text);
  }
  ASSERT_EQ(texts.size(), 3U);  // GPU 3 is idle, not reserved: its stale lease says nothing
  EXPECT_EQ(texts[0], "GPU 0 is reserved by job 12 alice and unused: `tarmac cancel 12` gives it back");
  EXPECT_EQ(texts[1], "GPU 1 is reserved by job x;rm bob\\x1b[2J and unused: `tarmac jobs` lists the leases");
  EXPECT_EQ(texts[2], "GPU 2 is reserved and unused: `tarmac jobs` lists the leases");
}

TEST(Verdicts, WellKnownHoldersAreToldByTheirCommandLine) {
  const auto kind = [](const char* cmd) { return host::well_known_holder(std::string(cmd)).value_or("-"); };
  EXPECT_EQ(kind("python -m ipykernel_launcher -f k.json"), "Jupyter kernel");
  EXPECT_EQ(kind("/usr/bin/python3 -m ipykernel -f k.json"), "Jupyter kernel");
  EXPECT_EQ(kind("/usr/bin/python3 /usr/local/lib/python3.10/dist-packages/colab_kernel_launcher.py"), "Jupyter kernel");
  EXPECT_EQ(kind("ollama runner --model /root/.ollama/models/blobs/sha256-1"), "Ollama server");
  EXPECT_EQ(kind("vllm serve meta-llama/Llama-3-8B"), "vLLM server");
  EXPECT_EQ(kind("python -m vllm.entrypoints.openai.api_server --model m"), "vLLM server");
  EXPECT_EQ(kind("/opt/llama.cpp/llama-server -m q.gguf --port 8081"), "llama.cpp server");
  EXPECT_EQ(kind("python3 -m sglang.launch_server --model-path m"), "SGLang server");
  EXPECT_EQ(kind("/usr/bin/python3 /usr/local/bin/tensorboard --logdir runs"), "TensorBoard") << "its entry point";
  EXPECT_EQ(kind("/usr/bin/python3 /usr/local/bin/vllm serve m"), "vLLM server");
  EXPECT_EQ(kind("python3 train.py tensorboard"), "-") << "an argument is not the program";
  EXPECT_EQ(kind("tensorboard --logdir runs"), "TensorBoard");
  EXPECT_EQ(kind("python train.py --notebook ipykernel-like-name"), "-");
  EXPECT_EQ(kind("python train.py"), "-");
  EXPECT_EQ(kind(""), "-");
  EXPECT_EQ(host::well_known_holder(std::nullopt), std::nullopt);
}

TEST(Verdicts, IndexListsCollapseRuns) {
  EXPECT_EQ(diagnose::format_index_list({0}), "0");
  EXPECT_EQ(diagnose::format_index_list({1, 2, 3}), "1-3");
  EXPECT_EQ(diagnose::format_index_list({0, 2, 5, 6, 7}), "0, 2, 5-7");
}

}  // namespace
}  // namespace tarmac::gpu
