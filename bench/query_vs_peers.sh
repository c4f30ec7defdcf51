#!/usr/bin/env bash
# tarmac query against its peers, all through the same NVML simulator in one run (issue 3):
#   - wall time of `tarmac query --query-gpu=<10 common fields> --format=csv`, of the real
#     nvidia-smi with the same arguments and of `gpustat --json`, each started many times
#     (hyperfine when installed, else a loop: median and spread);
#   - CPU used by `tarmac query -lms 100` over SECONDS s, from /proc/<pid>/stat, as % of one core.
# Prints the ratios tarmac/nvidia-smi and tarmac/gpustat. A benchmark, not a test: it never fails
# on time (goals: <= 0.5x nvidia-smi, <= 0.1x gpustat, < 2 % of a core in the 100 ms loop).
#
# Usage: bench/query_vs_peers.sh   (env: TARMAC_BUILD_DIR=build, TARMAC_PEERS=~/.cache/tarmac-peers,
#                                   SCENARIO=mixed-topology-8gpu, RUNS=30, SECONDS_CPU=20)
set -euo pipefail

FIELDS="index,name,pci.bus_id,temperature.gpu,utilization.gpu,utilization.memory,memory.total,memory.used,power.draw,clocks.sm"

if [[ "${1:-}" != "--inner" ]]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  build=$(cd "${TARMAC_BUILD_DIR:-$here/build}" && pwd)
  peers=${TARMAC_PEERS:-${HOME:-/root}/.cache/tarmac-peers}/x
  export BENCH_TARMAC="$build/tarmac"
  export BENCH_NVIDIA_SMI="$peers/nvidia-smi/usr/lib/nvidia/current/nvidia-smi"
  export BENCH_GPUSTAT="$peers/gpustat/usr/bin/gpustat"
  pp=""
  for p in python3-pynvml gpustat python3-psutil python3-blessed python3-wcwidth; do
    pp="$pp${pp:+:}$peers/$p/usr/lib/python3/dist-packages"
  done
  export BENCH_PYTHONPATH="$pp"
  for f in "$BENCH_TARMAC" "$BENCH_NVIDIA_SMI" "$BENCH_GPUSTAT"; do
    [[ -e "$f" ]] || { echo "missing: $f (build tarmac; scripts/peers.sh fetches the peers)" >&2; exit 2; }
  done
  unset CUDA_VISIBLE_DEVICES TARMAC_NVML_LIB
  exec "$BENCH_TARMAC" sim --scenario "${SCENARIO:-mixed-topology-8gpu}" -- bash "$0" --inner
fi

# Inside the simulation: every command below talks to the same simulated GPUs.
RUNS=${RUNS:-30}
SECONDS_CPU=${SECONDS_CPU:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmd_tarmac="$BENCH_TARMAC query --query-gpu=$FIELDS --format=csv"
cmd_smi="$BENCH_NVIDIA_SMI --query-gpu=$FIELDS --format=csv"
cmd_gpustat="env PYTHONPATH=$BENCH_PYTHONPATH /usr/bin/python3 $BENCH_GPUSTAT --json"

# Each command must work before it is timed.
for c in "$cmd_tarmac" "$cmd_smi" "$cmd_gpustat"; do
  $c > "$work/out" 2>&1 || { echo "failed: $c" >&2; cat "$work/out" >&2; exit 2; }
done

echo "scenario ${SCENARIO:-mixed-topology-8gpu}, $(nproc) CPUs, $RUNS runs each"
if command -v hyperfine > /dev/null; then
  hyperfine -N --warmup 3 --runs "$RUNS" --style basic --export-json "$work/h.json" \
    -n tarmac "$cmd_tarmac" -n nvidia-smi "$cmd_smi" -n gpustat "$cmd_gpustat" > "$work/hyperfine.txt" 2>&1 || true
  timings="$work/h.json"
else
  # No hyperfine: time each command RUNS times with a loop.
  python3 - "$RUNS" "$work/h.json" "$cmd_tarmac" "$cmd_smi" "$cmd_gpustat" <<'PY'
import json, shlex, subprocess, sys, time
runs, out, cmds = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
results = []
for name, cmd in zip(["tarmac", "nvidia-smi", "gpustat"], cmds):
    times = []
    for _ in range(runs + 3):
        t = time.perf_counter()
        subprocess.run(shlex.split(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    results.append({"command": name, "times": times[3:]})
json.dump({"results": results}, open(out, "w"))
PY
  timings="$work/h.json"
fi

# CPU of the 100 ms loop: utime+stime (clock ticks) between 1 s after start and SECONDS_CPU s later.
$BENCH_TARMAC query --query-gpu="$FIELDS" --format=csv -lms 100 > /dev/null &
loop=$!
ticks() { awk '{print $14 + $15}' "/proc/$loop/stat"; }
sleep 1
t0=$(ticks)
s0=$(date +%s.%N)
sleep "$SECONDS_CPU"
t1=$(ticks)
s1=$(date +%s.%N)
kill "$loop"
wait "$loop" 2> /dev/null || true

python3 - "$timings" "$t0" "$t1" "$s0" "$s1" "$(getconf CLK_TCK)" <<'PY'
import json, statistics, sys
data = json.load(open(sys.argv[1]))
t0, t1, s0, s1, hz = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
median = {}
print(f"{'command':<12}{'median ms':>11}{'min ms':>9}{'max ms':>9}{'stddev ms':>11}")
for r in data["results"]:
    t = [x * 1000 for x in r["times"]]
    median[r["command"]] = statistics.median(t)
    print(f"{r['command']:<12}{statistics.median(t):>11.1f}{min(t):>9.1f}{max(t):>9.1f}{statistics.pstdev(t):>11.1f}")
cpu = (t1 - t0) / hz / (s1 - s0) * 100
print(f"ratio tarmac/nvidia-smi: {median['tarmac'] / median['nvidia-smi']:.3f}  (goal <= 0.5)")
print(f"ratio tarmac/gpustat:    {median['tarmac'] / median['gpustat']:.3f}  (goal <= 0.1)")
print(f"tarmac query -lms 100: {cpu:.2f} % of one core over {s1 - s0:.1f} s  (goal < 2 %)")
PY
