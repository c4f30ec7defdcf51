#include "tarmac/fields/value.hpp"

#include <fmt/format.h>

namespace tarmac::fields {

Value Value::missing(Marker marker, std::string error_text) {
  Value v;
  v.kind_ = Kind::Missing;
  v.marker_ = marker;
  v.text_ = std::move(error_text);
  return v;
}

Value Value::text(std::string text) {
  Value v;
  v.kind_ = Kind::Text;
  v.text_ = std::move(text);
  return v;
}

Value Value::integer(std::uint64_t number) {
  Value v;
  v.kind_ = Kind::Integer;
  v.integer_ = number;
  return v;
}

Value Value::decimal(double number) {
  Value v;
  v.kind_ = Kind::Decimal;
  v.decimal_ = number;
  return v;
}

Value Value::hex(std::uint64_t number, int digits) {
  Value v;
  v.kind_ = Kind::Hex;
  v.integer_ = number;
  v.digits_ = digits;
  return v;
}

Value Value::flag(bool on, const char* on_word, const char* off_word) {
  Value v;
  v.kind_ = Kind::Flag;
  v.integer_ = on ? 1 : 0;
  v.text_ = on ? on_word : off_word;
  return v;
}

std::string marker_text(Marker marker, const std::string& error_text) {
  switch (marker) {
    case Marker::NotAvailable: return "[N/A]";
    case Marker::NotSupported: return "[Not Supported]";
    case Marker::GpuLost: return "[GPU is lost]";
    case Marker::Error: return "[" + (error_text.empty() ? std::string("Unknown Error") : error_text) + "]";
  }
  return "[Unknown Error]";
}

std::string Value::to_csv(std::string_view unit) const {
  std::string out;
  switch (kind_) {
    case Kind::Missing: return marker_text(marker_, text_);
    case Kind::Text:
    case Kind::Flag: out = text_; break;
    case Kind::Integer: out = fmt::format("{}", integer_); break;
    case Kind::Decimal: out = fmt::format("{:.2f}", decimal_); break;
    case Kind::Hex: out = fmt::format("0x{:0{}X}", integer_, digits_); break;
  }
  if (!unit.empty()) {
    out += ' ';
    out += unit;
  }
  return out;
}

}  // namespace tarmac::fields
