// CUDA's device numbering: FASTEST_FIRST versus PCI_BUS_ID, indices, UUIDs and prefixes, and
// enumeration stopping at the first bad entry.
#include <gtest/gtest.h>

#include "cuda_visible.hpp"
#include "scenario_parser.hpp"
#include "test_support.hpp"

namespace tarmac::sim::test {
namespace {

using V = std::vector<unsigned>;

TEST(CudaVisible, FastestFirstIsCudasDefaultOrder) {
  const Scenario s = mixed_models();
  EXPECT_EQ(cuda_order(s, DeviceOrder::FastestFirst), (V{1, 0, 2}));
  EXPECT_EQ(cuda_order(s, DeviceOrder::PciBusId), (V{0, 1, 2}));
  EXPECT_EQ(parse_device_order(std::nullopt), DeviceOrder::FastestFirst);
  EXPECT_EQ(parse_device_order("PCI_BUS_ID"), DeviceOrder::PciBusId);
  EXPECT_EQ(parse_device_order("FASTEST_FIRST"), DeviceOrder::FastestFirst);
}

TEST(CudaVisible, IndicesFollowTheOrder) {
  const Scenario s = mixed_models();
  EXPECT_EQ(visible_gpus(s, std::nullopt, DeviceOrder::FastestFirst), (V{1, 0, 2}));
  EXPECT_EQ(visible_gpus(s, "0", DeviceOrder::FastestFirst), (V{1}));
  EXPECT_EQ(visible_gpus(s, "0", DeviceOrder::PciBusId), (V{0}));
  EXPECT_EQ(visible_gpus(s, "2,0", DeviceOrder::PciBusId), (V{2, 0}));
}

TEST(CudaVisible, UuidsAndUniquePrefixes) {
  const Scenario s = mixed_models();
  EXPECT_EQ(visible_gpus(s, "GPU-bbbb2222-2222-3333-4444-555555555555", DeviceOrder::FastestFirst), (V{2}));
  EXPECT_EQ(visible_gpus(s, "GPU-aaaa", DeviceOrder::FastestFirst), (V{0}));
  EXPECT_TRUE(visible_gpus(s, "GPU-bbbb", DeviceOrder::FastestFirst).empty());  // ambiguous
  EXPECT_EQ(visible_gpus(s, "GPU-bbbb1,1", DeviceOrder::PciBusId), (V{1}));      // a repeat stops it
}

TEST(CudaVisible, EnumerationStopsAtTheFirstInvalidEntry) {
  const Scenario s = mixed_models();
  EXPECT_EQ(visible_gpus(s, "2,7,0", DeviceOrder::PciBusId), (V{2}));
  EXPECT_EQ(visible_gpus(s, "1,MIG-xyz,0", DeviceOrder::PciBusId), (V{1}));
  EXPECT_TRUE(visible_gpus(s, "", DeviceOrder::PciBusId).empty());
  EXPECT_TRUE(visible_gpus(s, "-1", DeviceOrder::PciBusId).empty());
}

}  // namespace
}  // namespace tarmac::sim::test
