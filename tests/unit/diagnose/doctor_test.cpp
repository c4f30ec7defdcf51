// doctor's checks on hand-built windows of samples: each code fires on its condition, with the
// right GPUs, and stays quiet on a healthy machine and on brief spikes.
#include "tarmac/diagnose/doctor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tarmac/util/units.hpp"

namespace tarmac::diagnose {
namespace {

constexpr long long kNowMs = 1'800'000'000'000;
constexpr std::uint64_t kMiB = util::kMiB;

gpu::GpuProcess process(unsigned pid, std::uint64_t mib, unsigned parent = 500,
                        std::string cmd = "python train.py --epochs 90") {
  gpu::GpuProcess p;
  p.pid = pid;
  p.used_mem_bytes = mib * kMiB;
  p.host.pid = pid;
  p.host.visibility = host::PidVisibility::Visible;
  p.host.user = "alice";
  p.host.parent_pid = parent;
  p.host.command_line = std::move(cmd);
  p.host.start_time_unix = kNowMs / 1000 - 3600;
  return p;
}

gpu::Device device(unsigned index, unsigned util, std::uint64_t used_mib, std::vector<gpu::GpuProcess> procs = {}) {
  gpu::Device d;
  d.id.index = index;
  d.id.name = "NVIDIA A100-SXM4-40GB";
  d.id.cuda_capability = "8.0";
  d.id.mem_total_bytes = 40960 * kMiB;
  d.id.temp_slowdown_c = 89;
  d.sample.util_gpu_pct = util;
  d.sample.mem_used_bytes = used_mib * kMiB;
  d.sample.temp_c = 60;
  d.processes = std::move(procs);
  return d;
}

gpu::Snapshot snapshot(std::vector<gpu::Device> devices, long long t_ms = kNowMs) {
  gpu::Snapshot s;
  s.timestamp_unix_ms = t_ms;
  s.devices = std::move(devices);
  return s;
}

// Four GPUs training, one rank each.
std::vector<gpu::Device> balanced() {
  std::vector<gpu::Device> out;
  for (unsigned i = 0; i < 4; ++i) out.push_back(device(i, 95, 38900, {process(1000 + i, 38500)}));
  return out;
}

DoctorInput window(const std::vector<std::vector<gpu::Device>>& frames) {
  DoctorInput in;
  for (std::size_t k = 0; k < frames.size(); ++k) {
    in.samples.push_back(snapshot(frames[k], kNowMs + static_cast<long long>(k) * 500));
  }
  return in;
}

DoctorInput steady(const std::vector<gpu::Device>& frame, std::size_t n = 7) {
  return window(std::vector<std::vector<gpu::Device>>(n, frame));
}

const Finding* find(const Diagnosis& d, const std::string& code) {
  for (const auto& f : d.findings) {
    if (f.code == code) return &f;
  }
  return nullptr;
}

std::vector<std::string> codes(const Diagnosis& d) {
  std::vector<std::string> out;
  for (const auto& f : d.findings) out.push_back(f.code);
  return out;
}

TEST(Doctor, ABalancedJobHasNoFindings) {
  const auto d = diagnose(steady(balanced()));
  EXPECT_TRUE(d.findings.empty()) << ::testing::PrintToString(codes(d));
  EXPECT_EQ(exit_code_for(d.findings), 0);
  ASSERT_EQ(d.gpus.size(), 4U);
  EXPECT_EQ(d.gpus[0].processes, 1U);
  EXPECT_DOUBLE_EQ(*d.gpus[0].util_median_pct, 95.0);
}

TEST(Doctor, OneBusyGpuAndEmptyOthersIsSingleGpuActive) {
  auto frame = balanced();
  for (unsigned i = 1; i < 4; ++i) frame[i] = device(i, 0, 400);
  const auto d = diagnose(steady(frame));
  const Finding* f = find(d, "single-gpu-active");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::Warning);
  EXPECT_EQ(f->gpus, (std::vector<unsigned>{0, 1, 2, 3}));
  EXPECT_EQ(exit_code_for(d.findings), 1);
  EXPECT_NE(f->fixes.front().find("torchrun --nproc_per_node=4"), std::string::npos);
}

TEST(Doctor, TwoBusyGpusWithIdleOnesIsOnlyInfo) {
  auto frame = balanced();
  frame[2] = device(2, 0, 300);
  frame[3] = device(3, 0, 300);
  frame[1].processes[0].pid = 1001;
  const auto d = diagnose(steady(frame));
  EXPECT_EQ(find(d, "single-gpu-active"), nullptr);
  ASSERT_NE(find(d, "idle-gpus"), nullptr);
  EXPECT_EQ(find(d, "idle-gpus")->gpus, (std::vector<unsigned>{2, 3}));
  EXPECT_EQ(exit_code_for(d.findings), 0);
}

TEST(Doctor, MemoryImbalanceWithinOneJob) {
  auto frame = balanced();
  frame[0] = device(0, 92, 37400, {process(1000, 37000)});
  for (unsigned i = 1; i < 4; ++i) frame[i] = device(i, 90, 21400, {process(1000 + i, 21000)});
  const auto d = diagnose(steady(frame));
  const Finding* f = find(d, "memory-imbalance");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->gpus, (std::vector<unsigned>{0, 1, 2, 3}));
  EXPECT_EQ(std::get<long long>(f->evidence[0].values.at("job_mem_bytes")), static_cast<long long>(37000 * kMiB));
}

TEST(Doctor, DifferentJobsAreNotComparedForImbalance) {
  auto frame = balanced();
  // GPU 3 runs another user's small job: another parent, another command.
  frame[3] = device(3, 90, 8400, {process(2000, 8000, 900, "python serve.py")});
  EXPECT_EQ(find(diagnose(steady(frame)), "memory-imbalance"), nullptr);
}

TEST(Doctor, TwoRanksOnOneGpuIsProcessCount) {
  auto frame = balanced();
  frame[0].processes.push_back(process(1010, 400));
  const auto d = diagnose(steady(frame));
  const Finding* f = find(d, "process-count");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(std::get<long long>(f->evidence[0].values.at("job_processes")), 2);
}

TEST(Doctor, RankArgumentsDoNotSplitAJob) {
  auto frame = balanced();
  for (unsigned i = 0; i < 4; ++i) {
    frame[i].processes[0].host.command_line = "python -u train.py --local_rank=" + std::to_string(i);
  }
  frame[0].processes.push_back(process(1010, 400, 500, "python -u train.py --local_rank=3"));
  EXPECT_NE(find(diagnose(steady(frame)), "process-count"), nullptr);
}

TEST(Doctor, ExpectGpusChecksTheJobScope) {
  auto in = steady(balanced());
  in.job = JobScope{1000, {1000, 1001}};
  in.expect_gpus = 4;
  const auto d = diagnose(in);
  const Finding* f = find(d, "process-count");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->summary.find("uses 2 GPUs, 4 expected"), std::string::npos);
  EXPECT_EQ(d.job_gpus, (std::vector<unsigned>{0, 1}));
}

TEST(Doctor, AScopeWithoutGpuProcessesIsReported) {
  auto in = steady(balanced());
  in.job = JobScope{4242, {4242}};
  EXPECT_NE(find(diagnose(in), "process-count"), nullptr);
}

TEST(Doctor, StarvedVersusHolding) {
  auto frame = balanced();
  frame[1] = device(1, 5, 39000, {process(1001, 38600)});
  frame[3] = device(3, 0, 20780, {process(3000, 20480, 77, "python -m ipykernel_launcher -f k.json")});
  const auto d = diagnose(steady(frame));
  ASSERT_NE(find(d, "starved"), nullptr);
  EXPECT_EQ(find(d, "starved")->gpus, (std::vector<unsigned>{1}));
  ASSERT_NE(find(d, "holding"), nullptr);
  EXPECT_EQ(find(d, "holding")->gpus, (std::vector<unsigned>{3}));
}

// Issue 15: a process holding memory at 0 % beside a working one, on a busy GPU. Its own
// utilization must be known idle; unknown is never flagged.
gpu::GpuProcess with_util(gpu::GpuProcess p, std::optional<unsigned> sm, std::optional<unsigned> mem) {
  p.sm_util_pct = sm;
  p.mem_util_pct = mem;
  return p;
}

TEST(Doctor, AProcessHoldingMemoryAtZeroBesideAWorkingOneIsHolding) {
  auto frame = balanced();
  frame[0] = device(0, 92, 37264,
                    {with_util(process(1000, 30720), 92U, 38U),
                     with_util(process(4242, 6144, 77, "python -m ipykernel_launcher -f k.json"), 0U, 0U)});
  const auto d = diagnose(steady(frame));
  const Finding* f = find(d, "holding");
  ASSERT_NE(f, nullptr) << "the per-GPU view alone cannot see it: GPU 0 is busy";
  EXPECT_EQ(f->gpus, (std::vector<unsigned>{0}));
  EXPECT_NE(f->summary.find("PID 4242"), std::string::npos) << f->summary;
  ASSERT_EQ(f->evidence.size(), 1U);
  EXPECT_EQ(std::get<long long>(f->evidence[0].values.at("idle_holders")), 1);
  const bool named = std::any_of(f->facts.begin(), f->facts.end(), [](const std::string& fact) {
    return fact.find("PID 4242") != std::string::npos && fact.find("while PID 1000 works") != std::string::npos;
  });
  EXPECT_TRUE(named);
}

TEST(Doctor, AProcessWhoseUtilizationIsUnknownIsNeverHolding) {
  auto frame = balanced();
  frame[0] = device(0, 92, 37264,
                    {with_util(process(1000, 30720), 92U, 38U), with_util(process(4242, 6144), std::nullopt, std::nullopt)});
  EXPECT_EQ(find(diagnose(steady(frame)), "holding"), nullptr);
  // Nor is a small holder, nor one idle only briefly.
  frame[0].processes[1] = with_util(process(4242, 512), 0U, 0U);
  EXPECT_EQ(find(diagnose(steady(frame)), "holding"), nullptr);
  std::vector<std::vector<gpu::Device>> frames;
  for (int k = 0; k < 12; ++k) {
    auto f = balanced();
    const unsigned sm = k == 5 || k == 6 ? 0 : 40;  // two samples of twelve
    f[0] = device(0, 92, 37264, {with_util(process(1000, 30720), 92U, 38U), with_util(process(4242, 6144), sm, 0U)});
    frames.push_back(f);
  }
  EXPECT_EQ(find(diagnose(window(frames)), "holding"), nullptr);
}

TEST(Doctor, StarvationThatStartsPartwayIsCaughtABriefDipIsNot) {
  std::vector<std::vector<gpu::Device>> frames;
  for (int k = 0; k < 12; ++k) {
    auto frame = balanced();
    if (k >= 6) frame[2].sample.util_gpu_pct = 4;  // the last half of the window
    frames.push_back(frame);
  }
  EXPECT_NE(find(diagnose(window(frames)), "starved"), nullptr);

  std::vector<std::vector<gpu::Device>> dip;
  for (int k = 0; k < 12; ++k) {
    auto frame = balanced();
    if (k == 5 || k == 6) frame[2].sample.util_gpu_pct = 4;  // two samples of twelve
    dip.push_back(frame);
  }
  EXPECT_EQ(find(diagnose(window(dip)), "starved"), nullptr);
}

TEST(Doctor, ThermalIsCriticalWhenHardwareCutsClocks) {
  auto frame = balanced();
  frame[2].sample.temp_c = 87;
  auto d = diagnose(steady(frame));
  ASSERT_NE(find(d, "thermal"), nullptr);
  EXPECT_EQ(find(d, "thermal")->severity, Severity::Warning);
  frame[2].sample.clock_event_reasons = 0x68;
  d = diagnose(steady(frame));
  EXPECT_EQ(find(d, "thermal")->severity, Severity::Critical);
  EXPECT_EQ(std::get<std::string>(find(d, "thermal")->evidence[0].values.at("clock_events")),
            "hw_slowdown,sw_thermal_slowdown,hw_thermal_slowdown");
  EXPECT_EQ(exit_code_for(d.findings), 2);
}

TEST(Doctor, ABriefTemperatureSpikeIsNotThermal) {
  std::vector<std::vector<gpu::Device>> frames;
  for (int k = 0; k < 13; ++k) {
    auto frame = balanced();
    if (k == 6 || k == 7) frame[1].sample.temp_c = 90;
    frames.push_back(frame);
  }
  EXPECT_EQ(find(diagnose(window(frames)), "thermal"), nullptr);
}

TEST(Doctor, NearOom) {
  auto frame = balanced();
  frame[1] = device(1, 97, 40500, {process(1001, 40100)});
  const auto d = diagnose(steady(frame));
  ASSERT_NE(find(d, "near-oom"), nullptr);
  EXPECT_EQ(find(d, "near-oom")->gpus, (std::vector<unsigned>{1}));
}

TEST(Doctor, FaultsAreCritical) {
  auto frame = balanced();
  frame[2].lost = "GPU is lost";
  frame[2].id.name.reset();
  frame[2].id.cuda_capability.reset();
  frame[2].processes.clear();
  frame[1].sample.ecc_uncorrected_volatile = 1;
  const auto d = diagnose(steady(frame));
  const Finding* f = find(d, "gpu-fault");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::Critical);
  EXPECT_EQ(f->gpus, (std::vector<unsigned>{1, 2}));
  EXPECT_EQ(d.findings.front().code, "gpu-fault");  // critical first
  EXPECT_EQ(find(d, "device-order"), nullptr);       // a lost GPU is not a GPU of another model
}

gpu::Topology topology(unsigned n, gpu::Link between) {
  gpu::Topology t;
  t.links.assign(n, std::vector<gpu::Link>(n, between));
  t.nvlink_count.assign(n, std::vector<unsigned>(n, 0));
  for (unsigned i = 0; i < n; ++i) t.links[i][i] = gpu::Link::Self;
  return t;
}

TEST(Doctor, PcieOnlyTopologyForAMultiGpuJob) {
  auto in = steady(balanced());
  in.topology = topology(4, gpu::Link::Sys);
  auto d = diagnose(in);
  ASSERT_NE(find(d, "pcie-only-topology"), nullptr);
  EXPECT_EQ(find(d, "pcie-only-topology")->severity, Severity::Warning);
  in.topology = topology(4, gpu::Link::Pxb);
  EXPECT_EQ(find(diagnose(in), "pcie-only-topology")->severity, Severity::Info);
  in.topology = topology(4, gpu::Link::NvLink);
  EXPECT_EQ(find(diagnose(in), "pcie-only-topology"), nullptr);
}

TEST(Doctor, EnvironmentChecks) {
  auto in = steady(balanced());
  in.topology = topology(4, gpu::Link::NvLink);
  in.environment.nccl = {{"NCCL_P2P_DISABLE", "1"}};
  in.environment.cuda_launch_blocking = "1";
  in.environment.cuda_visible_devices = "0,1";
  const auto d = diagnose(in);
  EXPECT_NE(find(d, "nccl-p2p-disabled"), nullptr);
  EXPECT_NE(find(d, "cuda-launch-blocking"), nullptr);
  const Finding* v = find(d, "visible-devices-restricted");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->severity, Severity::Info);
  EXPECT_EQ(v->gpus, (std::vector<unsigned>{2, 3}));

  in.environment = {};
  in.environment.cuda_visible_devices = "";
  const auto hidden = diagnose(in);
  const Finding* none = find(hidden, "no-gpus-visible");
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(none->severity, Severity::Critical);

  in.environment.cuda_visible_devices = "0,7";  // CUDA stops at the invalid 7
  EXPECT_EQ(find(diagnose(in), "visible-devices-restricted")->severity, Severity::Warning);
}

TEST(Doctor, DeviceOrderOnMixedGpus) {
  std::vector<gpu::Device> frame = {device(0, 0, 300), device(1, 90, 20000, {process(1000, 19000)})};
  frame[0].id.name = "NVIDIA RTX A4000";
  frame[0].id.cuda_capability = "8.6";
  frame[1].id.name = "NVIDIA GeForce RTX 4090";
  frame[1].id.cuda_capability = "8.9";
  auto in = steady(frame);
  const auto d = diagnose(in);
  const Finding* f = find(d, "device-order");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->gpus, (std::vector<unsigned>{0, 1}));
  in.environment.cuda_device_order = "PCI_BUS_ID";
  EXPECT_EQ(find(diagnose(in), "device-order"), nullptr);
}

TEST(Doctor, ZeroGpusIsCritical) {
  const auto d = diagnose(steady({}));
  ASSERT_NE(find(d, "no-gpus-visible"), nullptr);
  EXPECT_EQ(exit_code_for(d.findings), 2);
}

TEST(Doctor, EveryCodeIsKnown) {
  // Codes are stable API: each finding's code is in the documented list.
  auto frame = balanced();
  frame[1].sample.temp_c = 95;
  frame[2].lost = "GPU is lost";
  const auto d = diagnose(steady(frame));
  for (const auto& f : d.findings) {
    EXPECT_NE(std::find(finding_codes().begin(), finding_codes().end(), f.code), finding_codes().end()) << f.code;
  }
  EXPECT_EQ(no_gpus_visible("no library", {}).code, "no-gpus-visible");
}

}  // namespace
}  // namespace tarmac::diagnose

namespace tarmac::diagnose {
namespace {

TEST(DoctorDocs, EveryCodeHasItsSectionInDocsDoctorMd) {
  std::ifstream doc(TARMAC_SOURCE_DIR "/docs/doctor.md");
  ASSERT_TRUE(doc.good()) << "docs/doctor.md is missing";
  std::stringstream buffer;
  buffer << doc.rdbuf();
  const std::string text = buffer.str();
  for (const auto& code : finding_codes()) {
    EXPECT_NE(text.find("### `" + code + "` — "), std::string::npos) << "docs/doctor.md lacks a section for " << code;
  }
}

}  // namespace
}  // namespace tarmac::diagnose
