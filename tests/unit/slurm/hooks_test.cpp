#include "tarmac/slurm/hooks.hpp"

#include <gtest/gtest.h>

namespace tarmac::slurm {
namespace {

using Env = std::map<std::string, std::string>;

TEST(JobEnv, FromSlurmdsEnvironment) {
  auto job = read_job_env({{"SLURM_JOB_ID", "77"}, {"SLURM_JOB_UID", "1001"}, {"SLURM_JOB_USER", "alice"},
                           {"SLURM_JOB_GPUS", "2,0,2"}, {"CUDA_VISIBLE_DEVICES", "5"},
                           {"SLURM_JOB_PARTITION", "gpu-long"}});
  ASSERT_TRUE(job.ok()) << job.error().message;
  EXPECT_EQ(job->job_id, "77");
  EXPECT_EQ(job->uid, 1001u);
  EXPECT_EQ(job->user, "alice");
  EXPECT_EQ(job->partition, "gpu-long");
  EXPECT_EQ(job->gpus, (std::vector<unsigned>{2, 0})) << "SLURM_JOB_GPUS first, each once, in its order";
  auto cvd = read_job_env({{"SLURM_JOB_ID", "78"}, {"SLURM_JOB_UID", "0"}, {"CUDA_VISIBLE_DEVICES", "1"}});
  ASSERT_TRUE(cvd.ok());
  EXPECT_EQ(cvd->gpus, std::vector<unsigned>{1});
  EXPECT_EQ(cvd->user, "0") << "no SLURM_JOB_USER: the uid";
  auto none = read_job_env({{"SLURM_JOB_ID", "79"}, {"SLURM_JOB_UID", "5"}});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->gpus.empty());
}

TEST(JobEnv, RefusesWhatIsNotSlurmds) {
  EXPECT_FALSE(read_job_env({}).ok());
  EXPECT_FALSE(read_job_env({{"SLURM_JOB_ID", "7 7"}, {"SLURM_JOB_UID", "1"}}).ok());
  EXPECT_FALSE(read_job_env({{"SLURM_JOB_ID", "../x"}, {"SLURM_JOB_UID", "1"}}).ok());
  EXPECT_FALSE(read_job_env({{"SLURM_JOB_ID", "7"}}).ok());
  EXPECT_FALSE(read_job_env({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_UID", "-1"}}).ok());
  const auto uuids = read_job_env({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_UID", "1"}, {"SLURM_JOB_GPUS", "GPU-abc"}});
  ASSERT_FALSE(uuids.ok());
  EXPECT_NE(uuids.error().message.find("SLURM_JOB_GPUS"), std::string::npos);
  EXPECT_FALSE(read_job_env({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_UID", "1"}, {"SLURM_JOB_GPUS", "99999"}}).ok());
  auto odd = read_job_env({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_UID", "1"}, {"SLURM_JOB_USER", "a b\x1b[2J"},
                           {"SLURM_JOB_PARTITION", "p\nuser=root"}});
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->partition, "");
  EXPECT_EQ(odd->user, "1") << "a name that is not a plain word is not written into a lease";
}

gpu::GpuProcess process(unsigned pid, unsigned uid, std::optional<std::string> job) {
  gpu::GpuProcess p;
  p.pid = pid;
  p.used_mem_bytes = 2ULL << 30;
  p.host.uid = uid;
  p.host.user = uid == 0 ? "root" : "alice";
  p.host.command_line = "/usr/bin/python3 train.py --token secret";
  p.host.slurm_job_id = std::move(job);
  return p;
}

gpu::Device device(unsigned index) {
  gpu::Device d;
  d.id.index = index;
  d.id.uuid = "GPU-" + std::to_string(index);
  return d;
}

TEST(Unfit, LostFaultyAndHeldByNoJob) {
  const MappedJobs mapped{"12"};
  const auto unfit_reason = [&mapped](const gpu::Device& dev, const std::string& job) {
    return slurm::unfit_reason(dev, job, mapped);
  };
  auto d = device(1);
  EXPECT_FALSE(unfit_reason(d, "77"));
  d.lost = "GPU is lost (Xid 79)";
  EXPECT_EQ(unfit_reason(d, "77"), "GPU 1 is lost: GPU is lost (Xid 79)");
  d = device(1);
  d.processes.push_back(process(4242, 1001, std::nullopt));
  EXPECT_EQ(unfit_reason(d, "77"), "GPU 1: 2.0 GiB held by pid 4242 (alice, python3) of no Slurm job");
  d.processes[0].host.slurm_job_id = "12";
  EXPECT_FALSE(unfit_reason(d, "77")) << "another mapped job's process: a shared GPU, as configured";
  d.processes[0].host.slurm_job_id = "555";
  EXPECT_EQ(unfit_reason(d, "77"),
            "GPU 1: 2.0 GiB held by pid 4242 (alice, python3), which claims Slurm job 555 that no prolog mapped")
      << "a claim anyone can make (SLURM_JOB_ID=555) is not believed";
  d.processes[0].host.slurm_job_id.reset();
  d.processes[0].host.unread = "its environment could not be read in time";
  EXPECT_NE(unfit_reason(d, "77")->find("whose job cannot be read"), std::string::npos);
  EXPECT_EQ(unfit_reason(d, "77")->find("secret"), std::string::npos) << "no arguments in a drain reason";
}

TEST(Leftovers, OnlyTheJobsUsersOfThisJobOrNone) {
  auto d = device(0);
  d.processes = {process(1, 1001, "77"), process(2, 1001, std::nullopt), process(3, 1001, "78"),
                 process(4, 1002, "77"), process(5, 1002, std::nullopt), process(7, 1001, "999")};
  auto unknown = process(6, 1001, std::nullopt);
  unknown.host.unread = "timed out";
  d.processes.push_back(unknown);
  JobEnv job;
  job.job_id = "77";
  job.uid = 1001;
  const MappedJobs mapped{"77", "78"};
  const auto pids = [&](bool job_was_mapped, const JobEnv& j) {
    std::vector<unsigned> out;
    for (const auto* p : leftovers(d, j, mapped, job_was_mapped)) out.push_back(p->pid);
    return out;
  };
  EXPECT_EQ(pids(true, job), (std::vector<unsigned>{1, 2, 7})) << "a claim of an unmapped job is no job";
  EXPECT_EQ(pids(false, job), std::vector<unsigned>{1}) << "after a failed prolog: only the job's own";
  JobEnv root_job = job;
  root_job.uid = 0;
  d.processes.push_back(process(8, 0, std::nullopt));
  d.processes.push_back(process(9, 0, "77"));
  EXPECT_EQ(pids(true, root_job), std::vector<unsigned>{9}) << "root's processes of no job are no job's leftovers";
}

}  // namespace
}  // namespace tarmac::slurm
