// How query output is written: nvidia-smi's --format modifiers (csv, noheader, nounits), tarmac's
// typed forms (json, ndjson), the CSV header and row lines, and the JSON value of each cell.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tarmac/fields/table.hpp"
#include "tarmac/util/result.hpp"

namespace tarmac::fields {

enum class OutputForm { Csv, Json, Ndjson };
enum class Header { Print, Skip };
enum class Units { Print, Skip };

struct FormatOptions {
  OutputForm form = OutputForm::Csv;
  Header header = Header::Print;
  Units units = Units::Print;
};

// nvidia-smi's messages for a bad --format (its exit code for them is 2).
inline constexpr std::string_view kFormatNotRecognized = "Format modifier is not recognized.";
inline constexpr std::string_view kFormatCsvMandatory = "Format modifier --format=csv is mandatory.";

// Parses the value of --format: "csv", "csv,noheader", "csv,nounits,noheader", "json", "ndjson".
// Fails (Error::Invalid, one of the messages above) on an unknown modifier or without csv/json/ndjson.
[[nodiscard]] Result<FormatOptions> parse_format(std::string_view text);

// The header line without its newline: "index, name, memory.used [MiB]". nvidia-smi keeps the
// units in the header with nounits too; only the values lose them.
[[nodiscard]] std::string csv_header(std::span<const FieldSpec* const> fields);

// One CSV line without its newline: "0, NVIDIA A100-SXM4-40GB, 38900 MiB".
[[nodiscard]] std::string csv_row(std::span<const Value> values, std::span<const FieldSpec* const> fields, Units units);

// The typed JSON form of a value: numbers as numbers (in the field's unit), flags as booleans,
// text as strings, markers as null.
[[nodiscard]] nlohmann::json to_json(const Value& value);

// One GPU as a JSON object keyed by canonical field name.
[[nodiscard]] nlohmann::json json_object(std::span<const Value> values, std::span<const FieldSpec* const> fields);

}  // namespace tarmac::fields
