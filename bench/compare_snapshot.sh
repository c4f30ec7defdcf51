#!/usr/bin/env bash
# One full snapshot of 8 simulated GPUs with processes: CPU time through tarmac's loader next to
# the same data through pynvml, in the same run, printed as a ratio. Not a test: it never fails
# on time. Usage: bench/compare_snapshot.sh [BUILD_DIR]   (needs scripts/peers.sh's pynvml)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
peers=$(scripts/peers.sh)
py="$peers/x/python3-pynvml/usr/lib/python3/dist-packages"
scenario=${TARMAC_BENCH_SCENARIO:-mixed-topology-8gpu}

tarmac_json=$("$build/tarmac" sim --scenario "$scenario" -- \
  "$build/bench/snapshot_bench" --benchmark_filter='BM_Snapshot/processes:1' --benchmark_format=json \
  --benchmark_min_time=2 2>/dev/null)
tarmac_us=$(python3 -c 'import json,sys; b=json.load(sys.stdin)["benchmarks"][0]; print("%.1f" % (b["cpu_time"] / {"ns":1e3,"us":1,"ms":1e-3}[b["time_unit"]]))' <<<"$tarmac_json")
gpus=$(python3 -c 'import json,sys; print(int(json.load(sys.stdin)["benchmarks"][0]["gpus"]))' <<<"$tarmac_json")
pynvml_us=$(PYTHONPATH="$py" "$build/tarmac" sim --scenario "$scenario" -- /usr/bin/python3 bench/pynvml_snapshot.py 300)

printf 'scenario %s, %s GPUs, one full snapshot with processes (CPU time):\n' "$scenario" "$gpus"
printf '  tarmac (loader + model + /proc attribution): %8.1f us\n' "$tarmac_us"
printf '  pynvml (same NVML calls, no attribution):    %8.1f us\n' "$pynvml_us"
python3 -c "print('  ratio pynvml / tarmac: %.1fx' % ($pynvml_us / $tarmac_us))"
