#!/usr/bin/env bash
# bench/gpu_truth.sh: tarmac against the truth of a real NVIDIA GPU and driver (issue "Ship it").
# One script, one report (Markdown). Meant for a machine with a GPU (the device machine, an H200,
# when a session is lent one: run it with a timeout that leaves time for a rerun); CI runs it
# against the simulator (tests/integration/test_gpu_truth.py) so that it cannot rot.
#
#   bench/gpu_truth.sh [--tarmac PATH] [--nvidia-smi PATH] [-o REPORT] [--quick]
#
# It never changes the GPU's settings (clocks, power limits, persistence, MIG, reset): it reads,
# and runs a workload of its own. Sections:
#   1. the machine: driver, GPUs, tarmac --version
#   2. `tarmac query --query-gpu` against `nvidia-smi --query-gpu` for every field both know, in one
#      call of each (bench/gpu_truth_query.py): static fields must be identical, dynamic ones
#      (utilization, clocks, temperature, power, memory in use, ...) within a sampling tolerance;
#      every difference listed
#   3. tarmac status, topo -m, doctor --window 5s, idle
#   4. a workload (PyTorch when `import torch` sees a GPU; else TARMAC_SIM_LOAD, the simulator's
#      load program): a matmul loop must be `busy`, a process holding memory asleep `holding` (or
#      starved); `tarmac reap` (a dry run) must name the holder
#   5. `tarmac run` gives a command its GPU through CUDA_VISIBLE_DEVICES
#   6. the agent for 60 s (5 s with --quick): its CPU and resident memory, and GPM from /metrics
#   7. wall time of status and query against nvidia-smi's for the same GPUs (medians)
#   8. `tarmac sim capture` of the machine, when tarmac has it
# Exit 0 when every check held, 1 when one did not (the report says which), 2 on bad usage.
set -uo pipefail

tarmac=${TARMAC:-tarmac}
smi=${NVIDIA_SMI:-nvidia-smi}
report=gpu-truth-$(date -u +%Y%m%d-%H%M%S).md
quick=0
while (($#)); do
  case $1 in
    --tarmac) tarmac=$2; shift 2 ;;
    --nvidia-smi) smi=$2; shift 2 ;;
    -o) report=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu_truth.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
for tool in "$tarmac" "$smi"; do
  command -v "$tool" > /dev/null || { echo "gpu_truth.sh: $tool not found" >&2; exit 2; }
done
agent_seconds=60 runs=10 agent_window=5s
((quick)) && agent_seconds=5 runs=3 agent_window=2s
work=$(mktemp -d)
children=()
cleanup() {
  for p in "${children[@]}"; do kill "$p" 2> /dev/null; done
  wait 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
failures=0

out() { printf '%s\n' "$*" >> "$report"; }
block() { out '```'; cat >> "$report"; out '```'; }
check() {  # check OK|FAIL TEXT
  if [[ $1 == OK ]]; then out "- ok: $2"; else out "- **FAIL**: $2"; failures=$((failures + 1)); fi
}
median_ms() {  # median_ms RUNS CMD...: the median wall time of CMD in ms
  local n=$1 i t0 t1
  shift
  for ((i = 0; i < n; i++)); do
    t0=$(date +%s%N)
    "$@" > /dev/null 2>&1
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000))
  done | sort -n | awk '{v[NR] = $1} END {printf "%.1f\n", v[int((NR + 1) / 2)] / 1000}'
}

: > "$report"
out "# tarmac against the truth: $(hostname), $(date -u '+%Y-%m-%d %H:%M UTC')"
out ""
out "## 1. The machine"
{
  echo "tarmac: $("$tarmac" --version 2>&1)"
  echo "driver: $("$smi" --query-gpu=driver_version --format=csv,noheader 2>&1 | head -1)"
  echo "kernel: $(uname -r), $(nproc) CPUs"
  "$smi" -L 2>&1
} | block
gpus=$("$smi" --query-gpu=count --format=csv,noheader 2>/dev/null | head -1)

# ---- 2. query against nvidia-smi --------------------------------------------------------------
out ""
out "## 2. tarmac query against nvidia-smi, field by field"
here=$(cd "$(dirname "$0")" && pwd)
python3 "$here/gpu_truth_query.py" "$tarmac" "$smi" "$work" >> "$report" 2> "$work/query.err"
rc=$?
[[ -s $work/query.err ]] && block < "$work/query.err"
if [[ -s $work/diffs ]]; then block < "$work/diffs"; fi
if [[ -s $work/unknown ]]; then out "Fields tarmac does not answer:"; block < "$work/unknown"; fi
((rc == 0)) && check OK "static fields identical" || check FAIL "static fields differ (or the comparison failed: exit $rc)"

# ---- 3. status, topo, doctor, idle --------------------------------------------------------------
out ""
out "## 3. status, topo -m, doctor (idle)"
"$tarmac" status > "$work/status.txt" 2>&1; rc=$?
block < "$work/status.txt"
((rc == 0)) && check OK "status exit 0" || check FAIL "status exit $rc"
"$tarmac" --json status > "$work/status.json" 2>&1
"$tarmac" topo -m 2>&1 | block
timeout 60 "$tarmac" doctor --window 5s 2>&1 | head -60 | block

# ---- 4. a workload ------------------------------------------------------------------------------
out ""
out "## 4. A workload: busy, then holding"
# On the first GPU that is whole (not in MIG mode) and runs nothing.
target=$(python3 -c 'import json, sys
for g in json.load(sys.stdin)["gpus"]:
    if not g.get("processes") and not g.get("mig_mode_current") and not g.get("lost"):
        print(g["index"]); break' < "$work/status.json" 2>/dev/null)
class_of_gpu0() {
  "$tarmac" --json status --holding-after 5s 2>/dev/null |
    python3 -c "import json,sys; print(next((g.get('activity') for g in json.load(sys.stdin)['gpus'] if g['index'] == $target), None))" 2>/dev/null
}
wait_class() {  # wait_class SECONDS CLASS...: until the target GPU's class is one of CLASS
  local deadline=$((SECONDS + $1)) c
  shift
  while ((SECONDS < deadline)); do
    c=$(class_of_gpu0)
    for want in "$@"; do [[ $c == "$want" ]] && { echo "$c"; return 0; }; done
    sleep 1
  done
  echo "${c:-none}"
  return 1
}
busy_cmd=() hold_cmd=()
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  busy_cmd=(python3 -c 'import torch
x = torch.randn(8192, 8192, device="cuda")
while True:
    y = x @ x
    torch.cuda.synchronize()')
  hold_cmd=(python3 -c 'import torch, time
x = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
time.sleep(3600)')
  out "Workload: PyTorch $(python3 -c 'import torch; print(torch.__version__)')."
elif [[ -z $target ]]; then
  :
elif [[ -n ${TARMAC_SIM_LOAD:-} ]]; then
  busy_cmd=("$TARMAC_SIM_LOAD" --mem 4096 --util 95)
  hold_cmd=("$TARMAC_SIM_LOAD" --mem 4096 --util 0)
  out "Workload: the simulator's load program (no PyTorch with a GPU here)."
fi
if [[ -z $target ]]; then
  out "No GPU is free (every one runs something, or is in MIG mode): no workload."
  busy_cmd=()
fi
if ((${#busy_cmd[@]})); then
  out "On GPU $target."
  CUDA_VISIBLE_DEVICES=$target "${busy_cmd[@]}" > /dev/null 2>&1 &
  children+=($!)
  busy_pid=$!
  got=$(wait_class 90 busy)
  [[ $got == busy ]] && check OK "a matmul loop on GPU $target is busy" || check FAIL "a matmul loop on GPU $target is $got"
  "$tarmac" status 2>&1 | block
  kill "$busy_pid" 2> /dev/null; wait "$busy_pid" 2> /dev/null
  CUDA_VISIBLE_DEVICES=$target "${hold_cmd[@]}" > /dev/null 2>&1 &
  children+=($!)
  hold_pid=$!
  got=$(wait_class 90 holding starved)
  [[ $got == holding || $got == starved ]] && check OK "memory held asleep on GPU $target is $got" ||
    check FAIL "memory held asleep on GPU $target is $got"
  # reaper.min_age (10 minutes by default) would keep a process this young from being a candidate.
  printf '[reaper]\nmin_age = "0s"\n' > "$work/reap.toml"
  "$tarmac" --config "$work/reap.toml" reap --gpu "$target" --idle-for 5s --window 10s --min-memory 1GiB \
    > "$work/reap.txt" 2>&1
  "$tarmac" --config "$work/reap.toml" --json reap --gpu "$target" --idle-for 5s --window 10s --min-memory 1GiB \
    > "$work/reap.json" 2>&1
  block < "$work/reap.txt"
  decision=$(python3 -c "import json, sys
print(next((p['decision'] for p in json.load(sys.stdin)['processes'] if p['pid'] == $hold_pid), 'absent'))" \
    < "$work/reap.json" 2>&1)
  if [[ $decision == candidate ]]; then
    check OK "reap (dry run) names the holder, pid $hold_pid, as a candidate"
  elif [[ -n ${TARMAC_SIM_LOAD:-} && $decision == not-holding ]]; then
    # The simulator's processes open no /dev/nvidia*: reap cannot prove them holders, and says so.
    out "- note: under the simulator the holder cannot be proven (no device file): $decision"
  else
    check FAIL "reap (dry run) does not name the holder, pid $hold_pid, as a candidate: $decision"
  fi
  kill "$hold_pid" 2> /dev/null; wait "$hold_pid" 2> /dev/null
elif [[ -n $target ]]; then
  out "No workload: neither PyTorch with a GPU nor TARMAC_SIM_LOAD. Skipped."
fi

# ---- 5. tarmac run --------------------------------------------------------------------------------
out ""
out "## 5. tarmac run"
TARMAC_LOCK_DIR=$work/locks "$tarmac" run -- sh -c 'echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"' > "$work/run.txt" 2>&1
rc=$?
block < "$work/run.txt"
((rc == 0)) && grep -q '^CUDA_VISIBLE_DEVICES=[0-9MIG]' "$work/run.txt" && check OK "run gives the command its GPU" ||
  check FAIL "run (exit $rc)"

# ---- 6. the agent -----------------------------------------------------------------------------------
out ""
out "## 6. The agent for ${agent_seconds} s"
# With the matmul loop running, so that the GPM series and the classes have something to show.
load_pid=""
if ((${#busy_cmd[@]})); then
  CUDA_VISIBLE_DEVICES=$target "${busy_cmd[@]}" > /dev/null 2>&1 &
  load_pid=$!
  children+=($load_pid)
  out "With the matmul loop on GPU $target."
fi
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$tarmac" agent --state-dir "$work/state" --listen "127.0.0.1:$port" --socket "$work/agent.sock" \
  > "$work/agent.log" 2>&1 &
agent=$!
children+=($agent)
ticks=$(getconf CLK_TCK)
rss_max=0
start_cpu="" cpu=0 start_i=0 i=0
for ((i = 0; i < agent_seconds; i++)); do
  sleep 1
  [[ -r /proc/$agent/stat ]] || break
  read -r -a st < <(sed 's/^.*) //' "/proc/$agent/stat")
  cpu=$((st[11] + st[12]))
  [[ -z $start_cpu ]] && start_cpu=$cpu start_i=$i
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$agent/status")
  ((rss > rss_max)) && rss_max=$rss
done
if kill -0 "$agent" 2> /dev/null; then
  metrics=$(python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=10).read().decode())" 2>&1)
  span=$((i - start_i))
  ((span < 1)) && span=1
  out "CPU: $(awk -v c=$((cpu - start_cpu)) -v t="$ticks" -v s=$span 'BEGIN {printf "%.2f", 100 * c / t / s}') % of one core over ${span} s; resident memory at most $((rss_max / 1024)) MiB."
  check OK "the agent ran ${agent_seconds} s"
  gpm=$(grep -E '^DCGM_FI_PROF_(SM_ACTIVE|SM_OCCUPANCY|PIPE_TENSOR_ACTIVE|DRAM_ACTIVE)\{' <<< "$metrics" | head -8)
  if [[ -n $gpm ]]; then out "GPM series (Hopper and later):"; block <<< "$gpm"; else out "No GPM series (not Hopper, or too few slow reads)."; fi
  # The commands through the agent (its socket here, not the system's): the same GPUs, no NVML.
  source=$(TARMAC_SOCKET=$work/agent.sock "$tarmac" --json status 2> "$work/agent-status.err" |
    python3 -c 'import json, sys; print(json.load(sys.stdin).get("source"))' 2>&1)
  TARMAC_SOCKET=$work/agent.sock "$tarmac" status 2>&1 | block
  [[ $source == agent ]] && check OK "status reads the agent's view" || { check FAIL "status through the agent: source $source"; cat "$work/agent-status.err" "$work/agent.log" | tail -20 | block; }
  TARMAC_SOCKET=$work/agent.sock timeout 60 "$tarmac" doctor --window "$agent_window" > "$work/doctor-agent.txt" 2>&1
  head -40 "$work/doctor-agent.txt" | block
  grep -q "the agent's last" "$work/doctor-agent.txt" && check OK "doctor diagnoses the agent's window" ||
    check FAIL "doctor did not take the agent's window"
  t_agent=$(TARMAC_SOCKET=$work/agent.sock median_ms "$runs" "$tarmac" status)
  t_agent_doctor=$(TARMAC_SOCKET=$work/agent.sock median_ms "$runs" "$tarmac" doctor --window "$agent_window")
  t_direct=$(median_ms "$runs" "$tarmac" status --direct)
  t_smi_full=$(median_ms "$runs" "$smi")
  out ""
  out "Wall time with the agent running (median of $runs, ms):"
  out ""
  out "| command | ms |"
  out "|---|---|"
  out "| tarmac status (through the agent) | $t_agent |"
  out "| tarmac doctor --window $agent_window (through the agent) | $t_agent_doctor |"
  out "| tarmac status --direct | $t_direct |"
  out "| nvidia-smi | $t_smi_full |"
  out ""
  out "status through the agent / nvidia-smi: $(awk -v a="$t_agent" -v b="$t_smi_full" 'BEGIN {printf "%.2f", b ? a / b : 0}');" \
    "status --direct / nvidia-smi: $(awk -v a="$t_direct" -v b="$t_smi_full" 'BEGIN {printf "%.2f", b ? a / b : 0}')."
  kill "$agent"; wait "$agent" 2> /dev/null
else
  check FAIL "the agent exited early"
  tail -20 "$work/agent.log" | block
fi

[[ -n $load_pid ]] && { kill "$load_pid" 2> /dev/null; wait "$load_pid" 2> /dev/null; }

# ---- 7. timing ---------------------------------------------------------------------------------------
out ""
out "## 7. Wall time against nvidia-smi (median of $runs)"
fields=index,name,pci.bus_id,temperature.gpu,utilization.gpu,utilization.memory,memory.total,memory.used,power.draw,clocks.sm
t_status=$(median_ms "$runs" "$tarmac" status)
t_query=$(median_ms "$runs" "$tarmac" query --query-gpu=$fields --format=csv)
t_smi=$(median_ms "$runs" "$smi" --query-gpu=$fields --format=csv)
t_smi_full=$(median_ms "$runs" "$smi")
out "| command | ms |"
out "|---|---|"
out "| tarmac status | $t_status |"
out "| nvidia-smi | $t_smi_full |"
out "| tarmac query (10 fields) | $t_query |"
out "| nvidia-smi --query-gpu (10 fields) | $t_smi |"
out ""
out "tarmac status / nvidia-smi: $(awk -v a="$t_status" -v b="$t_smi_full" 'BEGIN {printf "%.2f", b ? a / b : 0}'); query / nvidia-smi --query-gpu: $(awk -v a="$t_query" -v b="$t_smi" 'BEGIN {printf "%.2f", b ? a / b : 0}') (${gpus:-?} GPUs)."

# ---- 8. capture ----------------------------------------------------------------------------------------
out ""
out "## 8. sim capture"
capture_query=name,uuid,pci.bus_id,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,pstate,persistence_mode,mig.mode.current,ecc.mode.current,vbios_version
# With what the machine said at the moment, for a replay of the capture to be compared with.
base=${report%.md}
"$tarmac" --json status --direct > "$base.status.json" 2> "$work/status-json.err"
"$tarmac" topo -m > "$base.topo.txt" 2>&1
"$smi" --query-gpu="$capture_query" --format=csv > "$base.query-gpu.csv" 2>&1
if "$tarmac" sim capture -o "$work/captured.toml" > "$work/capture.txt" 2>&1; then
  cp "$work/captured.toml" "$base.scenario.toml"
  out "Written: $base.scenario.toml, with the machine's own status --json, topo -m and nvidia-smi"
  out "--query-gpu beside it ($base.status.json, .topo.txt, .query-gpu.csv) for a replay to be compared with."
else
  out "Not available in this tarmac:"
  head -5 "$work/capture.txt" | block
fi

out ""
out "## Summary: $failures check(s) failed"
echo "gpu_truth.sh: report in $report ($failures failed)" >&2
((failures == 0))
