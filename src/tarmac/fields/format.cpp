#include "tarmac/fields/format.hpp"

#include "tarmac/util/strings.hpp"

namespace tarmac::fields {

Result<FormatOptions> parse_format(std::string_view text) {
  FormatOptions out;
  bool csv = false;
  bool typed = false;
  for (const auto& word : util::split(text, ',')) {
    if (word.empty()) continue;
    if (word == "csv") {
      csv = true;
    } else if (word == "noheader") {
      out.header = Header::Skip;
    } else if (word == "nounits") {
      out.units = Units::Skip;
    } else if (word == "json" && !typed) {
      out.form = OutputForm::Json;
      typed = true;
    } else if (word == "ndjson" && !typed) {
      out.form = OutputForm::Ndjson;
      typed = true;
    } else {
      return make_error(Error::Code::Invalid, std::string(kFormatNotRecognized));
    }
  }
  if (csv && typed) return make_error(Error::Code::Invalid, std::string(kFormatNotRecognized));
  if (!csv && !typed) return make_error(Error::Code::Invalid, std::string(kFormatCsvMandatory));
  return out;
}

std::string csv_header(std::span<const FieldSpec* const> fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out += ", ";
    out += fields[i]->name;
    if (!fields[i]->unit.empty()) {
      out += " [";
      out += fields[i]->unit;
      out += ']';
    }
  }
  return out;
}

std::string csv_row(std::span<const Value> values, std::span<const FieldSpec* const> fields, Units units) {
  std::string out;
  for (std::size_t i = 0; i < values.size() && i < fields.size(); ++i) {
    if (i > 0) out += ", ";
    out += values[i].to_csv(units == Units::Print ? fields[i]->unit : std::string_view{});
  }
  return out;
}

nlohmann::json to_json(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::Missing: return nullptr;
    case Value::Kind::Text: return value.text_value();
    case Value::Kind::Integer:
    case Value::Kind::Hex: return value.number();
    case Value::Kind::Decimal: return value.decimal_number();
    case Value::Kind::Flag: return value.on();
  }
  return nullptr;
}

nlohmann::json json_object(std::span<const Value> values, std::span<const FieldSpec* const> fields) {
  nlohmann::json out = nlohmann::json::object();
  for (std::size_t i = 0; i < values.size() && i < fields.size(); ++i) {
    out[std::string(fields[i]->name)] = to_json(values[i]);
  }
  return out;
}

}  // namespace tarmac::fields
