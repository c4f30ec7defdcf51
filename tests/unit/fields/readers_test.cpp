#include "tarmac/fields/readers.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>

namespace tarmac::fields::detail {
namespace {

TEST(PciBusId, Spellings) {
  auto a = detail::parse_pci_bus_id("00000001:4E:1F.7");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->domain, 1U);
  EXPECT_EQ(a->bus, 0x4EU);
  EXPECT_EQ(a->device, 0x1FU);
  EXPECT_EQ(a->function, 7U);
  EXPECT_TRUE(detail::parse_pci_bus_id("07:00.0"));
  EXPECT_FALSE(detail::parse_pci_bus_id("07:00"));
  EXPECT_FALSE(detail::parse_pci_bus_id("1:2:3:4.0"));
  EXPECT_FALSE(detail::parse_pci_bus_id("0000:100:00.0"));
}

TEST(Readers, MiBRoundDownAndWattsKeepMilliwatts) {
  EXPECT_EQ(mib_or(std::uint64_t{40960} * 1024 * 1024 - 1).number(), 40959U);
  EXPECT_DOUBLE_EQ(watts_or(250123U).decimal_number(), 250.123);
  EXPECT_EQ(mib_or(std::nullopt).marker(), Marker::NotSupported);
  EXPECT_EQ(enabled_or(std::nullopt, Marker::NotAvailable).marker(), Marker::NotAvailable);
}

TEST(Readers, ReasonBitNeedsTheActiveMaskAndSupport) {
  EXPECT_EQ(reason_bit(0x4, 0x1FF, 0x4).to_csv(""), "Active");
  EXPECT_EQ(reason_bit(0x0, 0x1FF, 0x4).to_csv(""), "Not Active");
  EXPECT_EQ(reason_bit(0x0, 0x7F, 0x80).to_csv(""), "[Not Supported]");
  EXPECT_EQ(reason_bit(std::nullopt, 0x1FF, 0x4).to_csv(""), "[Not Supported]");
  EXPECT_EQ(reason_bit(0x4, std::nullopt, 0x4).to_csv(""), "Active");
}

TEST(Readers, TimestampIsLocalTimeWithMilliseconds) {
  setenv("TZ", "UTC", 1);
  tzset();
  EXPECT_EQ(format_timestamp(1'700'000'000'123LL), "2023/11/14 22:13:20.123");
  EXPECT_EQ(format_timestamp(1'700'000'000'007LL), "2023/11/14 22:13:20.007");
}

}  // namespace
}  // namespace tarmac::fields::detail
