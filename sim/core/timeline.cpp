#include "timeline.hpp"

#include <algorithm>
#include <cmath>

namespace tarmac::sim {

namespace {

constexpr unsigned long long kThrottleGpuIdle = 0x1;

template <typename T>
void overlay(std::optional<T>& into, const std::optional<T>& from) {
  if (from) into = from;
}

bool applies(const Segment& seg, unsigned gpu) {
  return seg.gpus.empty() || std::find(seg.gpus.begin(), seg.gpus.end(), gpu) != seg.gpus.end();
}

unsigned cap(double v, unsigned hi) { return static_cast<unsigned>(std::clamp(std::lround(v), 0L, static_cast<long>(hi))); }

}  // namespace

SegmentValues merged_values(const Scenario& scenario, unsigned gpu, double t) {
  SegmentValues out;
  for (const Segment& seg : scenario.segments) {
    if (!applies(seg, gpu) || !seg.window.contains(t)) continue;
    const SegmentValues& v = seg.values;
    overlay(out.util_gpu, v.util_gpu);
    overlay(out.util_mem, v.util_mem);
    overlay(out.temp_c, v.temp_c);
    overlay(out.fan_pct, v.fan_pct);
    overlay(out.pstate, v.pstate);
    overlay(out.encoder_util, v.encoder_util);
    overlay(out.decoder_util, v.decoder_util);
    overlay(out.power_w, v.power_w);
    overlay(out.clocks.graphics, v.clocks.graphics);
    overlay(out.clocks.sm, v.clocks.sm);
    overlay(out.clocks.mem, v.clocks.mem);
    overlay(out.clocks.video, v.clocks.video);
    overlay(out.throttle_reasons, v.throttle_reasons);
    overlay(out.pcie_tx_kbps, v.pcie_tx_kbps);
    overlay(out.pcie_rx_kbps, v.pcie_rx_kbps);
    overlay(out.gpm_sm_util, v.gpm_sm_util);
    overlay(out.gpm_sm_occupancy, v.gpm_sm_occupancy);
    overlay(out.gpm_tensor_util, v.gpm_tensor_util);
    overlay(out.gpm_dram_bw_util, v.gpm_dram_bw_util);
  }
  return out;
}

GpuSample resolve_sample(const GpuSpec& gpu, const SegmentValues& timeline, const Activity& activity) {
  // A GPU whose workload was killed reports its idle state, whatever the timeline says.
  const SegmentValues v = activity.workload_gone ? SegmentValues{} : timeline;
  const double limit = gpu.power_limit_w.value_or(0);
  const double busy_span_w = std::max(0.0, limit * 0.75 - gpu.idle_power_w);

  GpuSample s;
  s.util_gpu = std::min(100U, v.util_gpu.value_or(0) + activity.load_util);
  s.util_mem = std::min(100U, v.util_mem.value_or(0) + activity.load_util / 2);
  const double load_w = busy_span_w * activity.load_util / 100.0;
  if (v.power_w) {
    s.power_w = *v.power_w + load_w;
    if (activity.load_util > 0 && limit > 0) s.power_w = std::min(s.power_w, std::max(limit, *v.power_w));
  } else {
    s.power_w = gpu.idle_power_w + busy_span_w * s.util_gpu / 100.0;
  }
  const double load_heat = activity.load_util * 0.3;
  s.temp_c = v.temp_c ? cap(*v.temp_c + load_heat, 150) : cap(gpu.idle_temp_c + s.util_gpu * 0.4, 150);

  const Clocks busy = gpu.max_clocks.value_or(gpu.idle_clocks);
  const Clocks base = s.util_gpu > 0 ? busy : gpu.idle_clocks;
  s.clocks = {v.clocks.graphics.value_or(base.graphics), v.clocks.sm.value_or(base.sm), v.clocks.mem.value_or(base.mem),
              v.clocks.video.value_or(base.video)};
  s.pstate = v.pstate.value_or(s.util_gpu > 0 || activity.any_process ? 0 : 8);
  s.throttle_reasons = v.throttle_reasons.value_or(s.util_gpu == 0 ? kThrottleGpuIdle : 0);
  if (activity.load_util > 0) s.throttle_reasons &= ~kThrottleGpuIdle;
  s.fan_pct = gpu.fans == 0 ? 0 : v.fan_pct.value_or(cap(gpu.idle_fan_pct + s.util_gpu * 0.4, 100));
  s.pcie_tx_kbps = v.pcie_tx_kbps.value_or(0);
  s.pcie_rx_kbps = v.pcie_rx_kbps.value_or(0);
  s.encoder_util = v.encoder_util.value_or(0);
  s.decoder_util = v.decoder_util.value_or(0);
  s.gpm_sm_util = std::min(100.0, v.gpm_sm_util.value_or(v.util_gpu.value_or(0)) + activity.load_util);
  s.gpm_sm_occupancy = std::min(100.0, v.gpm_sm_occupancy.value_or(s.gpm_sm_util / 2));
  s.gpm_tensor_util = v.gpm_tensor_util.value_or(0);
  s.gpm_dram_bw_util = std::min(100.0, v.gpm_dram_bw_util.value_or(s.util_mem));
  return s;
}

double timeline_energy_j(const Scenario& scenario, unsigned gpu, double from, double to) {
  if (to <= from) return 0;
  const GpuSpec& spec = scenario.gpus[gpu];
  auto power_at = [&](double t) { return resolve_sample(spec, merged_values(scenario, gpu, t), Activity{}).power_w; };

  // Power is constant between segment boundaries: integrate exactly over those pieces, unless a
  // pathological period makes them too many, then in fine uniform steps.
  constexpr std::size_t kMaxPoints = 200000;
  std::vector<double> points{from, to};
  auto add = [&](double x) {
    if (x > from && x < to) points.push_back(x);
  };
  bool too_many = false;
  for (const Segment& seg : scenario.segments) {
    if (!applies(seg, gpu) || (!seg.values.power_w && !seg.values.util_gpu)) continue;
    const Window& w = seg.window;
    if (!w.every) {
      add(w.from);
      if (w.to) add(*w.to);
      continue;
    }
    const auto k0 = static_cast<long long>(std::floor(from / *w.every));
    const auto k1 = static_cast<long long>(std::floor(to / *w.every));
    if (static_cast<std::size_t>(k1 - k0 + 1) * 2 + points.size() > kMaxPoints) {
      too_many = true;
      break;
    }
    for (long long k = k0; k <= k1; ++k) {
      add(static_cast<double>(k) * *w.every + w.from);
      add(static_cast<double>(k) * *w.every + w.to.value_or(*w.every));
    }
  }
  if (too_many) {
    points.clear();
    for (std::size_t i = 0; i <= kMaxPoints / 4; ++i) points.push_back(from + (to - from) * i / (kMaxPoints / 4));
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  double joules = 0;
  for (std::size_t i = 0; i + 1 < points.size(); ++i) {
    const double dt = points[i + 1] - points[i];
    joules += power_at(points[i] + dt / 2) * dt;
  }
  return joules;
}

}  // namespace tarmac::sim
