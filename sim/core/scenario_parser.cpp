#include "scenario_parser.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fault_rule.hpp"
#include "scenario_parser_internal.hpp"
#include "toml_doc.hpp"

namespace tarmac::sim {

namespace detail {

std::vector<const TomlNode*> table_array(Fields& top, std::string_view key) {
  std::vector<const TomlNode*> out;
  const TomlNode* v = top.raw(key);
  if (v == nullptr) return out;
  if (v->kind != TomlNode::Kind::Array) {
    top.fail_key(key, fmt::format("expected [[{}]] tables", key));
    return out;
  }
  for (const TomlNode& item : v->array) {
    if (item.kind != TomlNode::Kind::Table) {
      top.fail_at(&item, fmt::format("{}: expected [[{}]] tables, got {}", key, key, TomlNode::kind_name(item.kind)));
      return {};
    }
    out.push_back(&item);
  }
  return out;
}

}  // namespace detail

namespace {

void parse_header(Fields& top, Scenario& s, Diag& diag) {
  if (auto v = top.string("name")) s.name = *v;
  if (auto v = top.string("description")) s.description = *v;
  if (const TomlNode* driver = top.table("driver")) {
    Fields f(*driver, diag, "driver");
    if (auto v = f.string("version")) s.driver_version = *v;
    if (auto v = f.string("nvml_version")) s.nvml_version = *v;
    if (auto v = f.integer("cuda_version", 1000, 99999)) s.cuda_version = static_cast<int>(*v);
    if (auto v = f.string("init_error")) {
      const auto rc = return_code_by_name(*v);
      if (!rc) {
        f.fail_key("init_error", fmt::format("'{}' is not an NVML return code (DRIVER_NOT_LOADED, NO_PERMISSION, "
                                             "LIB_RM_VERSION_MISMATCH, UNKNOWN, ...)",
                                             *v));
      } else if (*rc == 0) {
        f.fail_key("init_error", "SUCCESS is not an error: leave init_error out for a working driver");
      } else {
        s.init_error = *rc;
      }
    }
    f.finish();
  }
  if (const TomlNode* clock = top.table("clock")) {
    Fields f(*clock, diag, "clock");
    if (const TomlNode* epoch = f.raw("epoch")) {
      if (epoch->kind == TomlNode::Kind::DateTime) {
        s.epoch_ns = epoch->int_value * 1'000'000'000LL;
      } else {
        f.fail_key("epoch", "expected a TOML date-time such as 2025-01-06T00:00:00Z");
      }
    }
    f.finish();
  }
}

}  // namespace

Result<Scenario> parse_scenario(const std::string& text, const std::string& file) {
  TARMAC_TRY_ASSIGN(TomlNode root, parse_toml(text, file));
  Scenario s;
  s.file = file;
  s.name = std::filesystem::path(file).stem().string();
  Diag diag(file);
  Fields top(root, diag, "scenario");
  parse_header(top, s, diag);
  detail::parse_gpus(root, top, s, diag);
  if (!diag.failed()) detail::parse_timeline(top, s, diag);
  if (!diag.failed()) detail::parse_processes(top, s, diag);
  if (!diag.failed()) detail::parse_faults_and_events(top, s, diag);
  if (!diag.failed()) detail::parse_topology(top, s, diag);
  if (!diag.failed()) top.finish();
  if (diag.failed()) return diag.error();
  return s;
}

Result<Scenario> load_scenario_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Error::Code::NotFound, fmt::format("{}: cannot read the scenario file", path));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_scenario(text.str(), path);
}

}  // namespace tarmac::sim
