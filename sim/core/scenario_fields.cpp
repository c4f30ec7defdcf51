#include "scenario_fields.hpp"

#include <cmath>
#include <fmt/format.h>

#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::sim {

void Diag::fail(SourcePos pos, const std::string& message) {
  if (!message_.empty()) return;  // the first error is the one worth reading
  message_ = fmt::format("{}:{}:{}: {}", file_, pos.line, pos.column, message);
}

Fields::Fields(const TomlNode& table, Diag& diag, std::string where, const TomlNode* fallback,
               std::set<std::string>* fallback_used)
    : table_(table), diag_(diag), where_(std::move(where)), fallback_(fallback), fallback_used_(fallback_used),
      used_(table.table.size(), false) {}

const TomlNode* Fields::lookup(std::string_view key, bool mark) {
  // A default that every GPU overrides is still a known key: mark it whenever it is asked for.
  if (mark && fallback_ != nullptr && fallback_used_ != nullptr && fallback_->find(key) != nullptr) {
    fallback_used_->insert(std::string(key));
  }
  for (std::size_t i = 0; i < table_.table.size(); ++i) {
    if (table_.table[i].first == key) {
      if (mark) used_[i] = true;
      return &table_.table[i].second;
    }
  }
  if (fallback_ != nullptr) {
    if (const TomlNode* v = fallback_->find(key)) return v;
  }
  return nullptr;
}

const TomlNode* Fields::raw(std::string_view key) { return lookup(key, true); }

bool Fields::has(std::string_view key) const {
  return table_.find(key) != nullptr || (fallback_ != nullptr && fallback_->find(key) != nullptr);
}

void Fields::fail_at(const TomlNode* node, const std::string& message) {
  diag_.fail(node != nullptr ? node->pos : table_.pos, fmt::format("{}: {}", where_, message));
}

void Fields::fail_key(std::string_view key, const std::string& message) {
  const TomlNode* node = lookup(key, false);
  diag_.fail(node != nullptr ? node->pos : table_.pos, fmt::format("{}.{}: {}", where_, key, message));
}

void Fields::type_error(std::string_view key, const TomlNode& node, const char* expected) {
  diag_.fail(node.pos, fmt::format("{}.{}: expected {}, got {}", where_, key, expected, TomlNode::kind_name(node.kind)));
}

std::optional<std::string> Fields::string(std::string_view key, Presence presence) {
  const TomlNode* v = raw(key);
  if (v == nullptr) {
    if (presence == Presence::Required) diag_.fail(table_.pos, fmt::format("{}: missing '{}'", where_, key));
    return std::nullopt;
  }
  if (v->kind != TomlNode::Kind::String) {
    type_error(key, *v, "a string");
    return std::nullopt;
  }
  return v->string_value;
}

std::optional<long long> Fields::integer(std::string_view key, long long lo, long long hi, Presence presence) {
  const TomlNode* v = raw(key);
  if (v == nullptr) {
    if (presence == Presence::Required) diag_.fail(table_.pos, fmt::format("{}: missing '{}'", where_, key));
    return std::nullopt;
  }
  if (v->kind != TomlNode::Kind::Integer) {
    type_error(key, *v, "an integer");
    return std::nullopt;
  }
  if (v->int_value < lo || v->int_value > hi) {
    diag_.fail(v->pos, fmt::format("{}.{}: {} is out of range ({} to {})", where_, key, v->int_value, lo, hi));
    return std::nullopt;
  }
  return v->int_value;
}

std::optional<double> Fields::number(std::string_view key, double lo, double hi, Presence presence) {
  const TomlNode* v = raw(key);
  if (v == nullptr) {
    if (presence == Presence::Required) diag_.fail(table_.pos, fmt::format("{}: missing '{}'", where_, key));
    return std::nullopt;
  }
  double value = 0;
  if (v->kind == TomlNode::Kind::Integer) {
    value = static_cast<double>(v->int_value);
  } else if (v->kind == TomlNode::Kind::Float) {
    value = v->float_value;
  } else {
    type_error(key, *v, "a number");
    return std::nullopt;
  }
  if (!std::isfinite(value) || value < lo || value > hi) {
    diag_.fail(v->pos, fmt::format("{}.{}: {} is out of range ({} to {})", where_, key, value, lo, hi));
    return std::nullopt;
  }
  return value;
}

std::optional<bool> Fields::boolean(std::string_view key) {
  const TomlNode* v = raw(key);
  if (v == nullptr) return std::nullopt;
  if (v->kind != TomlNode::Kind::Bool) {
    type_error(key, *v, "true or false");
    return std::nullopt;
  }
  return v->bool_value;
}

std::optional<double> Fields::duration(std::string_view key, Presence presence) {
  const TomlNode* v = raw(key);
  if (v == nullptr) {
    if (presence == Presence::Required) diag_.fail(table_.pos, fmt::format("{}: missing '{}'", where_, key));
    return std::nullopt;
  }
  if (v->kind == TomlNode::Kind::Integer && v->int_value >= 0) return static_cast<double>(v->int_value);
  if (v->kind == TomlNode::Kind::String) {
    if (auto s = util::parse_duration_s(v->string_value)) return static_cast<double>(*s);
  }
  diag_.fail(v->pos, fmt::format("{}.{}: expected a duration such as \"90s\", \"15m\", \"2h\", \"1d\", \"1w\", "
                                 "\"1h30m\" or a number of seconds",
                                 where_, key));
  return std::nullopt;
}

std::optional<std::vector<std::string>> Fields::words(std::string_view key) {
  const TomlNode* v = raw(key);
  if (v == nullptr) return std::nullopt;
  std::vector<std::string> out;
  if (v->kind == TomlNode::Kind::String) {
    for (const std::string& w : util::split(v->string_value, ' ')) {
      if (!w.empty()) out.push_back(w);
    }
    return out;
  }
  if (v->kind != TomlNode::Kind::Array) {
    type_error(key, *v, "a string or an array of strings");
    return std::nullopt;
  }
  for (const TomlNode& item : v->array) {
    if (item.kind != TomlNode::Kind::String) {
      type_error(key, item, "a string");
      return std::nullopt;
    }
    out.push_back(item.string_value);
  }
  return out;
}

std::optional<std::vector<unsigned>> Fields::gpus(std::size_t gpu_count, Presence presence) {
  const TomlNode* one = raw("gpu");
  const TomlNode* many = raw("gpus");
  if (one != nullptr && many != nullptr) {
    fail_key("gpus", "give either 'gpu' or 'gpus', not both");
    return std::nullopt;
  }
  std::vector<const TomlNode*> items;
  if (one != nullptr) items.push_back(one);
  if (many != nullptr) {
    if (many->kind != TomlNode::Kind::Array) {
      type_error("gpus", *many, "an array of GPU indices");
      return std::nullopt;
    }
    for (const TomlNode& item : many->array) items.push_back(&item);
    if (items.empty()) {
      fail_key("gpus", "an empty list");
      return std::nullopt;
    }
  }
  if (items.empty()) {
    if (presence == Presence::Required) diag_.fail(table_.pos, fmt::format("{}: missing 'gpu' (or 'gpus')", where_));
    return std::nullopt;
  }
  std::vector<unsigned> out;
  for (const TomlNode* item : items) {
    if (item->kind != TomlNode::Kind::Integer) {
      type_error(one != nullptr ? "gpu" : "gpus", *item, "a GPU index");
      return std::nullopt;
    }
    if (item->int_value < 0 || static_cast<std::size_t>(item->int_value) >= gpu_count) {
      diag_.fail(item->pos, fmt::format("{}: GPU {} does not exist (the scenario has {} GPUs, 0 to {})", where_,
                                        item->int_value, gpu_count, gpu_count == 0 ? 0 : gpu_count - 1));
      return std::nullopt;
    }
    out.push_back(static_cast<unsigned>(item->int_value));
  }
  return out;
}

const TomlNode* Fields::table(std::string_view key) {
  const TomlNode* v = raw(key);
  if (v != nullptr && v->kind != TomlNode::Kind::Table) {
    type_error(key, *v, "a table such as { sm = 1410, mem = 1215 }");
    return nullptr;
  }
  return v;
}

void Fields::finish() {
  for (std::size_t i = 0; i < used_.size(); ++i) {
    if (!used_[i]) {
      const SourcePos pos = i < table_.key_pos.size() ? table_.key_pos[i] : table_.pos;
      diag_.fail(pos, fmt::format("{}: unknown key '{}'", where_, table_.table[i].first));
      return;
    }
  }
}

}  // namespace tarmac::sim
