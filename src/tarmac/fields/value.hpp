// One value a query field read from one GPU, before it is written as CSV text or JSON. Values that
// could not be read carry the marker nvidia-smi prints in their place ("[Not Supported]", ...).
#pragma once

#include <cstdint>
#include <string>

namespace tarmac::fields {

// Why a value is missing, as nvidia-smi words it in a CSV cell.
enum class Marker {
  NotAvailable,  // "[N/A]": the value does not apply to this GPU or configuration
  NotSupported,  // "[Not Supported]": the GPU or driver cannot report it
  GpuLost,       // "[GPU is lost]": the GPU stopped answering
  Error,         // "[<NVML's error string>]": the read failed with another error
};

class Value {
 public:
  enum class Kind { Missing, Text, Integer, Decimal, Hex, Flag };

  // A missing value; `error_text` is the text in brackets for Marker::Error ("Unknown Error").
  [[nodiscard]] static Value missing(Marker marker, std::string error_text = {});
  [[nodiscard]] static Value text(std::string text);
  [[nodiscard]] static Value integer(std::uint64_t number);
  // A number printed with two decimals ("250.00"), as nvidia-smi prints watts.
  [[nodiscard]] static Value decimal(double number);
  // A number printed as "0x" and `digits` upper-case hex digits ("0x0000000000000001").
  [[nodiscard]] static Value hex(std::uint64_t number, int digits);
  // A yes/no value printed with the field's words ("Enabled"/"Disabled", "Active"/"Not Active").
  [[nodiscard]] static Value flag(bool on, const char* on_word, const char* off_word);

  [[nodiscard]] Kind kind() const { return kind_; }
  [[nodiscard]] Marker marker() const { return marker_; }
  [[nodiscard]] bool is_missing() const { return kind_ == Kind::Missing; }
  [[nodiscard]] std::uint64_t number() const { return integer_; }
  [[nodiscard]] double decimal_number() const { return decimal_; }
  [[nodiscard]] bool on() const { return integer_ != 0; }
  [[nodiscard]] const std::string& text_value() const { return text_; }

  // The CSV cell: the value, then " <unit>" when `unit` is not empty; markers never carry units.
  [[nodiscard]] std::string to_csv(std::string_view unit) const;

 private:
  Kind kind_ = Kind::Missing;
  Marker marker_ = Marker::NotSupported;
  std::string text_;  // Text; the bracketed words of Marker::Error; the printed word of Flag
  std::uint64_t integer_ = 0;
  double decimal_ = 0.0;
  int digits_ = 0;
};

// The text nvidia-smi writes for a marker: "[N/A]", "[Not Supported]", "[GPU is lost]", "[...]".
[[nodiscard]] std::string marker_text(Marker marker, const std::string& error_text);

}  // namespace tarmac::fields
