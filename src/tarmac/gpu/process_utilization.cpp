#include "tarmac/gpu/process_utilization.hpp"

#include <algorithm>

namespace tarmac::gpu {

namespace {

// Drivers and CPUs disagree on time by little; a sample stamped further ahead is not believed
// (and must not move the cursor there, which would hide every later sample as "not newer").
constexpr unsigned long long kFutureSlackUs = 60'000'000;

bool garbage(const UtilizationSample& s, unsigned long long now_us) {
  const unsigned worst = std::max({s.sm_pct, s.mem_pct, s.enc_pct, s.dec_pct, s.jpg_pct, s.ofa_pct});
  return worst > 100 || s.timestamp_us > now_us + kFutureSlackUs;
}

void set(GpuProcess& p, std::optional<unsigned> sm, std::optional<unsigned> mem) {
  p.sm_util_pct = sm;
  p.mem_util_pct = mem;
}

// One process's values from the samples of a successful read.
void apply_one(GpuProcess& p, const std::vector<UtilizationSample>& samples, unsigned long long last_seen_us,
               unsigned long long now_us) {
  const UtilizationSample* latest = nullptr;
  for (const auto& s : samples) {
    if (s.pid != p.pid || s.timestamp_us <= last_seen_us) continue;  // not asked for: the driver's slip
    if (garbage(s, now_us)) {
      set(p, std::nullopt, std::nullopt);
      return;
    }
    if (latest == nullptr || s.timestamp_us >= latest->timestamp_us) latest = &s;
  }
  if (latest == nullptr) {
    set(p, 0U, 0U);  // listed, and no sample in the period: it did not use the GPU
  } else {
    set(p, latest->sm_pct, latest->mem_pct);
  }
}

}  // namespace

unsigned long long apply_utilization(UtilizationRead read, const std::vector<UtilizationSample>& samples,
                                     unsigned long long last_seen_us, unsigned long long now_us,
                                     std::vector<GpuProcess>& processes) {
  switch (read) {
    case UtilizationRead::Unknown:
      for (auto& p : processes) set(p, std::nullopt, std::nullopt);
      return last_seen_us;
    case UtilizationRead::NoSamples:
      for (auto& p : processes) set(p, 0U, 0U);
      return last_seen_us;
    case UtilizationRead::Samples: break;
  }
  for (auto& p : processes) apply_one(p, samples, last_seen_us, now_us);
  unsigned long long cursor = last_seen_us;
  for (const auto& s : samples) {
    if (s.timestamp_us > cursor && !garbage(s, now_us)) cursor = s.timestamp_us;
  }
  return cursor;
}

}  // namespace tarmac::gpu
