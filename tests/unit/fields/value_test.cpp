#include "tarmac/fields/value.hpp"

#include <gtest/gtest.h>

namespace tarmac::fields {
namespace {

TEST(Value, IntegersCarryTheirUnitAfterASpace) {
  EXPECT_EQ(Value::integer(38900).to_csv("MiB"), "38900 MiB");
  EXPECT_EQ(Value::integer(96).to_csv("%"), "96 %");
  EXPECT_EQ(Value::integer(68).to_csv(""), "68");
}

TEST(Value, DecimalsHaveTwoPlaces) {
  EXPECT_EQ(Value::decimal(250.0).to_csv("W"), "250.00 W");
  EXPECT_EQ(Value::decimal(69.625).to_csv(""), "69.62");  // as printf's %.2f rounds to even
  EXPECT_EQ(Value::decimal(0.004).to_csv("W"), "0.00 W");
}

TEST(Value, HexIsUpperCaseAndZeroPadded) {
  EXPECT_EQ(Value::hex(0x1, 16).to_csv(""), "0x0000000000000001");
  EXPECT_EQ(Value::hex(0x1ff, 16).to_csv(""), "0x00000000000001FF");
  EXPECT_EQ(Value::hex(0x20b010de, 8).to_csv(""), "0x20B010DE");
  EXPECT_EQ(Value::hex(7, 2).to_csv(""), "0x07");
}

TEST(Value, FlagsPrintTheFieldsWords) {
  EXPECT_EQ(Value::flag(true, "Enabled", "Disabled").to_csv(""), "Enabled");
  EXPECT_EQ(Value::flag(false, "Active", "Not Active").to_csv(""), "Not Active");
  EXPECT_TRUE(Value::flag(true, "Yes", "No").on());
}

TEST(Value, MarkersNeverCarryUnits) {
  EXPECT_EQ(Value::missing(Marker::NotSupported).to_csv("MiB"), "[Not Supported]");
  EXPECT_EQ(Value::missing(Marker::NotAvailable).to_csv("%"), "[N/A]");
  EXPECT_EQ(Value::missing(Marker::GpuLost).to_csv("W"), "[GPU is lost]");
  EXPECT_EQ(Value::missing(Marker::Error, "Timeout").to_csv("MHz"), "[Timeout]");
  EXPECT_EQ(Value::missing(Marker::Error).to_csv(""), "[Unknown Error]");
}

TEST(Value, TextIsPrintedAsIs) {
  EXPECT_EQ(Value::text("NVIDIA A100-SXM4-40GB").to_csv(""), "NVIDIA A100-SXM4-40GB");
}

}  // namespace
}  // namespace tarmac::fields
