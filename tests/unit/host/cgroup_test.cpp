#include "tarmac/host/cgroup.hpp"

#include <gtest/gtest.h>

#include <string>

#include "fake_proc.hpp"

namespace tarmac::host {
namespace {

using test_support::kContainerId;
const std::string kPod = "0a1b2c3d-4e5f-6789-abcd-ef0123456789";

TEST(ParseCgroup, DockerV1CgroupfsDriver) {
  const std::string text = "12:memory:/docker/" + kContainerId + "\n11:cpu,cpuacct:/docker/" + kContainerId +
                           "\n1:name=systemd:/docker/" + kContainerId + "\n0::/\n";
  const auto ref = parse_cgroup(text);
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "docker");
  EXPECT_EQ(ref->id, kContainerId);
  EXPECT_FALSE(ref->pod_uid);
}

TEST(ParseCgroup, DockerV1ContainerOnlyInLaterHierarchy) {
  // Some v1 hierarchies stay at the root; the container line further down still counts.
  const std::string text = "13:rdma:/\n12:memory:/docker/" + kContainerId + "\n";
  const auto ref = parse_cgroup(text);
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->id, kContainerId);
}

TEST(ParseCgroup, DockerV2SystemdDriver) {
  const auto ref = parse_cgroup("0::/system.slice/docker-" + kContainerId + ".scope\n");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "docker");
  EXPECT_EQ(ref->id, kContainerId);
}

TEST(ParseCgroup, DockerServiceItselfIsNotAContainer) {
  EXPECT_FALSE(parse_cgroup("0::/system.slice/docker.service\n"));
  EXPECT_FALSE(parse_cgroup("0::/system.slice/docker-notanid.scope\n"));
}

TEST(ParseCgroup, PodmanRootless) {
  const auto ref = parse_cgroup("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + kContainerId + ".scope\n");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "podman");
  EXPECT_EQ(ref->id, kContainerId);
}

TEST(ParseCgroup, PodmanRootfulWithContainerSubgroup) {
  const auto ref = parse_cgroup("0::/machine.slice/libpod-" + kContainerId + ".scope/container\n");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "podman");
  EXPECT_EQ(ref->id, kContainerId);
}

TEST(ParseCgroup, PodmanConmonIsNotTheContainer) {
  EXPECT_FALSE(parse_cgroup("0::/machine.slice/libpod-conmon-" + kContainerId + ".scope\n"));
}

TEST(ParseCgroup, KubernetesSystemdDriverContainerd) {
  const std::string text =
      "0::/kubepods.slice/kubepods-burstable.slice/"
      "kubepods-burstable-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/cri-containerd-" +
      kContainerId + ".scope\n";
  const auto ref = parse_cgroup(text);
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "containerd");
  EXPECT_EQ(ref->id, kContainerId);
  ASSERT_TRUE(ref->pod_uid);
  EXPECT_EQ(*ref->pod_uid, kPod);  // systemd's '_' turned back into the uid's '-'
}

TEST(ParseCgroup, KubernetesGuaranteedQosHasNoQosSlice) {
  const auto ref = parse_cgroup("0::/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/cri-containerd-" +
                                kContainerId + ".scope\n");
  ASSERT_TRUE(ref);
  ASSERT_TRUE(ref->pod_uid);
  EXPECT_EQ(*ref->pod_uid, kPod);
}

TEST(ParseCgroup, KubernetesCgroupfsDriver) {
  const auto ref = parse_cgroup("11:memory:/kubepods/besteffort/pod" + kPod + "/" + kContainerId + "\n");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "kubernetes");
  EXPECT_EQ(ref->id, kContainerId);
  ASSERT_TRUE(ref->pod_uid);
  EXPECT_EQ(*ref->pod_uid, kPod);
}

TEST(ParseCgroup, KubernetesWithDockerShim) {
  const auto ref = parse_cgroup(
      "1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/"
      "kubepods-besteffort-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/docker-" +
      kContainerId + ".scope\n");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "docker");
  ASSERT_TRUE(ref->pod_uid);
  EXPECT_EQ(*ref->pod_uid, kPod);
}

TEST(ParseCgroup, KubernetesPodWithoutContainerStillNamesThePod) {
  const auto ref = parse_cgroup("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice\n");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "kubernetes");
  EXPECT_EQ(ref->id, "");
  ASSERT_TRUE(ref->pod_uid);
  EXPECT_EQ(*ref->pod_uid, kPod);
}

TEST(ParseCgroup, CriO) {
  const auto ref = parse_cgroup(
      "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/crio-" +
      kContainerId + ".scope\n");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "cri-o");
  EXPECT_EQ(ref->id, kContainerId);
  ASSERT_TRUE(ref->pod_uid);
  EXPECT_EQ(*ref->pod_uid, kPod);
}

TEST(ParseCgroup, CriOOutsideKubepodsHasNoPod) {
  const auto ref = parse_cgroup("0::/machine.slice/crio-" + kContainerId + ".scope\n");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "cri-o");
  EXPECT_FALSE(ref->pod_uid);
}

TEST(ParseCgroup, LxcPayload) {
  const auto ref = parse_cgroup("0::/lxc.payload.trainer01/system.slice/ssh.service\n");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "lxc");
  EXPECT_EQ(ref->id, "trainer01");
}

TEST(ParseCgroup, LxcMonitorIsNotTheContainer) {
  EXPECT_FALSE(parse_cgroup("0::/lxc.monitor.trainer01\n"));
}

TEST(ParseCgroup, LxcOldV1Layout) {
  const auto ref = parse_cgroup("4:memory:/lxc/trainer01\n");
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->runtime, "lxc");
  EXPECT_EQ(ref->id, "trainer01");
}

TEST(ParseCgroup, HostProcessesHaveNoContainer) {
  EXPECT_FALSE(parse_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n"));
  EXPECT_FALSE(parse_cgroup("0::/init.scope\n"));
  EXPECT_FALSE(parse_cgroup("0::/\n"));
  EXPECT_FALSE(parse_cgroup("0::/system.slice/slurmstepd.scope/job_12345/step_0/user/task_0\n"));
  EXPECT_FALSE(parse_cgroup(""));
  EXPECT_FALSE(parse_cgroup("garbage without colons\n"));
}

TEST(ParseSlurmJob, V2Slurmstepd) {
  EXPECT_EQ(parse_slurm_job_from_cgroup("0::/system.slice/slurmstepd.scope/job_12345/step_0/user/task_0\n"), "12345");
}

TEST(ParseSlurmJob, V2MultipleSlurmdNodeScope) {
  EXPECT_EQ(parse_slurm_job_from_cgroup("0::/system.slice/node07_slurmstepd.scope/job_88/step_batch/user/task_0\n"), "88");
}

TEST(ParseSlurmJob, V1Layout) {
  const std::string text =
      "12:memory:/slurm/uid_1000/job_12345/step_batch\n"
      "5:devices:/slurm/uid_1000/job_12345/step_batch\n"
      "1:name=systemd:/system.slice/slurmd.service\n";
  EXPECT_EQ(parse_slurm_job_from_cgroup(text), "12345");
}

TEST(ParseSlurmJob, NoJob) {
  EXPECT_FALSE(parse_slurm_job_from_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n"));
  EXPECT_FALSE(parse_slurm_job_from_cgroup("0::/system.slice/slurmd.service\n"));
  // A job_ folder that is not under a slurm cgroup belongs to something else.
  EXPECT_FALSE(parse_slurm_job_from_cgroup("0::/system.slice/batch/job_42\n"));
  EXPECT_FALSE(parse_slurm_job_from_cgroup("0::/system.slice/slurmstepd.scope/job_abc/step_0\n"));
  EXPECT_FALSE(parse_slurm_job_from_cgroup("0::/system.slice/slurmstepd.scope/job_/step_0\n"));
}

}  // namespace
}  // namespace tarmac::host
