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
