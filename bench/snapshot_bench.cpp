// CPU cost of one full snapshot (every device value plus processes) through tarmac's loader.
// Run under the simulator (bench/compare_snapshot.sh does, next to pynvml reading the same data).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "tarmac/gpu/backend.hpp"

namespace {

void BM_Snapshot(benchmark::State& state) {
  auto backend = tarmac::gpu::open_nvml_backend("");
  if (!backend.ok()) {
    state.SkipWithError(backend.error().message.c_str());
    return;
  }
  const tarmac::gpu::SnapshotOptions options{.processes = state.range(0) != 0, .slow = false, .topology = false};
  std::size_t devices = 0;
  for (auto _ : state) {
    auto snap = (*backend)->snapshot(options);
    if (!snap.ok()) {
      state.SkipWithError(snap.error().message.c_str());
      return;
    }
    devices = snap->devices.size();
    benchmark::DoNotOptimize(snap->devices.data());
  }
  state.counters["gpus"] = static_cast<double>(devices);
}
BENCHMARK(BM_Snapshot)->Arg(1)->Arg(0)->ArgName("processes")->MeasureProcessCPUTime()->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
