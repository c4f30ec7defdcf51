// The Tracker and the jobs that hold GPUs: Slurm jobs' and Kubernetes pods' holds recorded as
// spans, their unused GPUs reserved-idle.
#include <gtest/gtest.h>

#include <algorithm>

#include "tracker_fixture.hpp"

namespace tarmac::agent {
namespace {

using gpu::Activity;
using test_support::kAll;
using test_support::kS;
using test_support::kT0;
using test_support::TrackerTest;
using test_support::device;
using test_support::process;
using test_support::snapshot;

TEST_F(TrackerTest, ASlurmJobsHoldOnEachGpuIsASpanAndItsUnusedGpuIsReservedIdle) {
  JobView jobs{{{0, {"77"}}, {1, {"77", "78"}}}, {{"77", {"alice", "gpu"}}}};
  const auto busy = device(1, 90, {process(100, 30000)});
  tracker_.observe(snapshot({device(0, 0), busy}), kT0, true, recorder_, {}, &jobs);
  // A fast sample without a fresh read keeps the jobs last read.
  tracker_.observe(snapshot({device(0, 0), busy}), kT0 + 5 * kS, false, recorder_, {}, nullptr);
  EXPECT_EQ(tracker_.classes(), (std::map<unsigned, Activity>{{0, Activity::ReservedIdle}, {1, Activity::Busy}}));
  // Job 78 leaves GPU 1; then every job is gone, and GPU 0 is merely idle.
  jobs.map[1] = {"77"};
  tracker_.observe(snapshot({device(0, 0), busy}), kT0 + 10 * kS, true, recorder_, {}, &jobs);
  const JobView none;
  tracker_.observe(snapshot({device(0, 0), busy}), kT0 + 15 * kS, true, recorder_, {}, &none);
  EXPECT_EQ(tracker_.classes().at(0), Activity::Idle);
  auto all = read().jobs(kAll);
  ASSERT_TRUE(all.ok());
  std::vector<std::tuple<std::string, unsigned, long long, long long, std::string>> got;
  for (const auto& j : *all) got.emplace_back(j.job, j.gpu, j.first_ms - kT0, j.last_ms - kT0, j.user);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (decltype(got){{"77", 0, 0, 10 * kS, "alice"}, {"77", 1, 0, 10 * kS, "alice"},
                                {"78", 1, 0, 5 * kS, ""}}));
}

TEST_F(TrackerTest, APodsHoldIsAJobSpanAndItsUnusedGpuIsReservedIdle) {
  JobView jobs;
  // Two containers of one pod on GPU 0 (one hold), the pod and another on GPU 1.
  jobs.pods = {{0, {{"trainer", "ml", "main"}, {"trainer", "ml", "sidecar"}}},
               {1, {{"notebook", "alice", "jupyter"}, {"trainer", "ml", "main"}}}};
  const auto busy = device(1, 90, {process(100, 30000)});
  tracker_.observe(snapshot({device(0, 0), busy, device(2, 0)}), kT0, true, recorder_, {}, &jobs);
  tracker_.observe(snapshot({device(0, 0), busy, device(2, 0)}), kT0 + 5 * kS, true, recorder_, {}, &jobs);
  EXPECT_EQ(tracker_.classes(), (std::map<unsigned, Activity>{
                                    {0, Activity::ReservedIdle}, {1, Activity::Busy}, {2, Activity::Idle}}));
  const JobView none;
  tracker_.observe(snapshot({device(0, 0), busy, device(2, 0)}), kT0 + 10 * kS, true, recorder_, {}, &none);
  EXPECT_EQ(tracker_.classes().at(0), Activity::Idle);
  auto all = read().jobs(kAll);
  ASSERT_TRUE(all.ok());
  std::vector<std::tuple<std::string, unsigned, long long, long long>> got;
  for (const auto& j : *all) got.emplace_back(j.job, j.gpu, j.first_ms - kT0, j.last_ms - kT0);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (decltype(got){{"pod/alice/notebook", 1, 0, 5 * kS},
                                {"pod/ml/trainer", 0, 0, 5 * kS},
                                {"pod/ml/trainer", 1, 0, 5 * kS}}));
}

TEST_F(TrackerTest, AGapEndsJobSpans) {
  const JobView jobs{{{0, {"77"}}}, {}};
  tracker_.observe(snapshot({device(0, 0)}), kT0, true, recorder_, {}, &jobs);
  tracker_.observe(snapshot({device(0, 0)}), kT0 + 10 * kS, true, recorder_, {}, &jobs);
  tracker_.observe(snapshot({device(0, 0)}), kT0 + 100 * kS, true, recorder_, {}, &jobs);  // 90 s unseen
  auto all = read().jobs(kAll);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2U);
  EXPECT_EQ((*all)[0].last_ms, kT0 + 10 * kS);
  EXPECT_EQ((*all)[1].first_ms, kT0 + 100 * kS);
}

}  // namespace
}  // namespace tarmac::agent
