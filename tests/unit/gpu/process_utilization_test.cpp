// The per-process utilization contract (gpu/model.hpp) on fixed reads: what a read of the driver's
// samples means for each listed process, and where the next read starts.
#include "tarmac/gpu/process_utilization.hpp"

#include <gtest/gtest.h>

namespace tarmac::gpu {
namespace {

constexpr unsigned long long kSeenUs = 1'700'000'000'000'000ULL;  // the cursor, us
constexpr unsigned long long kNowUs = kSeenUs + 2'000'000ULL;

std::vector<GpuProcess> listed(std::initializer_list<unsigned> pids) {
  std::vector<GpuProcess> out;
  for (unsigned pid : pids) {
    GpuProcess p;
    p.pid = pid;
    p.sm_util_pct = 77;  // stale values from elsewhere: every read must overwrite them
    p.mem_util_pct = 77;
    out.push_back(p);
  }
  return out;
}

UtilizationSample sample(unsigned pid, unsigned long long ts, unsigned sm, unsigned mem) {
  UtilizationSample s;
  s.pid = pid;
  s.timestamp_us = ts;
  s.sm_pct = sm;
  s.mem_pct = mem;
  return s;
}

// N2 of reap's second review: a read right after another still looks back the whole window (a
// cursor of 0.1 s ago would find "no samples" and call a busy process idle); a cursor older than
// the window is kept (a slow watch covers its whole gap); the first read asks for the window.
TEST(ProcessUtilization, EveryReadLooksBackAtLeastTheWindow) {
  EXPECT_EQ(utilization_since(kNowUs - 100'000, kNowUs), kNowUs - kMinUtilizationWindowUs);
  EXPECT_EQ(utilization_since(kNowUs, kNowUs), kNowUs - kMinUtilizationWindowUs);
  EXPECT_EQ(utilization_since(kNowUs - 60'000'000, kNowUs), kNowUs - 60'000'000);
  EXPECT_EQ(utilization_since(std::nullopt, kNowUs), kNowUs - kMinUtilizationWindowUs);
  EXPECT_EQ(utilization_since(std::nullopt, 1000), 0U) << "a clock near its epoch does not wrap";
}

// The fix of issue 15: a listed process without a sample is known idle, not unknown.
TEST(ProcessUtilization, AListedProcessWithoutASampleIsIdleWhenTheReadSucceeded) {
  auto procs = listed({100, 200});
  const auto cursor = apply_utilization(UtilizationRead::Samples, {sample(100, kSeenUs + 10, 92, 38)}, kSeenUs, kNowUs, procs);
  EXPECT_EQ(procs[0].sm_util_pct, 92U);
  EXPECT_EQ(procs[0].mem_util_pct, 38U);
  EXPECT_EQ(procs[1].sm_util_pct, 0U);
  EXPECT_EQ(procs[1].mem_util_pct, 0U);
  EXPECT_EQ(cursor, kSeenUs + 10);
}

TEST(ProcessUtilization, NoSamplesAtAllMeansEveryListedProcessIsIdle) {
  auto procs = listed({100, 200});
  EXPECT_EQ(apply_utilization(UtilizationRead::NoSamples, {}, kSeenUs, kNowUs, procs), kSeenUs);
  for (const auto& p : procs) {
    EXPECT_EQ(p.sm_util_pct, 0U);
    EXPECT_EQ(p.mem_util_pct, 0U);
  }
}

// M2 of reap's third review: a read that filled its whole buffer may have left a busy process's
// samples out, so a process without one is unknown, never idle; one with samples keeps them.
TEST(ProcessUtilization, AFullBufferLeavesProcessesWithoutASampleUnknown) {
  auto procs = listed({100, 200});
  const auto cursor =
      apply_utilization(UtilizationRead::SamplesFull, {sample(100, kSeenUs + 10, 92, 38)}, kSeenUs, kNowUs, procs);
  EXPECT_EQ(procs[0].sm_util_pct, 92U);
  EXPECT_EQ(procs[0].mem_util_pct, 38U);
  EXPECT_FALSE(procs[1].sm_util_pct.has_value());
  EXPECT_FALSE(procs[1].mem_util_pct.has_value());
  EXPECT_FALSE(procs[1].enc_util_pct.has_value());
  EXPECT_EQ(cursor, kSeenUs + 10);
}

// M2: the MPS server runs its clients' work and the driver may charge their samples to it: on a GPU
// that runs MPS, a process with no sample of its own is unknown, also when there are no samples at all.
TEST(ProcessUtilization, UnderMpsAProcessWithoutASampleOfItsOwnIsUnknown) {
  auto clients = listed({100, 200, 300});
  clients[1].type = ProcessType::Mps;
  clients[2].host.name = kMpsComm;  // the server, with the clients' samples
  (void)apply_utilization(UtilizationRead::Samples, {sample(300, kSeenUs + 10, 90, 30), sample(100, kSeenUs + 10, 5, 1)},
                          kSeenUs, kNowUs, clients);
  EXPECT_EQ(clients[0].sm_util_pct, 5U) << "a sample of its own still counts";
  EXPECT_FALSE(clients[1].sm_util_pct.has_value());
  EXPECT_EQ(clients[2].sm_util_pct, 90U);

  auto quiet = listed({100, 200});
  quiet[1].type = ProcessType::Mps;
  (void)apply_utilization(UtilizationRead::NoSamples, {}, kSeenUs, kNowUs, quiet);
  for (const auto& p : quiet) EXPECT_FALSE(p.sm_util_pct.has_value()) << p.pid;

  // The server alone names MPS too, by its program where the comm is not known.
  auto served = listed({100, 200});
  served[1].host.command_line = "/usr/bin/nvidia-cuda-mps-server -x";
  (void)apply_utilization(UtilizationRead::Samples, {sample(200, kSeenUs + 10, 70, 7)}, kSeenUs, kNowUs, served);
  EXPECT_FALSE(served[0].sm_util_pct.has_value());
}

TEST(ProcessUtilization, RunsMpsOnlyWithAnMpsProcessOrTheServer) {
  auto procs = listed({100, 200});
  procs[0].host.name = "python3";
  procs[0].host.command_line = "python3 nvidia-cuda-mps-server";  // an argument is not the program
  procs[1].type = ProcessType::Graphics;
  EXPECT_FALSE(runs_mps(procs));
  procs[1].host.command_line = "nvidia-cuda-mps-server";
  EXPECT_TRUE(runs_mps(procs));
  procs[1].host.command_line.reset();
  procs[1].type = ProcessType::Mps;
  EXPECT_TRUE(runs_mps(procs));
}

TEST(ProcessUtilization, AFailedReadLeavesEveryProcessUnknownNeverIdle) {
  auto procs = listed({100, 200});
  EXPECT_EQ(apply_utilization(UtilizationRead::Unknown, {sample(100, kSeenUs + 10, 92, 38)}, kSeenUs, kNowUs, procs), kSeenUs);
  for (const auto& p : procs) {
    EXPECT_FALSE(p.sm_util_pct.has_value());
    EXPECT_FALSE(p.mem_util_pct.has_value());
  }
}

TEST(ProcessUtilization, AGarbageSampleMakesThatProcessUnknownAndLeavesTheCursor) {
  auto procs = listed({100, 200, 300});
  UtilizationSample jpeg = sample(300, kSeenUs + 30, 10, 10);
  jpeg.jpg_pct = 4000;  // any engine above 100 spoils the sample
  const auto cursor = apply_utilization(
      UtilizationRead::Samples, {sample(100, kSeenUs + 20, 4294967295U, 4294967295U), sample(200, kSeenUs + 10, 40, 20), jpeg},
      kSeenUs, kNowUs, procs);
  EXPECT_FALSE(procs[0].sm_util_pct.has_value());
  EXPECT_FALSE(procs[0].mem_util_pct.has_value());
  EXPECT_EQ(procs[1].sm_util_pct, 40U);
  EXPECT_FALSE(procs[2].sm_util_pct.has_value());
  EXPECT_EQ(cursor, kSeenUs + 10);  // garbage does not move it
}

TEST(ProcessUtilization, AGoodSampleBesideAGarbageOneOfTheSameProcessDoesNotRescueIt) {
  auto procs = listed({100});
  (void)apply_utilization(UtilizationRead::Samples, {sample(100, kSeenUs + 10, 50, 5), sample(100, kSeenUs + 20, 101, 5)},
                          kSeenUs, kNowUs, procs);
  EXPECT_FALSE(procs[0].sm_util_pct.has_value());
}

TEST(ProcessUtilization, ASampleFromFarInTheFutureIsGarbageAndCannotHideLaterSamples) {
  auto procs = listed({100});
  const auto cursor = apply_utilization(UtilizationRead::Samples, {sample(100, kNowUs + 3'600'000'000ULL, 50, 5)}, kSeenUs,
                                        kNowUs, procs);
  EXPECT_FALSE(procs[0].sm_util_pct.has_value());
  EXPECT_EQ(cursor, kSeenUs);
}

// Medium finding of issue 15's review: several samples in one period between two reads, the busy
// one first and an idle one last: the latest alone read idle.
TEST(ProcessUtilization, TheBusiestSampleOfAPeriodCountsNotTheLatest) {
  auto procs = listed({100});
  (void)apply_utilization(UtilizationRead::Samples, {sample(100, kSeenUs + 100, 80, 3), sample(100, kSeenUs + 200, 0, 9)},
                          kSeenUs, kNowUs, procs);
  EXPECT_EQ(procs[0].sm_util_pct, 80U);
  EXPECT_EQ(procs[0].mem_util_pct, 9U);
}

// High finding: an NVENC/NVDEC pipeline at SM 0 % is working; every engine the driver samples is kept.
TEST(ProcessUtilization, EveryEngineIsKept) {
  auto procs = listed({100, 200});
  UtilizationSample encoder = sample(100, kSeenUs + 10, 0, 0);
  encoder.enc_pct = 45;
  encoder.dec_pct = 12;
  encoder.jpg_pct = 3;
  encoder.ofa_pct = 4;
  (void)apply_utilization(UtilizationRead::Samples, {encoder}, kSeenUs, kNowUs, procs);
  EXPECT_EQ(procs[0].enc_util_pct, 45U);
  EXPECT_EQ(procs[0].dec_util_pct, 12U);
  EXPECT_EQ(procs[0].jpg_util_pct, 3U);
  EXPECT_EQ(procs[0].ofa_util_pct, 4U);
  EXPECT_EQ(procs[1].enc_util_pct, 0U);  // no sample: idle on every engine the function has
  EXPECT_EQ(procs[1].jpg_util_pct, 0U);
  // The older function has no JPEG or OFA engine: those stay unknown, never a made-up 0.
  auto old = listed({100});
  (void)apply_utilization(UtilizationRead::Samples, {sample(100, kSeenUs + 10, 0, 0)}, kSeenUs, kNowUs, old);
  EXPECT_EQ(old[0].enc_util_pct, 0U);
  EXPECT_FALSE(old[0].jpg_util_pct.has_value());
}

TEST(ProcessUtilization, TheBusiestSampleOfAProcessWinsAndTheCursorIsTheNewestSample) {
  auto procs = listed({100});
  const auto cursor = apply_utilization(
      UtilizationRead::Samples,
      {sample(100, kSeenUs + 300, 60, 6), sample(100, kSeenUs + 100, 10, 1), sample(555, kSeenUs + 900, 99, 9)}, kSeenUs, kNowUs,
      procs);
  EXPECT_EQ(procs[0].sm_util_pct, 60U);
  EXPECT_EQ(procs[0].mem_util_pct, 6U);
  EXPECT_EQ(cursor, kSeenUs + 900);  // a process not listed (it ended) still moves the cursor
}

TEST(ProcessUtilization, SamplesNotNewerThanTheCursorAreNotCountedAgain) {
  auto procs = listed({100});
  const auto cursor =
      apply_utilization(UtilizationRead::Samples, {sample(100, kSeenUs, 60, 6), sample(100, kSeenUs - 5, 70, 7)}, kSeenUs,
                        kNowUs, procs);
  EXPECT_EQ(procs[0].sm_util_pct, 0U);  // what the driver should not have returned counts for nothing
  EXPECT_EQ(cursor, kSeenUs);
}

}  // namespace
}  // namespace tarmac::gpu
