#include "tarmac/sched/queue.hpp"

#include <gtest/gtest.h>

#include "tarmac/sched/job.hpp"
#include "tarmac/sched/leases.hpp"
#include "tarmac/sched/pick.hpp"

namespace tarmac::sched {
namespace {

Job waiting(long long id, uid_t uid, long long submitted) {
  Job j;
  j.id = id;
  j.uid = uid;
  j.submitted_ms = submitted;
  return j;
}

std::vector<long long> ids(const std::vector<const Job*>& jobs) {
  std::vector<long long> out;
  for (const Job* j : jobs) out.push_back(j->id);
  return out;
}

TEST(FairOrder, FewestRecentGpuHoursFirstThenOldest) {
  const Job a1 = waiting(1, 1000, 10);  // alice, first in
  const Job b1 = waiting(2, 1001, 20);  // bob
  const Job a2 = waiting(3, 1000, 30);
  const Job c1 = waiting(4, 1002, 40);  // carol, never used a GPU
  const std::map<uid_t, long long> usage = {{1000, 5 * 3600 * 1000LL}, {1001, 3600 * 1000LL}};
  EXPECT_EQ(ids(fair_order({&a1, &b1, &a2, &c1}, usage)), (std::vector<long long>{4, 2, 1, 3}));
}

TEST(FairOrder, WithoutUsageItIsFirstComeFirstServed) {
  const Job x = waiting(7, 1, 300);
  const Job y = waiting(5, 2, 100);
  const Job z = waiting(6, 3, 100);  // same time as y: the lower id first
  EXPECT_EQ(ids(fair_order({&x, &y, &z}, {})), (std::vector<long long>{5, 6, 7}));
}

TEST(Cap, ZeroMeansNoCapAndOtherwiseCountsWhatIsHeld) {
  EXPECT_TRUE(within_cap(0, 100, 8));
  EXPECT_TRUE(within_cap(4, 2, 2));
  EXPECT_FALSE(within_cap(4, 3, 2));
  EXPECT_FALSE(within_cap(1, 0, 2));
}

gpu::Device device(unsigned index, std::uint64_t used, std::uint64_t free, unsigned util, bool process) {
  gpu::Device d;
  d.id.index = index;
  d.id.uuid = "GPU-" + std::to_string(index);
  d.sample.mem_used_bytes = used;
  d.sample.mem_free_bytes = free;
  d.sample.util_gpu_pct = util;
  if (process) d.processes.push_back(gpu::GpuProcess{.pid = 100 + index});
  return d;
}

TEST(WithoutJobsOn, FreesOnlyTheNamedGpus) {
  gpu::Snapshot s;
  s.devices = {device(0, 30, 10, 90, true), device(1, 30, 10, 90, true)};
  const auto out = without_jobs_on(s, {"GPU-1"});
  EXPECT_EQ(out.devices[0].processes.size(), 1u);
  EXPECT_EQ(*out.devices[0].sample.mem_free_bytes, 10u);
  EXPECT_TRUE(out.devices[1].processes.empty());
  EXPECT_EQ(*out.devices[1].sample.mem_free_bytes, 40u);
  EXPECT_EQ(*out.devices[1].sample.util_gpu_pct, 0u);
  // So a pick that needs the memory the backfill job holds can have that GPU.
  const PickRequest need{.n = 1, .min_free_bytes = 35, .max_util_pct = 100};
  EXPECT_FALSE(pick(s, {}, need).ok());
  EXPECT_EQ(pick(out, {}, need).chosen, (std::vector<unsigned>{1}));
}

Job holding(long long id, uid_t uid, JobState state, std::vector<std::string> uuids, bool backfill = false) {
  Job j;
  j.id = id;
  j.uid = uid;
  j.state = state;
  j.kind = state == JobState::Active ? JobKind::Lease : JobKind::Job;
  j.backfill = backfill;
  j.gpu_uuids = std::move(uuids);
  for (std::size_t i = 0; i < j.gpu_uuids.size(); ++i) j.gpus.push_back(static_cast<unsigned>(i));
  return j;
}

JobsById by_id(std::vector<Job> jobs) {
  JobsById out;
  for (auto& j : jobs) out.emplace(j.id, std::move(j));
  return out;
}

TEST(Holding, RunningStoppingAndActiveHoldGpusButOnlyNonBackfillHoldThemForGood) {
  const auto jobs = by_id({holding(1, 1000, JobState::Running, {"GPU-0"}),
                           holding(2, 1000, JobState::Stopping, {"GPU-1"}),
                           holding(3, 1000, JobState::Active, {"GPU-2", "GPU-3"}),
                           holding(4, 1000, JobState::Queued, {}),
                           holding(5, 1001, JobState::Running, {"GPU-4"}, true),
                           holding(6, 1000, JobState::Done, {"GPU-5"})});
  EXPECT_EQ(gpus_held_by(jobs, 1000), 4u);
  EXPECT_EQ(gpus_held_by(jobs, 1001), 1u);
  // A backfill job may be preempted, a stopping job is on its way out: neither stops a pass.
  EXPECT_EQ(gpus_held_for_good(jobs), 3u);
  EXPECT_EQ(preemptible_gpus(jobs), (std::set<std::string>{"GPU-4"}));
}

TEST(Holding, BusyGpusAreTheLiveLeasesAndWhatTheAgentGaveWhateverTheFilesSay) {
  JobsById named = by_id({holding(1, 1000, JobState::Running, {"GPU-0"}), holding(2, 1000, JobState::Queued, {})});
  named.at(1).user = "alice";
  const std::vector<Lease> live = {Lease{.uuid = "GPU-7", .pid = 0, .starttime = 0, .expires_unix_ms = 0,
                                         .job_id = "x", .user = "bob"}};
  const LeasedGpus busy = busy_gpus(live, named);
  ASSERT_EQ(busy.size(), 2u);
  EXPECT_EQ(busy.at("GPU-0"), "job 1 of alice");
  EXPECT_EQ(busy.at("GPU-7"), describe(live[0]));
}

TEST(Preemption, TheBackfillJobsOnTheChosenGpusInTheirOrderEachOnce) {
  const auto jobs = by_id({holding(1, 1, JobState::Running, {"GPU-0", "GPU-1"}, true),
                           holding(2, 1, JobState::Running, {"GPU-2"}, true),
                           holding(3, 1, JobState::Stopping, {"GPU-3"}, true),
                           holding(4, 1, JobState::Running, {"GPU-4"})});
  EXPECT_EQ(backfill_on(jobs, {"GPU-2", "GPU-1", "GPU-0"}), (std::vector<long long>{2, 1}));
  EXPECT_TRUE(backfill_on(jobs, {"GPU-3", "GPU-4"}).empty()) << "neither a stopping job nor a normal one";
}

TEST(Preemption, TheRoomOfAJobComesWithItsStoppingJobsAndTheLongestGrace) {
  auto jobs = by_id({holding(1, 1, JobState::Stopping, {"GPU-0"}, true), holding(2, 1, JobState::Stopping, {"GPU-1"}, true)});
  jobs.at(1).preempted_for = 9;
  jobs.at(1).grace_ms = 30'000;
  jobs.at(2).preempted_for = 9;
  jobs.at(2).grace_ms = 5'000;
  EXPECT_TRUE(room_coming(jobs, 9));
  EXPECT_FALSE(room_coming(jobs, 8));
  EXPECT_EQ(longest_grace_for(jobs, 9), 30'000);
  EXPECT_EQ(longest_grace_for(jobs, 8), 0);
}

TEST(Preemption, RoomInBackfillIsWhatTheRunningBackfillJobsWouldFreeAndNamesThem) {
  gpu::Snapshot s;
  s.devices = {device(0, 30, 10, 90, true), device(1, 30, 10, 90, true), device(2, 30, 10, 90, true)};
  const auto jobs = by_id({holding(1, 1, JobState::Running, {"GPU-0"}),
                           holding(2, 1, JobState::Running, {"GPU-1"}, true),
                           holding(3, 1, JobState::Running, {"GPU-2"}, true)});
  const LeasedGpus busy = busy_gpus({}, jobs);
  const auto one = room_in_backfill(s, busy, jobs, PickRequest{.n = 1});
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->chosen.size(), 1u);
  EXPECT_EQ(one->backfill.size(), 1u);
  const auto two = room_in_backfill(s, busy, jobs, PickRequest{.n = 2});
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->chosen, (std::vector<unsigned>{1, 2}));
  EXPECT_EQ(two->uuids, (std::vector<std::string>{"GPU-1", "GPU-2"}));
  EXPECT_EQ(two->backfill, (std::vector<long long>{2, 3}));
  EXPECT_EQ(yield_reason(*two), "waiting for backfill jobs 2,3 to yield GPUs 1,2");
  EXPECT_FALSE(room_in_backfill(s, busy, jobs, PickRequest{.n = 3})) << "the normal job's GPU is not backfill's to free";
  auto stopping = jobs;
  stopping.at(3).state = JobState::Stopping;  // being stopped for someone else: not this request's room
  EXPECT_FALSE(room_in_backfill(s, busy_gpus({}, stopping), stopping, PickRequest{.n = 2}));
  EXPECT_FALSE(room_in_backfill(s, busy, by_id({}), PickRequest{.n = 1})) << "no backfill, no room in it";
  EXPECT_FALSE(room_in_backfill(s, busy, jobs, PickRequest{.mig = std::string()})) << "backfill holds no MIG device";
}

// An external backfill server (an Ollama that tarmac did not start) is on GPU 0 as pid 100, and its
// runner on GPU 1 shares it with someone else's pid 201; GPU 2 is someone else's.
gpu::Snapshot external_on_gpus() {
  gpu::Snapshot s;
  s.devices = {device(0, 30, 10, 90, true), device(1, 50, 10, 90, true), device(2, 30, 10, 90, true)};
  s.devices[0].processes[0].used_mem_bytes = 20;
  s.devices[1].processes[0].used_mem_bytes = 25;
  s.devices[1].processes.push_back(gpu::GpuProcess{.pid = 201, .used_mem_bytes = 25});
  return s;
}

TEST(Preemption, WithoutAnExternalServersProcessesOnlyTheirMemoryIsFreeAndAGpuLeftEmptyIsIdle) {
  const auto out = without_processes_of(external_on_gpus(), {ExternalBackfill{.name = "llm", .pids = {100, 101}}});
  EXPECT_TRUE(out.devices[0].processes.empty());
  EXPECT_EQ(*out.devices[0].sample.mem_free_bytes, 30u);
  EXPECT_EQ(*out.devices[0].sample.mem_used_bytes, 10u) << "the context NVML gives no process keeps its memory";
  EXPECT_EQ(*out.devices[0].sample.util_gpu_pct, 0u);
  ASSERT_EQ(out.devices[1].processes.size(), 1u);
  EXPECT_EQ(out.devices[1].processes[0].pid, 201u) << "someone else's process stays";
  EXPECT_EQ(*out.devices[1].sample.mem_free_bytes, 35u);
  EXPECT_EQ(*out.devices[1].sample.util_gpu_pct, 90u) << "what is left may keep it busy";
  EXPECT_EQ(out.devices[2].processes.size(), 1u);
  EXPECT_EQ(gpus_of(external_on_gpus(), ExternalBackfill{.name = "llm", .pids = {100, 101}}),
            (std::set<std::string>{"GPU-0", "GPU-1"}));
}

TEST(Preemption, RoomInBackfillCountsAnExternalServerThatWouldUnloadAndNamesIt) {
  const auto s = external_on_gpus();
  const std::vector<ExternalBackfill> llm = {ExternalBackfill{.name = "llm", .pids = {100, 101}}};
  const auto one = room_in_backfill(s, {}, by_id({}), PickRequest{.n = 1}, llm);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->chosen, (std::vector<unsigned>{0}));
  EXPECT_TRUE(one->backfill.empty());
  EXPECT_EQ(one->external, (std::vector<std::string>{"llm"}));
  EXPECT_EQ(yield_reason(*one), "waiting for backfill server llm to unload GPU 0");
  EXPECT_FALSE(room_in_backfill(s, {}, by_id({}), PickRequest{.n = 2}, llm))
      << "GPU 1 keeps someone else's process after the unload";
  EXPECT_FALSE(room_in_backfill(s, {}, by_id({}), PickRequest{.n = 1}, {ExternalBackfill{.name = "far", .pids = {9}}}))
      << "a server with no process on a GPU frees none";
  EXPECT_FALSE(room_in_backfill(s, {{"GPU-0", "lease 3"}}, by_id({}), PickRequest{.n = 1}, llm)) << "leased";
  // With a backfill job on GPU 2 as well, both are named.
  auto both = s;
  both.devices[2].processes[0].pid = 300;
  const auto jobs = by_id({holding(7, 1, JobState::Running, {"GPU-2"}, true)});
  const auto two = room_in_backfill(both, busy_gpus({}, jobs), jobs, PickRequest{.n = 2}, llm);
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->chosen, (std::vector<unsigned>{0, 2}));
  EXPECT_EQ(yield_reason(*two), "waiting for backfill job 7 to yield and backfill server llm to unload GPUs 0,2");
}

TEST(Fairness, RunningJobsCountUpToNowOnTopOfTheEndedOnes) {
  auto jobs = by_id({holding(1, 1000, JobState::Running, {"GPU-0", "GPU-1"}), holding(2, 1001, JobState::Queued, {})});
  jobs.at(1).started_ms = 10'000;
  const auto used = usage_until({{1000, 500}, {1002, 7}}, jobs, 13'000);
  EXPECT_EQ(used.at(1000), 500 + 2 * 3'000);
  EXPECT_EQ(used.at(1002), 7);
  EXPECT_FALSE(used.contains(1001)) << "a queued job has used nothing";
}

TEST(HeldForGood, AMigDeviceIsNotABoard) {
  auto jobs = by_id({holding(1, 1, JobState::Running, {"GPU-0"}), holding(2, 1, JobState::Running, {"MIG-a"}),
                     holding(3, 1, JobState::Running, {"MIG-b"})});
  EXPECT_EQ(gpus_held_for_good(jobs), 1U) << "only whole GPUs count against the boards seen";
}

TEST(NoRoom, ARequestForNoLessThanOneThatFoundNoRoomFindsNoneEither) {
  const std::vector<PickRequest> none = {PickRequest{.n = 2, .min_free_bytes = 100, .max_util_pct = 50}};
  EXPECT_TRUE(no_room_for(PickRequest{.n = 2, .min_free_bytes = 100, .max_util_pct = 50}, none));
  EXPECT_TRUE(no_room_for(PickRequest{.n = 3, .min_free_bytes = 200, .max_util_pct = 10}, none));
  EXPECT_FALSE(no_room_for(PickRequest{.n = 1, .min_free_bytes = 100, .max_util_pct = 50}, none));
  EXPECT_FALSE(no_room_for(PickRequest{.n = 2, .min_free_bytes = 50, .max_util_pct = 50}, none));
  EXPECT_FALSE(no_room_for(PickRequest{.n = 2, .min_free_bytes = 100, .max_util_pct = 90}, none));
  EXPECT_FALSE(no_room_for(PickRequest{}, {}));
  // GPUs and MIG devices are different things: neither says anything of the other, nor a profile of another.
  EXPECT_FALSE(no_room_for(PickRequest{.n = 2, .min_free_bytes = 100, .max_util_pct = 50, .mig = std::string()}, none));
  const std::vector<PickRequest> no_slice = {PickRequest{.mig = std::string("1g.18gb")}};
  EXPECT_TRUE(no_room_for(PickRequest{.mig = std::string("1g.18gb")}, no_slice));
  EXPECT_FALSE(no_room_for(PickRequest{.mig = std::string("2g.35gb")}, no_slice));
  EXPECT_FALSE(no_room_for(PickRequest{.n = 4}, no_slice));
}

TEST(Backfill, AGpuIsIdleLongEnoughOnlyOnceItHasBeenIdleThatLong) {
  EXPECT_FALSE(idle_for(0, 1'000'000, 1000)) << "0: not idle";
  EXPECT_FALSE(idle_for(500'000, 500'999, 1000));
  EXPECT_TRUE(idle_for(500'000, 501'000, 1000));
}

TEST(JobJson, SpecRoundTripsWithoutTheEnvironment) {
  Job j;
  j.path = "/usr/bin/python3";
  j.argv = {"python3", "train.py", "--lr", "3e-4"};
  j.env = {"HF_TOKEN=secret"};
  j.cwd = "/home/alice";
  j.gid = 1000;
  j.request = PickRequest{.n = 2, .min_free_bytes = 1ULL << 34, .max_util_pct = 10};
  j.time_ms = 7200000;
  j.grace_ms = 30000;
  j.backfill = true;
  j.uuids = true;
  j.detach = true;
  const auto spec = spec_json(j);
  EXPECT_EQ(spec.dump().find("secret"), std::string::npos) << "the environment stays out of the store";
  Job back;
  apply_spec_json(spec, back);
  EXPECT_EQ(back.path, j.path);
  EXPECT_EQ(back.argv, j.argv);
  EXPECT_TRUE(back.env.empty());
  EXPECT_EQ(back.cwd, j.cwd);
  EXPECT_EQ(back.gid, j.gid);
  EXPECT_EQ(back.request.n, 2u);
  EXPECT_EQ(back.request.min_free_bytes, 1ULL << 34);
  EXPECT_EQ(back.request.max_util_pct, 10u);
  EXPECT_EQ(back.time_ms, j.time_ms);
  EXPECT_EQ(back.grace_ms, 30000);
  EXPECT_TRUE(back.backfill && back.uuids && back.detach);
  EXPECT_EQ(back.request.mig, std::nullopt);
  // A MIG request comes back as one: a restarted agent gives it a MIG device, not a GPU.
  j.request = PickRequest{.mig = std::string("1g.18gb")};
  apply_spec_json(spec_json(j), back);
  EXPECT_EQ(back.request.mig, "1g.18gb");
  j.request = PickRequest{.mig = std::string()};
  apply_spec_json(spec_json(j), back);
  EXPECT_EQ(back.request.mig, "");
}

TEST(JobJson, StatesNameThemselvesAndEnd) {
  for (auto s : {JobState::Queued, JobState::Running, JobState::Stopping, JobState::Done, JobState::Cancelled,
                 JobState::Failed, JobState::Lost, JobState::Active, JobState::Released, JobState::Expired,
                 JobState::Reclaimed}) {
    EXPECT_EQ(job_state_from(to_string(s)), s);
  }
  EXPECT_FALSE(job_state_from("bogus"));
  EXPECT_FALSE(has_ended(JobState::Queued));
  EXPECT_FALSE(has_ended(JobState::Stopping));
  EXPECT_FALSE(has_ended(JobState::Active));
  EXPECT_TRUE(has_ended(JobState::Done));
  EXPECT_TRUE(has_ended(JobState::Reclaimed));
  Job j;
  j.id = 3;
  j.exit_code = 137;
  const auto out = to_json(j);
  EXPECT_EQ(out["exit_code"], 137);
  EXPECT_TRUE(out["started_unix_ms"].is_null());
  EXPECT_FALSE(out.contains("env"));
}

}  // namespace
}  // namespace tarmac::sched
