#include "scenario.hpp"

#include <algorithm>
#include <cmath>

namespace tarmac::sim {

bool Window::contains(double t) const { return occurrence(t).has_value(); }

std::optional<long long> Window::occurrence(double t) const {
  if (t < 0) t = 0;
  if (!every) {
    if (t < from || (to && t >= *to)) return std::nullopt;
    return 0;
  }
  const auto k = static_cast<long long>(std::floor(t / *every));
  const double offset = t - static_cast<double>(k) * *every;
  if (offset < from || offset >= to.value_or(*every)) return std::nullopt;
  return k;
}

ProcessUtil ProcessSpec::util_at(double t) const {
  ProcessUtil u{sm_util, mem_util, util_sample};
  for (const ProcessUtilSegment& seg : util_timeline) {
    if (!seg.window.contains(t)) continue;
    if (seg.sm_util) u.sm_util = seg.sm_util;
    if (seg.mem_util) u.mem_util = seg.mem_util;
    if (seg.util_sample) u.sample = *seg.util_sample;
  }
  return u;
}

bool Scenario::gpu_has_processes(unsigned gpu) const {
  return std::any_of(processes.begin(), processes.end(), [gpu](const ProcessSpec& p) {
    return std::find(p.gpus.begin(), p.gpus.end(), gpu) != p.gpus.end();
  });
}

}  // namespace tarmac::sim
