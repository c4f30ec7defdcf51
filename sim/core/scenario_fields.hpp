// Typed reading of one TOML table of a scenario, with every error naming the file, the line, the
// column, the table and the key. Unknown keys are errors: a typo in a scenario must not silently
// change what the simulated GPUs report.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "toml_doc.hpp"

namespace tarmac::sim {

enum class Presence { Optional, Required };

// Remembers the first error of a parse.
class Diag {
 public:
  explicit Diag(std::string file) : file_(std::move(file)) {}
  void fail(SourcePos pos, const std::string& message);
  [[nodiscard]] bool failed() const { return !message_.empty(); }
  [[nodiscard]] Error error() const { return make_error(Error::Code::Invalid, message_); }
  [[nodiscard]] const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::string message_;
};

class Fields {
 public:
  // `where` names the table in messages ("gpu[2]"). Keys missing from `table` are looked up in
  // `fallback` (the [gpu_defaults] table), whose used keys are recorded in `fallback_used`.
  Fields(const TomlNode& table, Diag& diag, std::string where, const TomlNode* fallback = nullptr,
         std::set<std::string>* fallback_used = nullptr);

  // The raw value of a key (marking it used), or nullptr.
  const TomlNode* raw(std::string_view key);
  [[nodiscard]] bool has(std::string_view key) const;

  std::optional<std::string> string(std::string_view key, Presence presence = Presence::Optional);
  std::optional<long long> integer(std::string_view key, long long lo, long long hi,
                                   Presence presence = Presence::Optional);
  std::optional<double> number(std::string_view key, double lo, double hi, Presence presence = Presence::Optional);
  std::optional<bool> boolean(std::string_view key);
  // A duration: "90s", "15m", "2h", "1d", "1w", "1h30m", or an integer number of seconds.
  std::optional<double> duration(std::string_view key, Presence presence = Presence::Optional);
  // An array of strings, or one string split at whitespace.
  std::optional<std::vector<std::string>> words(std::string_view key);
  // `gpu = N` or `gpus = [N, ...]`; nullopt when neither is there (an error when required).
  std::optional<std::vector<unsigned>> gpus(std::size_t gpu_count, Presence presence);
  // An inline table read by its own Fields (nested "where").
  const TomlNode* table(std::string_view key);

  // Reports the first unused (unknown) key of the table.
  void finish();

  void fail_at(const TomlNode* node, const std::string& message);
  void fail_key(std::string_view key, const std::string& message);
  [[nodiscard]] SourcePos pos() const { return table_.pos; }
  [[nodiscard]] const std::string& where() const { return where_; }
  [[nodiscard]] Diag& diag() { return diag_; }

 private:
  const TomlNode* lookup(std::string_view key, bool mark);
  void type_error(std::string_view key, const TomlNode& node, const char* expected);

  const TomlNode& table_;
  Diag& diag_;
  std::string where_;
  const TomlNode* fallback_;
  std::set<std::string>* fallback_used_;
  std::vector<bool> used_;
};

}  // namespace tarmac::sim
