// The store's own ingest rate, without NVML: GPU-samples per second through Recorder::add and
// flush (one transaction with its minute and hour rollups), in batches the size one flush holds
// at 8 GPUs every second for 5 s and under a fast simulation. Run by bench/agent_bench.py.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <unistd.h>

#include "tarmac/store/recorder.hpp"

namespace {

void BM_RecorderIngest(benchmark::State& state) {
  const auto batch = static_cast<long long>(state.range(0));  // snapshots per flush
  const auto dir = std::filesystem::temp_directory_path() / ("tarmac-store-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  tarmac::store::RecorderOptions options;
  options.path = (dir / "tarmac.db").string();
  tarmac::store::Recorder recorder(options);
  long long ts = 1736121600000;
  long long samples = 0;
  for (auto _ : state) {
    for (long long i = 0; i < batch; ++i) {
      ts += 1000;
      for (unsigned gpu = 0; gpu < 8; ++gpu) {
        tarmac::store::GpuSample s;
        s.ts_ms = ts;
        s.gpu = gpu;
        s.util_pct = (ts / 1000 + gpu) % 101;
        s.mem_util_pct = 40;
        s.mem_used_mib = 72000;
        s.power_w = 612;
        s.temp_c = 65;
        s.sm_mhz = 1980;
        s.mem_mhz = 2619;
        recorder.add(s);
        ++samples;
      }
    }
    if (!recorder.flush().ok) state.SkipWithError("flush failed");
  }
  state.counters["gpu_samples_per_s"] = benchmark::Counter(static_cast<double>(samples), benchmark::Counter::kIsRate);
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_RecorderIngest)->Arg(5)->Arg(2500)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
