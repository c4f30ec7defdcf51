// A parsed TOML document as a plain tree that remembers where each value came from. The only
// code that sees toml++ is toml_doc.cpp (used header-only), so the scenario schema code compiles
// fast and can report "file:line:column: problem" for any value.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tarmac/util/result.hpp"

namespace tarmac::sim {

struct SourcePos {
  int line = 0;
  int column = 0;
};

struct TomlNode {
  enum class Kind { Table, Array, String, Integer, Float, Bool, DateTime };
  Kind kind = Kind::Table;
  SourcePos pos;
  std::string string_value;
  long long int_value = 0;    // also seconds since the epoch for DateTime
  double float_value = 0;
  bool bool_value = false;
  std::vector<std::pair<std::string, TomlNode>> table;  // key order as toml++ keeps it
  std::vector<SourcePos> key_pos;                        // where each key of `table` is written
  std::vector<TomlNode> array;

  [[nodiscard]] const TomlNode* find(std::string_view key) const;
  [[nodiscard]] static const char* kind_name(Kind kind);
};

// Parses TOML text; `file` names it in error messages ("file:line:col: problem").
[[nodiscard]] Result<TomlNode> parse_toml(const std::string& text, const std::string& file);

}  // namespace tarmac::sim
