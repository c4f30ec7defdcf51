#!/usr/bin/env bash
# The agent's HTTP endpoint under load (docs/metrics.md): `tarmac agent --listen` on a held
# simulation of 8 GPUs with processes, hammered with wrk (-t2 -c50 --latency) on /metrics and on
# /api/v1/gpus. For each path: median and p99 latency and requests/s from wrk, the agent's resident
# memory (VmRSS) before any request, after a warm-up and after at least REQUESTS requests of that
# path (tarmac_agent_http_requests_total counts them), and the goals; then the latency of one client
# at a time (-t1 -c1, how Prometheus scrapes). A benchmark, not a test: it
# never fails on the figures.
#
# Goals: p99 under 5 ms; memory flat (VmRSS after REQUESTS requests within 1 MiB of VmRSS after the
# warm-up).
#
# Usage: bench/http_bench.sh   (env: TARMAC_BUILD_DIR=build, SCENARIO=mixed-topology-8gpu,
#                               DURATION=20 (s of the measured wrk run), REQUESTS=100000,
#                               THREADS=2, CONNECTIONS=50)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${TARMAC_BUILD_DIR:-$here/build}" && pwd)
tarmac="$build/tarmac"
simlib="$build/sim/libnvidia-ml.so.1"
SCENARIO=${SCENARIO:-mixed-topology-8gpu}
DURATION=${DURATION:-20}
REQUESTS=${REQUESTS:-100000}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-50}
WRK=$(command -v wrk || echo /usr/bin/wrk)
for f in "$tarmac" "$simlib" "$WRK"; do
  [[ -x "$f" || -e "$f" ]] || { echo "missing: $f (build tarmac; Debian: apt install wrk)" >&2; exit 2; }
done
command -v curl > /dev/null || { echo "missing: curl" >&2; exit 2; }

work=$(mktemp -d)
sim_pid="" agent_pid=""
cleanup() {
  [[ -n "$agent_pid" ]] && kill "$agent_pid" 2> /dev/null && wait "$agent_pid" 2> /dev/null || true
  [[ -n "$sim_pid" ]] && kill "$sim_pid" 2> /dev/null && wait "$sim_pid" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

unset CUDA_VISIBLE_DEVICES
"$tarmac" sim --scenario "$SCENARIO" --speed 1 --state "$work/sim" --hold > "$work/sim.log" 2>&1 &
sim_pid=$!
for _ in $(seq 300); do [[ -e "$work/sim/ready" ]] && break; sleep 0.1; done
[[ -e "$work/sim/ready" ]] || { echo "the simulator did not start:" >&2; cat "$work/sim.log" >&2; exit 2; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
# The agent at its default cadences (1 s samples, 5 s processes, 30 s slow values).
TARMAC_NVML_LIB="$simlib" TARMAC_SIM_STATE="$work/sim" \
  "$tarmac" agent --state-dir "$work/state" --listen "127.0.0.1:$port" > "$work/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 300); do curl -sf "$base/healthz" > /dev/null 2>&1 && break; sleep 0.1; done
curl -sf "$base/healthz" > /dev/null || { echo "the agent serves no /healthz:" >&2; cat "$work/agent.log" >&2; exit 2; }
sleep 2   # a first snapshot of every GPU and its processes

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$agent_pid/status"; }
requests_total() { curl -sf "$base/metrics" | awk '/^tarmac_agent_http_requests_total / {printf "%d", $2}'; }
# wrk's latency ("812.00us", "1.20ms", "2.01s") in ms.
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000; else if (v ~ /m$/) n *= 60000; printf "%.3f", n }'; }
met() { if [[ "$1" == 1 ]]; then echo MET; else echo "NOT MET"; fi; }

gpus=$(curl -sf "$base/metrics" | grep -c '^DCGM_FI_DEV_GPU_UTIL{' || true)
procs=$(curl -sf "$base/metrics" | grep -c '^tarmac_process_info{' || true)
bytes=$(curl -sf "$base/metrics" | wc -c)
echo "scenario $SCENARIO: $gpus GPUs, $procs processes; /metrics is $bytes bytes; $(nproc) CPUs"
echo "wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s --latency (agent, simulator and wrk share the CPUs)"
rss_start=$(rss_kib)
echo "agent VmRSS at start: $rss_start KiB"
echo

summary=()
for path in /metrics /api/v1/gpus; do
  url="$base$path"
  curl -sf -o /dev/null "$url" || { echo "GET $path failed" >&2; exit 2; }
  "$WRK" -t"$THREADS" -c"$CONNECTIONS" -d2s "$url" > "$work/warm.txt" 2>&1   # warm-up
  rss_warm=$(rss_kib)
  n0=$(requests_total)
  "$WRK" -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "$url" > "$work/wrk.txt" 2>&1
  p50=$(awk '$1 == "50%" {print $2}' "$work/wrk.txt")
  p99=$(awk '$1 == "99%" {print $2}' "$work/wrk.txt")
  rps=$(awk '$1 == "Requests/sec:" {print $2}' "$work/wrk.txt")
  non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$work/wrk.txt")
  sockerr=$(grep 'Socket errors:' "$work/wrk.txt" || true)
  # Keep going until REQUESTS requests of this path have been answered since the warm-up.
  extra_runs=0
  while (( $(requests_total) - n0 < REQUESTS )) && (( extra_runs < 30 )); do
    "$WRK" -t"$THREADS" -c"$CONNECTIONS" -d10s "$url" > "$work/more.txt" 2>&1
    extra_runs=$((extra_runs + 1))
  done
  n=$(( $(requests_total) - n0 ))
  # One client at a time, as Prometheus scrapes: latency without queueing behind 49 others.
  "$WRK" -t1 -c1 -d5s --latency "$url" > "$work/one.txt" 2>&1
  one50=$(awk '$1 == "50%" {print $2}' "$work/one.txt")
  one99=$(awk '$1 == "99%" {print $2}' "$work/one.txt")
  one_rps=$(awk '$1 == "Requests/sec:" {print $2}' "$work/one.txt")
  render=$(curl -sf "$base/metrics" | awk '/^tarmac_agent_scrape_duration_seconds / {printf "%.3f", $2 * 1000}')
  sleep 1
  rss_after=$(rss_kib)
  p50ms=$(to_ms "$p50"); p99ms=$(to_ms "$p99")
  p99_ok=$(awk -v x="$p99ms" 'BEGIN { print (x < 5) ? 1 : 0 }')
  grow=$((rss_after - rss_warm))
  flat_ok=$(( grow < 1024 ? 1 : 0 ))
  echo "GET $path"
  echo "  latency median $p50 (${p50ms} ms), p99 $p99 (${p99ms} ms); $rps requests/s"
  echo "  one client (wrk -t1 -c1 -d5s): median $one50, p99 $one99; $one_rps requests/s"
  [[ -n "$non2xx" ]] && echo "  non-2xx responses: $non2xx"
  [[ -n "$sockerr" ]] && echo "  wrk:$sockerr"
  echo "  agent VmRSS: $rss_warm KiB after the warm-up, $rss_after KiB after $n more requests ($((grow >= 0 ? grow : -grow)) KiB $([[ $grow -ge 0 ]] && echo more || echo less))"
  echo "  goal p99 under 5 ms: $(met "$p99_ok")"
  echo "  goal memory flat (< 1 MiB growth over $n requests): $(met "$flat_ok")"
  echo
  summary+=("$path p99 ${p99ms} ms $(met "$p99_ok"), memory $(met "$flat_ok")")
done

echo "last /metrics render (tarmac_agent_scrape_duration_seconds): ${render} ms"
echo "agent VmRSS at the end: $(rss_kib) KiB (VmHWM $(awk '/^VmHWM:/ {print $2}' "/proc/$agent_pid/status") KiB); tarmac_agent_http_requests_total $(requests_total)"
printf '%s\n' "${summary[@]}"
