#include "tarmac/fields/format.hpp"

#include <gtest/gtest.h>

namespace tarmac::fields {
namespace {

std::vector<const FieldSpec*> fields_of(std::string_view list) {
  auto r = parse_field_list(list);
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : std::vector<const FieldSpec*>{};
}

TEST(ParseFormat, CsvWithModifiersInAnyOrder) {
  auto f = parse_format("csv");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->form, OutputForm::Csv);
  EXPECT_EQ(f->header, Header::Print);
  EXPECT_EQ(f->units, Units::Print);
  f = parse_format("nounits,csv,noheader");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->header, Header::Skip);
  EXPECT_EQ(f->units, Units::Skip);
  EXPECT_TRUE(parse_format("csv,").ok());
}

TEST(ParseFormat, TypedForms) {
  EXPECT_EQ(parse_format("json")->form, OutputForm::Json);
  EXPECT_EQ(parse_format("ndjson")->form, OutputForm::Ndjson);
}

TEST(ParseFormat, BadModifiersGetNvidiaSmisMessages) {
  for (const char* bad : {"xml", "csv,foo", "CSV", "csv,json", "json,ndjson"}) {
    auto f = parse_format(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.error().message, kFormatNotRecognized) << bad;
  }
  for (const char* bad : {"", "noheader", "nounits,noheader", ","}) {
    auto f = parse_format(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.error().message, kFormatCsvMandatory) << bad;
  }
}

TEST(CsvHeader, CanonicalNamesWithUnitsInBracketsEvenWithNounits) {
  const auto f = fields_of("index,gpu_name,memory.used,utilization.gpu,power.draw,clocks.sm,temperature.gpu");
  EXPECT_EQ(csv_header(f),
            "index, name, memory.used [MiB], utilization.gpu [%], power.draw [W], clocks.current.sm [MHz], "
            "temperature.gpu");
}

TEST(CsvRow, CommaSpaceSeparatorsAndUnitsPerField) {
  const auto f = fields_of("index,memory.used,power.draw,fan.speed");
  const std::vector<Value> v = {Value::integer(0), Value::integer(38900), Value::decimal(250), Value::missing(Marker::NotAvailable)};
  EXPECT_EQ(csv_row(v, f, Units::Print), "0, 38900 MiB, 250.00 W, [N/A]");
  EXPECT_EQ(csv_row(v, f, Units::Skip), "0, 38900, 250.00, [N/A]");
}

TEST(Json, TypedValues) {
  const auto f = fields_of("index,name,power.draw,persistence_mode,clocks_event_reasons.active,fan.speed");
  const std::vector<Value> v = {Value::integer(3), Value::text("A100"), Value::decimal(250.5),
                                Value::flag(true, "Enabled", "Disabled"), Value::hex(4, 16),
                                Value::missing(Marker::NotSupported)};
  const auto j = json_object(v, f);
  EXPECT_EQ(j["index"], 3);
  EXPECT_EQ(j["name"], "A100");
  EXPECT_DOUBLE_EQ(j["power.draw"].get<double>(), 250.5);
  EXPECT_EQ(j["persistence_mode"], true);
  EXPECT_EQ(j["clocks_event_reasons.active"], 4);
  EXPECT_TRUE(j["fan.speed"].is_null());
}

}  // namespace
}  // namespace tarmac::fields
