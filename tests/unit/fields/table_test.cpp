#include "tarmac/fields/table.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "tarmac/util/units.hpp"


namespace tarmac::fields {
namespace {

using util::kMiB;

gpu::Snapshot one_a100() {
  gpu::Snapshot s;
  s.timestamp_unix_ms = 1'700'000'000'123;
  s.driver_version = "535.183.01";
  gpu::Device d;
  d.id.index = 0;
  d.id.name = "NVIDIA A100-SXM4-40GB";
  d.id.uuid = "GPU-12345678-aaaa-bbbb-cccc-dddddddddddd";
  d.id.pci_bus_id = "00000000:07:00.0";
  d.id.pci_device_id = 0x20B010DE;
  d.id.pci_subsystem_id = 0x134F10DE;
  d.id.mem_total_bytes = 40960 * kMiB;
  d.id.power_default_limit_mw = 400000;
  d.id.supported_clock_event_reasons = 0x1FF & ~0x80ULL;  // no power brake
  d.modes.persistence_mode = true;
  d.modes.compute_mode = "Default";
  d.modes.power_limit_mw = 400000;
  d.sample.mem_used_bytes = 38900 * kMiB + 12345;
  d.sample.util_gpu_pct = 96;
  d.sample.temp_c = 68;
  d.sample.power_mw = 250123;
  d.sample.clock_sm_mhz = 1410;
  d.sample.pstate = 0;
  d.sample.clock_event_reasons = 0x4;  // SW power cap
  d.sample.retired_pages_pending = false;
  s.devices.push_back(d);
  return s;
}

std::string csv(std::string_view field, const gpu::Snapshot& s, bool units = true) {
  const FieldSpec* f = find_field(field);
  EXPECT_NE(f, nullptr) << field;
  if (f == nullptr) return {};
  const ReadContext ctx{s, s.devices.at(0), s.devices.size()};
  return read_field(*f, ctx).to_csv(units ? f->unit : "");
}

TEST(FieldTable, EveryFieldHasANameADescriptionAndAReader) {
  ASSERT_GT(all_fields().size(), 60U);
  for (const auto& f : all_fields()) {
    EXPECT_FALSE(f.name.empty());
    EXPECT_FALSE(f.description.empty()) << f.name;
    EXPECT_NE(f.read, nullptr) << f.name;
    EXPECT_TRUE(f.unit.empty() || f.unit == "MiB" || f.unit == "%" || f.unit == "W" || f.unit == "MHz") << f.name;
  }
}

TEST(FieldTable, NamesAndAliasesAreUniqueAndResolveToTheirField) {
  std::set<std::string_view> seen;
  for (const auto& f : all_fields()) {
    EXPECT_TRUE(seen.insert(f.name).second) << f.name;
    EXPECT_EQ(find_field(f.name), &f);
    for (const auto& a : f.aliases) {
      EXPECT_TRUE(seen.insert(a).second) << a;
      EXPECT_EQ(find_field(a), &f) << a;
    }
  }
}

TEST(FieldTable, NvidiaSmisAliases) {
  const std::pair<const char*, const char*> aliases[] = {
      {"gpu_name", "name"}, {"gpu_uuid", "uuid"}, {"gpu_bus_id", "pci.bus_id"}, {"gpu_serial", "serial"},
      {"clocks.gr", "clocks.current.graphics"}, {"clocks.mem", "clocks.current.memory"},
      {"clocks.max.gr", "clocks.max.graphics"}, {"retired_pages.sbe", "retired_pages.single_bit_ecc.count"},
      {"clocks_throttle_reasons.active", "clocks_event_reasons.active"},
      {"clocks_throttle_reasons.hw_slowdown", "clocks_event_reasons.hw_slowdown"}};
  for (const auto& [alias, name] : aliases) {
    const FieldSpec* f = find_field(alias);
    ASSERT_NE(f, nullptr) << alias;
    EXPECT_EQ(f->name, name);
  }
  EXPECT_EQ(find_field("foo"), nullptr);
  EXPECT_EQ(find_field("Name"), nullptr);
  EXPECT_EQ(find_field(""), nullptr);
}

TEST(ParseFieldList, EmptyNamesAreSkippedAsNvidiaSmiDoes) {
  auto r = parse_field_list("index,,name,");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 2U);
  r = parse_field_list("");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST(ParseFieldList, SectionNamesParseAsGroupsWithoutAReader) {
  auto r = parse_field_list("index,memory");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 2U);
  EXPECT_EQ((*r)[1]->name, "memory");
  EXPECT_EQ((*r)[1]->read, nullptr);
  EXPECT_EQ(find_field("memory"), nullptr);
  EXPECT_NE(find_group("clocks_event_reasons"), nullptr);
  EXPECT_EQ(find_group("clocks"), nullptr);
}

TEST(FieldTable, UnitsOfCommonFields) {
  EXPECT_EQ(find_field("memory.used")->unit, "MiB");
  EXPECT_EQ(find_field("utilization.gpu")->unit, "%");
  EXPECT_EQ(find_field("power.draw")->unit, "W");
  EXPECT_EQ(find_field("clocks.sm")->unit, "MHz");
  EXPECT_EQ(find_field("temperature.gpu")->unit, "");
  EXPECT_EQ(find_field("fan.speed")->unit, "%");
}

TEST(ParseFieldList, NamesTheFirstUnknownFieldAsTyped) {
  auto ok = parse_field_list("index,gpu_name,memory.used");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->size(), 3U);
  EXPECT_EQ((*ok)[1]->name, "name");
  for (const auto& [list, bad] : std::vector<std::pair<std::string, std::string>>{
           {"index,foo,bar", "foo"}, {"index, name", " name"}, {"clocks", "clocks"}, {"Index", "Index"}}) {
    auto r = parse_field_list(list);
    ASSERT_FALSE(r.ok()) << list;
    EXPECT_EQ(r.error().message, bad);
  }
}

TEST(ReadField, ValuesAsNvidiaSmiPrintsThem) {
  const auto s = one_a100();
  EXPECT_EQ(csv("name", s), "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(csv("count", s), "1");
  EXPECT_EQ(csv("index", s), "0");
  EXPECT_EQ(csv("driver_version", s), "535.183.01");
  EXPECT_EQ(csv("memory.total", s), "40960 MiB");
  EXPECT_EQ(csv("memory.used", s), "38900 MiB");
  EXPECT_EQ(csv("memory.used", s, false), "38900");
  EXPECT_EQ(csv("utilization.gpu", s), "96 %");
  EXPECT_EQ(csv("temperature.gpu", s), "68");
  EXPECT_EQ(csv("power.draw", s), "250.12 W");
  EXPECT_EQ(csv("power.limit", s), "400.00 W");
  EXPECT_EQ(csv("clocks.sm", s), "1410 MHz");
  EXPECT_EQ(csv("pstate", s), "P0");
  EXPECT_EQ(csv("persistence_mode", s), "Enabled");
  EXPECT_EQ(csv("compute_mode", s), "Default");
  EXPECT_EQ(csv("pci.domain", s), "0x0000");
  EXPECT_EQ(csv("pci.bus", s), "0x07");
  EXPECT_EQ(csv("pci.device", s), "0x00");
  EXPECT_EQ(csv("pci.device_id", s), "0x20B010DE");
  EXPECT_EQ(csv("pci.sub_device_id", s), "0x134F10DE");
  EXPECT_EQ(csv("retired_pages.pending", s), "No");
}

TEST(ReadField, ClockEventReasons) {
  const auto s = one_a100();
  EXPECT_EQ(csv("clocks_event_reasons.active", s), "0x0000000000000004");
  EXPECT_EQ(csv("clocks_throttle_reasons.supported", s), "0x000000000000017F");
  EXPECT_EQ(csv("clocks_event_reasons.sw_power_cap", s), "Active");
  EXPECT_EQ(csv("clocks_event_reasons.gpu_idle", s), "Not Active");
  EXPECT_EQ(csv("clocks_event_reasons.hw_power_brake_slowdown", s), "[Not Supported]");
}

TEST(ReadField, MissingValuesGetTheirMarkers) {
  auto s = one_a100();
  EXPECT_EQ(csv("fan.speed", s), "[N/A]");
  EXPECT_EQ(csv("serial", s), "[Not Supported]");
  EXPECT_EQ(csv("mig.mode.current", s), "[N/A]");
  s.devices[0].errors.push_back({"temperature", "the driver timed out (NVML_ERROR_TIMEOUT)"});
  EXPECT_EQ(csv("temperature.gpu", s), "68");  // a value that did read wins
  s.devices[0].sample.temp_c.reset();
  EXPECT_EQ(csv("temperature.gpu", s), "[Timeout]");
  s.devices[0].errors.push_back({"memory_v2", "odd (NVML_ERROR_SOMETHING_NEW)"});
  s.devices[0].sample.mem_used_bytes.reset();
  EXPECT_EQ(csv("memory.used", s), "[Unknown Error]");
}

TEST(ReadField, LostGpuMarksDeviceFieldsButNotSystemFields) {
  auto s = one_a100();
  s.devices[0].lost = "GPU is lost";
  EXPECT_EQ(csv("memory.used", s), "[GPU is lost]");
  EXPECT_EQ(csv("name", s), "[GPU is lost]");
  EXPECT_EQ(csv("index", s), "0");
  EXPECT_EQ(csv("count", s), "1");
  EXPECT_EQ(csv("driver_version", s), "535.183.01");
}

TEST(ReadField, TimestampFormat) {
  const auto s = one_a100();
  EXPECT_TRUE(std::regex_match(csv("timestamp", s), std::regex(R"(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.123)")));
}

TEST(NvmlErrorWords, NvidiaSmisWording) {
  EXPECT_EQ(nvml_error_words("NVML_ERROR_NO_PERMISSION"), "Insufficient Permissions");
  EXPECT_EQ(nvml_error_words("NVML_ERROR_GPU_IS_LOST"), "GPU is lost");
  EXPECT_EQ(nvml_error_words("whatever"), "Unknown Error");
}

// nvidia-smi of driver 580 prints display_mode as deprecated and display_attached instead (seen on
// an H200, 580.159.04, whose NVML still answers nvmlDeviceGetDisplayMode with 1).
TEST(FieldTable, DisplayModeIsDeprecatedFromDriver580) {
  gpu::Snapshot s = one_a100();
  s.devices[0].modes.display_mode = true;
  EXPECT_EQ(csv("display_mode", s), "Enabled");
  EXPECT_EQ(csv("display_attached", s), "[Not Supported]");
  s.driver_version = "580.159.04";
  EXPECT_EQ(csv("display_mode", s), "[Requested functionality has been deprecated]");
  EXPECT_EQ(csv("display_attached", s), "Yes");
  s.devices[0].modes.display_mode = false;
  EXPECT_EQ(csv("display_attached", s), "No");
  s.devices[0].modes.display_mode.reset();
  EXPECT_EQ(csv("display_attached", s), "[Not Supported]");
}

}  // namespace
}  // namespace tarmac::fields
