#include "fault_rule.hpp"

#include <array>
#include <cmath>
#include <fmt/format.h>

#include "entry_points.hpp"
#include "tarmac/nvml/nvml_types.hpp"
#include "tarmac/util/strings.hpp"
#include "tarmac/util/units.hpp"

namespace tarmac::sim {

namespace {

namespace nv = tarmac::nvml;

struct CodeName {
  int rc;
  const char* name;
  const char* text;  // nvmlErrorString's wording
};

constexpr std::array<CodeName, 27> kCodes{{
    {0, "SUCCESS", "Success"},
    {1, "UNINITIALIZED", "Uninitialized"},
    {2, "INVALID_ARGUMENT", "Invalid Argument"},
    {3, "NOT_SUPPORTED", "Not Supported"},
    {4, "NO_PERMISSION", "Insufficient Permissions"},
    {5, "ALREADY_INITIALIZED", "Already Initialized"},
    {6, "NOT_FOUND", "Not Found"},
    {7, "INSUFFICIENT_SIZE", "Insufficient Size"},
    {8, "INSUFFICIENT_POWER", "Insufficient External Power"},
    {9, "DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {10, "TIMEOUT", "Timeout"},
    {11, "IRQ_ISSUE", "Interrupt Request Issue"},
    {12, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {13, "FUNCTION_NOT_FOUND", "Function Not Found"},
    {14, "CORRUPTED_INFOROM", "Corrupted infoROM"},
    {15, "GPU_IS_LOST", "GPU is lost"},
    {16, "RESET_REQUIRED", "GPU requires restart"},
    {17, "OPERATING_SYSTEM", "The operating system has blocked the request."},
    {18, "LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."},
    {19, "IN_USE", "In use by another client"},
    {20, "MEMORY", "Insufficient Memory"},
    {21, "NO_DATA", "No data"},
    {22, "VGPU_ECC_NOT_SUPPORTED", "The requested vgpu operation is not available on target device, because ECC is enabled"},
    {23, "INSUFFICIENT_RESOURCES", "Insufficient resources for request"},
    {24, "FREQ_NOT_SUPPORTED", "The requested frequency is not supported"},
    {25, "ARGUMENT_VERSION_MISMATCH", "The provided version is invalid/unsupported"},
    {999, "UNKNOWN", "Unknown Error"},
}};

Error bad(const std::string& message) { return make_error(Error::Code::Invalid, message); }

// Durations, or plain (fractional) seconds: runtime faults are stored with sub-second times so
// that an event injected "now" comes after an event set created a moment before.
Result<double> time_value(const FaultField& f) {
  if (auto plain = util::parse_double(util::trim(f.value)); plain && *plain >= 0) return *plain;
  if (auto s = util::parse_duration_s(f.value)) return static_cast<double>(*s);
  return bad(fmt::format("{}: '{}' is not a duration (e.g. 90s, 15m, 2h, 1d, 1w)", f.key, f.value));
}

Result<unsigned> uint_value(const FaultField& f, long long max) {
  auto v = util::parse_int(util::trim(f.value));
  if (!v || *v < 0 || *v > max) return bad(fmt::format("{}: '{}' is not a whole number from 0 to {}", f.key, f.value, max));
  return static_cast<unsigned>(*v);
}

}  // namespace

bool FaultRule::matches(std::string_view function_name, std::optional<unsigned> call_gpu, double t) const {
  if (function != "*" && function != function_name) return false;
  if (gpu && call_gpu != gpu) return false;
  if (from && t < *from) return false;
  if (until && t >= *until) return false;
  return rc.has_value() || delay_ms > 0;
}

Result<FaultRule> make_fault_rule(const std::vector<FaultField>& fields, std::size_t gpu_count, double now) {
  FaultRule rule;
  bool lost_now = false;
  std::optional<double> at;
  std::optional<unsigned long long> event_type;
  unsigned long long event_data = 0;
  for (const FaultField& f : fields) {
    const std::string& k = f.key;
    if (k == "function" || k == "fn") {
      if (f.value != "*" && !is_entry_point(f.value)) {
        return bad(fmt::format("function: '{}' is not an NVML function the simulator knows", f.value));
      }
      rule.function = f.value;
    } else if (k == "gpu") {
      TARMAC_TRY_ASSIGN(unsigned g, uint_value(f, 1023));
      if (g >= gpu_count) return bad(fmt::format("gpu: {} is out of range: the scenario has {} GPUs", g, gpu_count));
      rule.gpu = g;
    } else if (k == "return" || k == "rc") {
      auto rc = return_code_by_name(f.value);
      if (!rc) return bad(fmt::format("return: '{}' is not an NVML return code (e.g. NOT_SUPPORTED, GPU_IS_LOST, UNKNOWN, TIMEOUT)", f.value));
      rule.rc = *rc;
    } else if (k == "calls") {
      TARMAC_TRY_ASSIGN(unsigned n, uint_value(f, 1'000'000'000));
      if (n == 0) return bad("calls: must be at least 1");
      rule.calls = n;
    } else if (k == "from") {
      TARMAC_TRY_ASSIGN(rule.from, time_value(f));
    } else if (k == "until") {
      TARMAC_TRY_ASSIGN(rule.until, time_value(f));
    } else if (k == "delay_ms" || k == "delay") {
      TARMAC_TRY_ASSIGN(rule.delay_ms, uint_value(f, 600'000));
    } else if (k == "lost") {
      if (!f.value.empty() && f.value != "true") return bad("lost: takes no value (use lost_at=TIME for a later time)");
      lost_now = true;
    } else if (k == "lost_at") {
      TARMAC_TRY_ASSIGN(rule.lost_at, time_value(f));
    } else if (k == "xid") {
      TARMAC_TRY_ASSIGN(unsigned xid, uint_value(f, 1'000'000));
      event_type = nv::nvmlEventTypeXidCriticalError;
      event_data = xid;
    } else if (k == "ecc") {
      if (f.value == "single_bit") {
        event_type = nv::nvmlEventTypeSingleBitEccError;
      } else if (f.value == "double_bit") {
        event_type = nv::nvmlEventTypeDoubleBitEccError;
      } else {
        return bad(fmt::format("ecc: '{}' is neither single_bit nor double_bit", f.value));
      }
    } else if (k == "at") {
      TARMAC_TRY_ASSIGN(at, time_value(f));
    } else {
      return bad(fmt::format("unknown key '{}' (known: function, gpu, return, calls, from, until, delay_ms, lost, lost_at, xid, ecc, at)", k));
    }
  }
  if (lost_now) rule.lost_at = now;
  if (rule.from && rule.until && *rule.until <= *rule.from) return bad("until: must be later than from");
  if ((rule.lost_at || event_type) && !rule.gpu) return bad("gpu: a lost GPU or an event needs the GPU it happens on");
  if (event_type) rule.event = EventSpec{*rule.gpu, at.value_or(now), *event_type, event_data};
  if (at && !event_type) return bad("at: only events (xid, ecc) take a time; use from/until or lost_at");
  if (!rule.rc && rule.delay_ms == 0 && !rule.lost_at && !rule.event) {
    return bad("the fault does nothing: give return=CODE, delay_ms=MS, lost, lost_at=TIME, xid=N or ecc=KIND");
  }
  return rule;
}

Result<FaultRule> parse_fault_spec(std::string_view spec, std::size_t gpu_count, double now) {
  std::vector<FaultField> fields;
  for (const std::string& part : util::split(spec, ',')) {
    const std::string_view item = util::trim(part);
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      fields.push_back({std::string(item), ""});
    } else {
      fields.push_back({std::string(util::trim(item.substr(0, eq))), std::string(util::trim(item.substr(eq + 1)))});
    }
  }
  if (fields.empty()) return bad("an empty fault spec");
  auto rule = make_fault_rule(fields, gpu_count, now);
  if (!rule) return bad(fmt::format("fault '{}': {}", spec, rule.error().message));
  return rule;
}

std::string format_fault_rule(const FaultRule& rule) {
  std::vector<std::string> parts;
  if (rule.function != "*") parts.push_back("function=" + rule.function);
  if (rule.gpu) parts.push_back(fmt::format("gpu={}", *rule.gpu));
  if (rule.rc) parts.push_back("return=" + return_code_name(*rule.rc));
  if (rule.delay_ms > 0) parts.push_back(fmt::format("delay_ms={}", rule.delay_ms));
  if (rule.calls) parts.push_back(fmt::format("calls={}", *rule.calls));
  auto secs = [](double t) { return fmt::format("{:.6f}", t); };
  if (rule.from) parts.push_back(fmt::format("from={}", secs(*rule.from)));
  if (rule.until) parts.push_back(fmt::format("until={}", secs(*rule.until)));
  if (rule.lost_at) parts.push_back(fmt::format("lost_at={}", secs(*rule.lost_at)));
  if (rule.event) {
    if (rule.event->type == nv::nvmlEventTypeXidCriticalError) {
      parts.push_back(fmt::format("xid={}", rule.event->data));
    } else {
      parts.push_back(rule.event->type == nv::nvmlEventTypeSingleBitEccError ? "ecc=single_bit" : "ecc=double_bit");
    }
    parts.push_back(fmt::format("at={}", secs(rule.event->at)));
  }
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

std::optional<int> return_code_by_name(std::string_view name) {
  if (auto n = util::parse_int(name)) {
    for (const CodeName& c : kCodes) {
      if (c.rc == *n) return c.rc;
    }
    return std::nullopt;
  }
  std::string upper(name);
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (upper.starts_with("NVML_ERROR_")) upper = upper.substr(11);
  if (upper == "NVML_SUCCESS") upper = "SUCCESS";
  for (const CodeName& c : kCodes) {
    if (upper == c.name) return c.rc;
  }
  return std::nullopt;
}

std::string return_code_name(int rc) {
  for (const CodeName& c : kCodes) {
    if (c.rc == rc) return c.name;
  }
  return std::to_string(rc);
}

const char* return_code_text(int rc) {
  for (const CodeName& c : kCodes) {
    if (c.rc == rc) return c.text;
  }
  return "Unknown Error";
}

}  // namespace tarmac::sim
