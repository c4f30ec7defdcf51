#include "tarmac/diagnose/verdicts.hpp"

#include <fmt/format.h>

#include "tarmac/gpu/clock_events.hpp"

namespace tarmac::diagnose {

using gpu::Activity;

std::string format_index_list(const std::vector<unsigned>& indices) {
  std::string out;
  for (std::size_t i = 0; i < indices.size();) {
    std::size_t j = i;
    while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j > i ? fmt::format("{}-{}", indices[i], indices[j]) : fmt::format("{}", indices[i]);
    i = j + 1;
  }
  return out;
}

namespace {

std::vector<unsigned> with_class(const gpu::Snapshot& s, const std::vector<Activity>& classes, Activity want) {
  std::vector<unsigned> out;
  for (std::size_t i = 0; i < s.devices.size() && i < classes.size(); ++i) {
    if (classes[i] == want) out.push_back(s.devices[i].id.index);
  }
  return out;
}

const char* plural(std::size_t n, const char* one, const char* many) { return n == 1 ? one : many; }

}  // namespace

std::vector<Verdict> verdicts(const gpu::Snapshot& s, const std::vector<Activity>& classes) {
  std::vector<Verdict> out;
  for (const auto& d : s.devices) {
    if (auto reason = gpu::fault_reason(d)) {
      const bool slowed = !d.lost && gpu::harmful_clock_events(d.sample.clock_event_reasons.value_or(0)) != 0;
      out.push_back({Severity::Critical, slowed ? "thermal" : "gpu-fault",
                     fmt::format("GPU {}: {}", d.id.index, *reason)});
    }
  }
  const auto busy = with_class(s, classes, Activity::Busy);
  const auto idle = with_class(s, classes, Activity::Idle);
  if (!busy.empty() && !idle.empty()) {
    out.push_back({Severity::Warning, busy.size() == 1 ? "single-gpu-active" : "idle-gpus",
                   fmt::format("{} {} idle while {} {} {}: see `tarmac doctor`", plural(idle.size(), "GPU", "GPUs"),
                               format_index_list(idle), plural(busy.size(), "GPU", "GPUs"), format_index_list(busy),
                               plural(busy.size(), "works", "work"))});
  } else if (busy.empty() && !idle.empty() && idle.size() == s.devices.size()) {
    out.push_back({Severity::Info, "all-idle",
                   fmt::format("all {} GPUs idle: grounded (`tarmac pick` finds them for a job)", idle.size())});
  }
  if (auto starved = with_class(s, classes, Activity::Starved); !starved.empty()) {
    out.push_back({Severity::Warning, "starved",
                   fmt::format("{} {} {} memory at low utilization: waiting for data or other ranks "
                               "(see `tarmac doctor`)",
                               plural(starved.size(), "GPU", "GPUs"), format_index_list(starved),
                               plural(starved.size(), "holds", "hold"))});
  }
  if (auto holding = with_class(s, classes, Activity::Holding); !holding.empty()) {
    out.push_back({Severity::Warning, "holding",
                   fmt::format("{} {} {} memory at 0 % utilization: a forgotten process? (`tarmac reap`)",
                               plural(holding.size(), "GPU", "GPUs"), format_index_list(holding),
                               plural(holding.size(), "holds", "hold"))});
  }
  for (const auto& d : s.devices) {
    const auto total = d.id.mem_total_bytes.value_or(0);
    const auto used = d.sample.mem_used_bytes.value_or(0);
    if (total > 0 && used * 100 >= total * 98) {
      out.push_back({Severity::Warning, "near-oom",
                     fmt::format("GPU {}: memory {:.1f} % full: the next allocation may fail", d.id.index,
                                 100.0 * static_cast<double>(used) / static_cast<double>(total))});
    }
  }
  return out;
}

const char* to_string(Severity s) {
  switch (s) {
    case Severity::Info: return "info";
    case Severity::Warning: return "warning";
    case Severity::Critical: return "critical";
  }
  return "info";
}

}  // namespace tarmac::diagnose
