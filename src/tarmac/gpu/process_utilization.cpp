#include "tarmac/gpu/process_utilization.hpp"

#include <algorithm>
#include <string_view>

namespace tarmac::gpu {

namespace {

// Drivers and CPUs disagree on time by little; a sample stamped further ahead is not believed
// (and must not move the cursor there, which would hide every later sample as "not newer").
constexpr unsigned long long kFutureSlackUs = 60'000'000;

bool garbage(const UtilizationSample& s, unsigned long long now_us) {
  const unsigned worst = std::max({s.sm_pct, s.mem_pct, s.enc_pct, s.dec_pct, s.jpg_pct.value_or(0), s.ofa_pct.value_or(0)});
  return worst > 100 || s.timestamp_us > now_us + kFutureSlackUs;
}

// Every engine unknown.
void set_unknown(GpuProcess& p) {
  p.sm_util_pct = p.mem_util_pct = p.enc_util_pct = p.dec_util_pct = p.jpg_util_pct = p.ofa_util_pct = std::nullopt;
}

// Every engine a known 0; JPEG and OFA only where the function that answered has them.
void set_idle(GpuProcess& p, bool has_jpg_ofa) {
  p.sm_util_pct = p.mem_util_pct = p.enc_util_pct = p.dec_util_pct = 0U;
  p.jpg_util_pct = p.ofa_util_pct = has_jpg_ofa ? std::optional<unsigned>(0U) : std::nullopt;
}

void raise(std::optional<unsigned>& to, std::optional<unsigned> value) {
  if (value) to = std::max(to.value_or(0), *value);
}

// The busiest of `s` and what `p` already holds, engine by engine.
void take_busiest(GpuProcess& p, const UtilizationSample& s) {
  raise(p.sm_util_pct, s.sm_pct);
  raise(p.mem_util_pct, s.mem_pct);
  raise(p.enc_util_pct, s.enc_pct);
  raise(p.dec_util_pct, s.dec_pct);
  raise(p.jpg_util_pct, s.jpg_pct);
  raise(p.ofa_util_pct, s.ofa_pct);
}

// What a listed process without a sample of its own reads as.
enum class Absent { Idle, Unknown };

// Idle only when the read returned every sample and each process's work is charged to itself.
Absent absent_reads_as(UtilizationRead read, const std::vector<GpuProcess>& processes) {
  return read == UtilizationRead::SamplesFull || runs_mps(processes) ? Absent::Unknown : Absent::Idle;
}

void set_absent(GpuProcess& p, Absent absent, bool has_jpg_ofa) {
  if (absent == Absent::Idle) {
    set_idle(p, has_jpg_ofa);
  } else {
    set_unknown(p);
  }
}

// Whether `h` is the MPS server: by its comm (which keeps 15 characters, so the control daemon
// matches too, and is MPS all the same) or its program's base name. A user who names a process so
// only makes the GPU's idle processes unknown: never a kill.
bool is_mps_server(const host::ProcessInfo& h) {
  if (h.name && h.name->starts_with(kMpsComm)) return true;
  if (!h.command_line) return false;
  std::string_view program(*h.command_line);
  program = program.substr(0, program.find(' '));
  if (const auto slash = program.rfind('/'); slash != std::string_view::npos) program.remove_prefix(slash + 1);
  return program == kMpsServerProgram;
}

// One process's values from the samples of a successful read.
void apply_one(GpuProcess& p, const std::vector<UtilizationSample>& samples, unsigned long long last_seen_us,
               unsigned long long now_us, Absent absent) {
  // Listed, and no sample in the period: it did not use the GPU (0 on every engine the function
  // has), unless the read may have missed its samples.
  const bool has_jpg_ofa = std::any_of(samples.begin(), samples.end(), [](const auto& s) { return s.jpg_pct.has_value(); });
  set_absent(p, absent, has_jpg_ofa);
  for (const auto& s : samples) {
    if (s.pid != p.pid || s.timestamp_us <= last_seen_us) continue;  // not asked for: the driver's slip
    if (garbage(s, now_us)) {
      set_unknown(p);
      return;
    }
    take_busiest(p, s);
  }
}

}  // namespace

bool runs_mps(const std::vector<GpuProcess>& processes) {
  return std::any_of(processes.begin(), processes.end(),
                     [](const GpuProcess& p) { return p.type == ProcessType::Mps || is_mps_server(p.host); });
}

unsigned long long utilization_since(std::optional<unsigned long long> cursor, unsigned long long now_us) {
  const unsigned long long window_start = now_us > kMinUtilizationWindowUs ? now_us - kMinUtilizationWindowUs : 0;
  return std::min(cursor.value_or(window_start), window_start);
}

unsigned long long apply_utilization(UtilizationRead read, const std::vector<UtilizationSample>& samples,
                                     unsigned long long last_seen_us, unsigned long long now_us,
                                     std::vector<GpuProcess>& processes) {
  const Absent absent = absent_reads_as(read, processes);
  switch (read) {
    case UtilizationRead::Unknown:
      for (auto& p : processes) set_unknown(p);
      return last_seen_us;
    case UtilizationRead::NoSamples:
      // Which function answered is not known here: JPEG and OFA stay unknown.
      for (auto& p : processes) set_absent(p, absent, false);
      return last_seen_us;
    case UtilizationRead::Samples:
    case UtilizationRead::SamplesFull: break;
  }
  for (auto& p : processes) apply_one(p, samples, last_seen_us, now_us, absent);
  unsigned long long cursor = last_seen_us;
  for (const auto& s : samples) {
    if (s.timestamp_us > cursor && !garbage(s, now_us)) cursor = s.timestamp_us;
  }
  return cursor;
}

}  // namespace tarmac::gpu
