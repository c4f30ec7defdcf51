#include "tarmac/host/pod_map.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace tarmac::host {
namespace {

const std::vector<GpuName> kGpus = {{0, "GPU-aaaa", 0}, {1, "GPU-bbbb", 1}, {2, "GPU-cccc", 4}};

PodDevices gpus_of(std::string pod, std::vector<std::string> ids, std::string resource = "nvidia.com/gpu") {
  return PodDevices{{std::move(pod), "ml", "main"}, std::move(resource), std::move(ids)};
}

TEST(PodMap, ResolvesEveryDevicePluginSpelling) {
  const auto m = map_pod_devices({gpus_of("by-uuid", {"GPU-aaaa"}), gpus_of("replica", {"GPU-bbbb::3"}),
                                  gpus_of("device-file", {"nvidia4"}), gpus_of("gke", {"nvidia1/vgpu2"}),
                                  gpus_of("by-index", {"0"})},
                                 kGpus);
  ASSERT_EQ(m.map.size(), 3U);
  EXPECT_EQ(m.map.at(0), (std::vector<PodRef>{{"by-index", "ml", "main"}, {"by-uuid", "ml", "main"}}));
  EXPECT_EQ(m.map.at(1), (std::vector<PodRef>{{"gke", "ml", "main"}, {"replica", "ml", "main"}}));
  // nvidia4 is the device file of GPU 2 (minor 4), not index 4.
  EXPECT_EQ(m.map.at(2), (std::vector<PodRef>{{"device-file", "ml", "main"}}));
  EXPECT_TRUE(m.unresolved.empty());
}

TEST(PodMap, OnlyNvidiaResourcesAndKnownGpus) {
  const auto m = map_pod_devices({gpus_of("nic", {"GPU-aaaa"}, "example.com/sriov"), gpus_of("gone", {"GPU-ffff", "7"}),
                                  gpus_of("mig", {"MIG-1234"}, "nvidia.com/mig-1g.10gb")},
                                 kGpus);
  EXPECT_TRUE(m.map.empty());
  EXPECT_EQ(m.unresolved, (std::vector<std::string>{"GPU-ffff", "7", "MIG-1234"}));
}

TEST(PodMap, IndicesAreStrictNumbers) {
  const auto m = map_pod_devices({gpus_of("p", {"01", "-1", "1x", "nvidia", "nvidia01", "4294967297"})}, kGpus);
  EXPECT_TRUE(m.map.empty());
  EXPECT_EQ(m.unresolved.size(), 6U);
}

TEST(PodMap, APodAsAJob) { EXPECT_EQ(pod_job({"trainer-0", "ml", "main"}), "pod/ml/trainer-0"); }

TEST(PodMap, WithoutMinorsADeviceFileIsTheIndex) {
  const auto m = map_pod_devices({gpus_of("p", {"nvidia1"})}, {{0, "GPU-a", std::nullopt}, {1, "GPU-b", std::nullopt}});
  EXPECT_EQ(m.map.at(1).front().name, "p");
}

TEST(PodMap, HostileNamesAreDropped) {
  // Label values are escaped where they are written, but a name Kubernetes could never give is not
  // a pod: it is dropped whole rather than shown.
  for (const std::string& bad : std::vector<std::string>{"", "a\"b", "a\nb", "a b", "a{b}", std::string(254, 'a')}) {
    EXPECT_TRUE(map_pod_devices({PodDevices{{bad, "ml", "main"}, "nvidia.com/gpu", {"0"}}}, kGpus).map.empty()) << bad;
    EXPECT_TRUE(map_pod_devices({PodDevices{{"p", bad, "main"}, "nvidia.com/gpu", {"0"}}}, kGpus).map.empty()) << bad;
    EXPECT_TRUE(map_pod_devices({PodDevices{{"p", "ml", bad}, "nvidia.com/gpu", {"0"}}}, kGpus).map.empty()) << bad;
  }
  EXPECT_TRUE(valid_kube_name(std::string(253, 'a')));
}

TEST(PodMap, ASharedGpuListsEachContainerOnceAndIsBounded) {
  std::vector<PodDevices> many;
  for (int i = 0; i < 200; ++i) many.push_back(gpus_of("p" + std::to_string(i), {"GPU-aaaa", "GPU-aaaa::1"}));
  many.push_back(gpus_of("p0", {"GPU-aaaa"}));
  const auto m = map_pod_devices(many, kGpus);
  EXPECT_EQ(m.map.at(0).size(), 64U);
  EXPECT_TRUE(std::is_sorted(m.map.at(0).begin(), m.map.at(0).end()));
  // The same 64 whatever the kubelet's order.
  std::reverse(many.begin(), many.end());
  EXPECT_EQ(map_pod_devices(many, kGpus).map.at(0), m.map.at(0));
}

}  // namespace
}  // namespace tarmac::host
