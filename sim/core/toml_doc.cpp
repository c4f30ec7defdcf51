// The one translation unit that includes toml++ (header-only: nothing to link, nothing to ship).
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

#include "toml_doc.hpp"

#include <fmt/format.h>

namespace tarmac::sim {

namespace {

SourcePos pos_of(const toml::source_region& r) {
  return {static_cast<int>(r.begin.line), static_cast<int>(r.begin.column)};
}

long long days_from_civil(long long y, unsigned m, unsigned d) {
  // Howard Hinnant's algorithm: days since 1970-01-01 of a proleptic Gregorian date.
  y -= m <= 2 ? 1 : 0;
  const long long era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<long long>(doe) - 719468;
}

TomlNode convert(const toml::node& node) {
  TomlNode out;
  out.pos = pos_of(node.source());
  if (const auto* t = node.as_table()) {
    out.kind = TomlNode::Kind::Table;
    for (const auto& [key, value] : *t) {
      out.table.emplace_back(std::string(key.str()), convert(value));
      out.key_pos.push_back(pos_of(key.source()));
    }
  } else if (const auto* a = node.as_array()) {
    out.kind = TomlNode::Kind::Array;
    for (const auto& item : *a) out.array.push_back(convert(item));
  } else if (const auto* s = node.as_string()) {
    out.kind = TomlNode::Kind::String;
    out.string_value = s->get();
  } else if (const auto* i = node.as_integer()) {
    out.kind = TomlNode::Kind::Integer;
    out.int_value = i->get();
  } else if (const auto* f = node.as_floating_point()) {
    out.kind = TomlNode::Kind::Float;
    out.float_value = f->get();
  } else if (const auto* b = node.as_boolean()) {
    out.kind = TomlNode::Kind::Bool;
    out.bool_value = b->get();
  } else if (const auto* dt = node.as_date_time()) {
    out.kind = TomlNode::Kind::DateTime;
    const toml::date_time& v = dt->get();
    const long long offset_min = v.offset ? v.offset->minutes : 0;  // no offset: UTC
    out.int_value = days_from_civil(v.date.year, v.date.month, v.date.day) * 86400 + v.time.hour * 3600LL +
                    v.time.minute * 60LL + v.time.second - offset_min * 60;
  } else {
    // A bare date or time: keep it as a string so the schema reports it as the wrong type.
    out.kind = TomlNode::Kind::String;
    out.string_value = "<date or time>";
  }
  return out;
}

}  // namespace

const TomlNode* TomlNode::find(std::string_view key) const {
  for (const auto& [k, v] : table) {
    if (k == key) return &v;
  }
  return nullptr;
}

const char* TomlNode::kind_name(Kind kind) {
  switch (kind) {
    case Kind::Table: return "a table";
    case Kind::Array: return "an array";
    case Kind::String: return "a string";
    case Kind::Integer: return "an integer";
    case Kind::Float: return "a number";
    case Kind::Bool: return "a boolean";
    case Kind::DateTime: return "a date-time";
  }
  return "a value";
}

Result<TomlNode> parse_toml(const std::string& text, const std::string& file) {
  toml::parse_result parsed = toml::parse(text, file);
  if (!parsed) {
    const toml::parse_error& err = parsed.error();
    return make_error(Error::Code::Invalid, fmt::format("{}:{}:{}: {}", file, err.source().begin.line,
                                                        err.source().begin.column, err.description()));
  }
  return convert(parsed.table());
}

}  // namespace tarmac::sim
