#include "tarmac/fields/select.hpp"

#include <gtest/gtest.h>

namespace tarmac::fields {
namespace {

std::vector<gpu::Device> four_gpus() {
  std::vector<gpu::Device> out(4);
  const char* buses[] = {"00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000001:4E:00.0"};
  for (unsigned i = 0; i < 4; ++i) {
    out[i].id.index = i;
    out[i].id.uuid = "GPU-0000000" + std::to_string(i) + "-aaaa-bbbb-cccc-dddddddddddd";
    out[i].id.serial = "132302000000" + std::to_string(i);
    out[i].id.pci_bus_id = buses[i];
  }
  return out;
}

std::vector<std::size_t> pick(std::string_view ids) {
  auto r = select_devices(ids, four_gpus());
  EXPECT_TRUE(r.ok()) << ids;
  return r.ok() ? *r : std::vector<std::size_t>{};
}

TEST(SelectDevices, ByIndexInIndexOrderOnceAsNvidiaSmi) {
  EXPECT_EQ(pick("0"), (std::vector<std::size_t>{0}));
  EXPECT_EQ(pick("2,0"), (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(pick("1,1"), (std::vector<std::size_t>{1}));
  EXPECT_EQ(pick(" 1"), (std::vector<std::size_t>{1}));
  EXPECT_EQ(pick("01"), (std::vector<std::size_t>{1}));
  EXPECT_EQ(pick("+1"), (std::vector<std::size_t>{1}));
}

TEST(SelectDevices, IdsThatNameNoGpuAreIgnoredWhenAnotherDoes) {
  EXPECT_EQ(pick("9,0"), (std::vector<std::size_t>{0}));
  EXPECT_EQ(pick("0,zz"), (std::vector<std::size_t>{0}));
  EXPECT_EQ(pick("0,"), (std::vector<std::size_t>{0}));
}

TEST(SelectDevices, ByUuidSerialAndBusIdSpellings) {
  EXPECT_EQ(pick("GPU-00000002-aaaa-bbbb-cccc-dddddddddddd"), (std::vector<std::size_t>{2}));
  EXPECT_EQ(pick("1323020000003"), (std::vector<std::size_t>{3}));
  EXPECT_EQ(pick("00000000:0F:00.0"), (std::vector<std::size_t>{1}));
  EXPECT_EQ(pick("0000:0f:00.0"), (std::vector<std::size_t>{1}));
  EXPECT_EQ(pick("47:00.0"), (std::vector<std::size_t>{2}));
  EXPECT_EQ(pick("0001:4E:00.0,0"), (std::vector<std::size_t>{0, 3}));
}

TEST(SelectDevices, UnknownIdsFailWithNvidiaSmisMessage) {
  for (const char* bad : {"4", "-1", " ", "a,,", "1.0", "GPU-nope", "gpu-00000002-aaaa-bbbb-cccc-dddddddddddd", "4E:00.0", "zz:00.0"}) {
    auto r = select_devices(bad, four_gpus());
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().message, kNoDevicesFound);
    EXPECT_EQ(r.error().code, Error::Code::NotFound);
  }
}

TEST(SelectDevices, NoIdAtAllIsAParseError) {
  for (const char* bad : {"", ",", ",,"}) {
    auto r = select_devices(bad, four_gpus());
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().message, kBadDeviceString);
    EXPECT_EQ(r.error().code, Error::Code::Invalid);
  }
  EXPECT_EQ(pick("0,,1"), (std::vector<std::size_t>{0, 1}));
}

}  // namespace
}  // namespace tarmac::fields
