#include "tarmac/gpu/cuda_visible.hpp"

#include <gtest/gtest.h>

namespace tarmac::gpu {
namespace {

std::vector<Device> box(const std::vector<std::string>& capabilities) {
  std::vector<Device> out;
  for (unsigned i = 0; i < capabilities.size(); ++i) {
    Device d;
    d.id.index = i;
    d.id.uuid = "GPU-" + std::to_string(i) + std::to_string(i) + "aa0000-1111-2222-3333-444455556666";
    d.id.cuda_capability = capabilities[i];
    out.push_back(d);
  }
  return out;
}

using V = std::vector<unsigned>;

TEST(CudaVisible, UnsetShowsEveryGpu) {
  EXPECT_EQ(cuda_view(box({"8.0", "8.0"}), std::nullopt, std::nullopt).gpu_of_cuda, (V{0, 1}));
}

TEST(CudaVisible, IndicesAndUuidPrefixes) {
  const auto d = box({"8.0", "8.0", "8.0", "8.0"});
  EXPECT_EQ(cuda_view(d, "1,3", "PCI_BUS_ID").gpu_of_cuda, (V{1, 3}));
  EXPECT_EQ(cuda_view(d, "GPU-22aa,0", "PCI_BUS_ID").gpu_of_cuda, (V{2, 0}));
  EXPECT_EQ(cuda_view(d, "33aa", "PCI_BUS_ID").gpu_of_cuda, (V{3}));
}

TEST(CudaVisible, AnInvalidEntryEndsTheListAsCudaDoes) {
  const auto d = box({"8.0", "8.0", "8.0"});
  auto v = cuda_view(d, "0,7,1", "PCI_BUS_ID");
  EXPECT_EQ(v.gpu_of_cuda, (V{0}));
  ASSERT_TRUE(v.problem);
  EXPECT_NE(v.problem->find("'7' matches no GPU"), std::string::npos);
  v = cuda_view(d, "1,1", "PCI_BUS_ID");
  EXPECT_EQ(v.gpu_of_cuda, (V{1}));
  EXPECT_NE(v.problem->find("repeats"), std::string::npos);
  v = cuda_view(d, "", std::nullopt);  // set but empty: no GPU at all, and that is deliberate
  EXPECT_TRUE(v.gpu_of_cuda.empty());
  EXPECT_FALSE(v.problem);
}

TEST(CudaVisible, FastestFirstPutsNewerGpusFirstOnMixedBoxes) {
  // GPU 0 is an older card: CUDA's default order numbers the H100s first.
  const auto d = box({"7.5", "9.0", "9.0"});
  EXPECT_EQ(cuda_view(d, std::nullopt, std::nullopt).gpu_of_cuda, (V{1, 2, 0}));
  EXPECT_EQ(cuda_view(d, "0", std::nullopt).gpu_of_cuda, (V{1}));
  EXPECT_EQ(cuda_view(d, "0", "PCI_BUS_ID").gpu_of_cuda, (V{0}));
  EXPECT_TRUE(cuda_view(d, std::nullopt, "SLOWEST").problem);
}

TEST(CudaVisible, AGpuMissingFromTheSnapshotShiftsNothing) {
  // NVML refused GPU 1's handle: the snapshot holds GPUs 0, 2 and 3. The enumeration reads each
  // device where it is, not at the place its index would have (GPU 3 was read past the end).
  auto d = box({"8.0", "7.5", "9.0", "9.0"});
  d.erase(d.begin() + 1);
  EXPECT_EQ(cuda_view(d, std::nullopt, "PCI_BUS_ID").gpu_of_cuda, (V{0, 2, 3}));
  EXPECT_EQ(cuda_view(d, std::nullopt, std::nullopt).gpu_of_cuda, (V{2, 3, 0}));
  EXPECT_EQ(cuda_view(d, "1", "PCI_BUS_ID").gpu_of_cuda, (V{2}));
  std::swap(d[0], d[2]);  // in whatever order they came
  EXPECT_EQ(cuda_view(d, std::nullopt, "PCI_BUS_ID").gpu_of_cuda, (V{0, 2, 3}));
}

}  // namespace
}  // namespace tarmac::gpu

namespace tarmac::gpu {
namespace {

// Three GPUs, the middle one in MIG mode with two MIG devices.
std::vector<Device> mig_box() {
  auto devices = box({"9.0", "9.0", "9.0"});
  devices[1].modes.mig_mode_current = true;
  for (unsigned k = 0; k < 2; ++k) {
    MigDevice m;
    m.index = k;
    m.uuid = "MIG-aaaa000" + std::to_string(k) + "-0000-5000-8000-000000000000";
    devices[1].mig.push_back(m);
  }
  return devices;
}

TEST(CudaVisibleMig, IndicesSkipTheBoardInMigModeAndAMigUuidNamesOneDevice) {
  const auto d = mig_box();
  EXPECT_EQ(cuda_view(d, std::nullopt, std::string("PCI_BUS_ID")).gpu_of_cuda, (std::vector<unsigned>{0, 2}));
  EXPECT_EQ(cuda_view(d, std::string("1"), std::string("PCI_BUS_ID")).gpu_of_cuda, std::vector<unsigned>{2});
  const auto one = cuda_view(d, std::string("MIG-aaaa0001"), std::nullopt);
  EXPECT_EQ(one.gpu_of_cuda, std::vector<unsigned>{1});
  EXPECT_EQ(one.mig_of_cuda, (std::vector<std::optional<unsigned>>{1U}));
  EXPECT_EQ(one.mig_issue, MigIssue::None);
  // A trailing comma is no second device; a bare "MIG-" names none.
  EXPECT_EQ(cuda_view(d, std::string("MIG-aaaa0001,"), std::nullopt).mig_issue, MigIssue::None);
  EXPECT_EQ(cuda_view(d, std::string("MIG-"), std::nullopt).mig_issue, MigIssue::None);
  EXPECT_TRUE(cuda_view(d, std::string("MIG-"), std::nullopt).gpu_of_cuda.empty());
  EXPECT_EQ(cuda_view(d, std::string("MIG-aaaa0000,0"), std::nullopt).mig_issue, MigIssue::SecondMigDevice);
  EXPECT_EQ(cuda_view(d, std::string("0,MIG-aaaa0000"), std::nullopt).mig_issue, MigIssue::SecondMigDevice);
  EXPECT_EQ(cuda_view(d, std::string("MIG-ffff"), std::nullopt).mig_issue, MigIssue::NoSuchMigDevice);
  EXPECT_EQ(cuda_view(d, std::string("MIG-aaaa"), std::nullopt).mig_issue, MigIssue::NoSuchMigDevice);  // ambiguous
  const auto whole = cuda_view(d, std::string("GPU-1"), std::nullopt);
  EXPECT_EQ(whole.mig_issue, MigIssue::WholeGpuInMigMode);
  EXPECT_EQ(whole.mig_gpu, 1U);
}

}  // namespace
}  // namespace tarmac::gpu
