#include "tarmac/alerts/check.hpp"

#include <algorithm>
#include <map>

#include "tarmac/util/units.hpp"

namespace tarmac::alerts {

namespace {

constexpr long long kMarginMs = 15 * 60 * 1000;  // room for a `for` to start before the window's end

// The agent's time between process reads, from the recorded ones (their median gap).
long long process_interval_ms(const std::vector<store::ProcessSample>& samples) {
  std::vector<long long> times;
  for (const auto& s : samples) {
    if (times.empty() || times.back() != s.ts_ms) times.push_back(s.ts_ms);
  }
  std::vector<long long> gaps;
  for (std::size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  if (gaps.empty()) return 5000;
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<long>(gaps.size() / 2), gaps.end());
  return gaps[gaps.size() / 2];
}

}  // namespace

Result<CheckResult> check(store::Reader& reader, const AlertConfig& config, const gpu::ActivityThresholds& activity) {
  CheckResult result;
  TARMAC_TRY_ASSIGN(const auto recorded, reader.recorded());
  if (!recorded) return result;
  result.range.until_ms = recorded->until_ms + 1;
  result.range.since_ms = std::max(recorded->since_ms, result.range.until_ms - config.longest_for_ms() - kMarginMs);
  TARMAC_TRY_ASSIGN(const auto gpus, reader.gpus());
  TARMAC_TRY_ASSIGN(const auto samples, reader.samples(result.range, {}));
  TARMAC_TRY_ASSIGN(const auto process_samples, reader.process_samples(result.range, {}));
  TARMAC_TRY_ASSIGN(const auto spans, reader.processes(result.range));
  const long long linger_ms = process_interval_ms(process_samples);

  std::map<unsigned, const store::GpuInfo*> info;
  for (const auto& g : gpus) info[g.gpu] = &g;
  std::map<unsigned, std::vector<const store::ProcessSpan*>> spans_by_gpu;
  for (const auto& s : spans) spans_by_gpu[s.gpu].push_back(&s);

  Evaluator evaluator(config, activity);
  std::map<std::pair<unsigned, unsigned>, long long> process_mem_mib;  // latest read, by (gpu, pid)
  std::size_t next_process = 0;
  for (std::size_t i = 0; i < samples.size();) {
    const long long ts = samples[i].ts_ms;
    while (next_process < process_samples.size() && process_samples[next_process].ts_ms <= ts) {
      const auto& p = process_samples[next_process++];
      if (p.mem_used_mib) process_mem_mib[{p.gpu, p.pid}] = *p.mem_used_mib;
    }
    gpu::Snapshot snap;
    snap.timestamp_unix_ms = ts;
    std::map<unsigned, gpu::Activity> classes;
    for (; i < samples.size() && samples[i].ts_ms == ts; ++i) {
      const auto& s = samples[i];
      ++result.samples;
      gpu::Device d;
      d.id.index = s.gpu;
      if (auto it = info.find(s.gpu); it != info.end()) {
        if (!it->second->uuid.empty()) d.id.uuid = it->second->uuid;
        if (!it->second->name.empty()) d.id.name = it->second->name;
        if (it->second->mem_total_mib) d.id.mem_total_bytes = static_cast<std::uint64_t>(*it->second->mem_total_mib) * util::kMiB;
      }
      const auto mib = [](std::optional<long long> v) -> std::optional<std::uint64_t> {
        if (!v || *v < 0) return std::nullopt;
        return static_cast<std::uint64_t>(*v) * util::kMiB;
      };
      const auto pct = [](std::optional<long long> v) -> std::optional<unsigned> {
        if (!v || *v < 0) return std::nullopt;
        return static_cast<unsigned>(*v);
      };
      d.sample.mem_used_bytes = mib(s.mem_used_mib);
      d.sample.util_gpu_pct = pct(s.util_pct);
      d.sample.util_mem_pct = pct(s.mem_util_pct);
      d.sample.temp_c = pct(s.temp_c);
      for (const auto* span : spans_by_gpu[s.gpu]) {
        if (span->first_ms > ts || ts > span->last_ms + linger_ms) continue;
        gpu::GpuProcess p;
        p.pid = span->pid;
        auto mem = process_mem_mib.find({s.gpu, span->pid});
        p.used_mem_bytes = mib(mem != process_mem_mib.end() ? mem->second : span->mem_used_mib_max);
        p.host.pid = span->pid;
        if (!span->user.empty()) p.host.user = span->user;
        if (!span->command.empty()) p.host.command_line = span->command;
        if (!span->container.empty()) p.host.container = host::ContainerRef{"container", span->container, std::nullopt};
        if (!span->slurm_job.empty()) p.host.slurm_job_id = span->slurm_job;
        p.host.start_time_unix = span->start_unix;
        d.processes.push_back(std::move(p));
      }
      classes[s.gpu] = s.activity;
      snap.devices.push_back(std::move(d));
    }
    (void)evaluator.observe(snap, classes, ts);
    result.as_of_ms = ts;
  }
  result.firing = evaluator.firing();
  return result;
}

}  // namespace tarmac::alerts
