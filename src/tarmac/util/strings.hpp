// Small string helpers shared by every layer.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tarmac::util {

// Splits on every occurrence of `sep`; empty fields are kept.
[[nodiscard]] std::vector<std::string> split(std::string_view text, char sep);

// Removes leading and trailing ASCII whitespace.
[[nodiscard]] std::string_view trim(std::string_view text);

// Parses a whole string as a base-10 integer; nullopt on any extra character or overflow.
[[nodiscard]] std::optional<long long> parse_int(std::string_view text);

// As parse_int, and nullopt unless the value is within [min, max]: the one way to read a number
// from a file, a socket or a database (no sign but '-', no spaces, no "0x", no trailing text).
[[nodiscard]] std::optional<long long> parse_int(std::string_view text, long long min, long long max);

// Parses a whole string as a finite floating-point number; nullopt otherwise.
[[nodiscard]] std::optional<double> parse_double(std::string_view text);

// Lower-cases ASCII letters.
[[nodiscard]] std::string to_lower(std::string_view text);

[[nodiscard]] bool starts_with_ci(std::string_view text, std::string_view prefix);

// A C buffer filled by a C API (NUL-terminated or full) as a string.
[[nodiscard]] std::string from_c_buffer(const char* buffer, std::size_t capacity);

// The deepest nesting of arrays and objects in the JSON `text` (strings skipped): checked before a
// peer's document is parsed, since a megabyte of "[" would become a tree of a gigabyte.
[[nodiscard]] int json_depth(std::string_view text);

}  // namespace tarmac::util
