#!/usr/bin/env python3
"""`tarmac status` against `nvidia-smi` on the same simulated GPUs (issue 20), at 8, 16 and 32 GPUs
with four processes each (generated scenarios), in one run:
  - nvidia-smi (its default table), started RUNS times: the median wall time;
  - `tarmac status --direct`: NVML opened and read by the command itself;
  - `tarmac status` with an agent running: the agent's live view over its socket.
Prints each median and the ratios to nvidia-smi. Goals: through the agent <= 0.2x nvidia-smi;
direct never above 1x. A benchmark, not a test: it never fails on time.

Usage: bench/status_bench.py   (env: TARMAC_BUILD_DIR=build (use the release build for the
shipped binary's numbers: TARMAC_BUILD_DIR=build-release, the simulator from build/),
TARMAC_SIM_DIR=build/sim, TARMAC_PEERS=~/.cache/tarmac-peers, RUNS=30, SIZES=8,16,32)
"""
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
BUILD = pathlib.Path(os.environ.get("TARMAC_BUILD_DIR", REPO / "build")).resolve()
SIM_DIR = pathlib.Path(os.environ.get("TARMAC_SIM_DIR", REPO / "build" / "sim")).resolve()
TARMAC = BUILD / "tarmac"
SIM = SIM_DIR / "tarmac-sim"
PEERS = pathlib.Path(os.environ.get("TARMAC_PEERS", pathlib.Path.home() / ".cache" / "tarmac-peers"))
NVIDIA_SMI = PEERS / "x" / "nvidia-smi" / "usr" / "lib" / "nvidia" / "current" / "nvidia-smi"
RUNS = int(os.environ.get("RUNS", "30"))
SIZES = [int(s) for s in os.environ.get("SIZES", "8,16,32").split(",")]
PROCESSES_PER_GPU = 4


def scenario(gpus):
    """The GPUs of bench/top_bench_scenario.toml (H100 80GB), GPUS of them, four processes each."""
    base = (HERE / "top_bench_scenario.toml").read_text()
    head = base[:base.index("[[gpu]]")]
    head = re.sub(r'^name = .*$', f'name = "status-bench-{gpus}gpu"', head, count=1, flags=re.M)
    head = re.sub(r'^description = .*$', f'description = "{gpus} busy H100, four processes each"', head, count=1,
                  flags=re.M)
    out = [head]
    for g in range(gpus):
        bus = 0x10 + g * 4
        out.append(f'[[gpu]]\npci_bus_id = "00000000:{bus:02X}:00.0"\n'
                   f'uuid = "GPU-{g:08x}-0000-4000-8000-{g:012x}"\nserial = "{1654923000000 + g}"\n'
                   f'memory_overhead_mib = 0\nnuma_node = {0 if g < gpus // 2 else 1}\n')
    for g in range(gpus):
        out.append(f"[[timeline]]\ngpu = {g}\nutil_gpu = {60 + g % 40}\nutil_mem = 40\ntemp_c = 70\npower_w = 500\n")
    for g in range(gpus):
        for k in range(PROCESSES_PER_GPU):
            out.append(f'[[process]]\ngpu = {g}\nname = "python"\n'
                       f'cmdline = "python -m torch.distributed.run pretrain.py --local-rank {g * PROCESSES_PER_GPU + k}"\n'
                       f'memory_mib = {8000 + k * 1000}\nsm_util = {10 + k}\n')
    return "\n".join(out)


def median_ms(cmd, env):
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append((time.perf_counter() - t0) * 1000)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(map(str, cmd))}: exit {r.returncode}: {r.stderr.decode()[-500:]}")
    return statistics.median(times)


def wait_for(predicate, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def one_size(gpus, work):
    path = work / f"status-bench-{gpus}.toml"
    path.write_text(scenario(gpus))
    state = work / f"sim-{gpus}"
    sim = subprocess.Popen([str(SIM), "run", "--scenario", str(path), "--state", str(state), "--hold"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    agent = None
    try:
        if not wait_for(lambda: (state / "ready").exists() or sim.poll() is not None) or sim.poll() is not None:
            raise SystemExit(f"the simulator did not start: {sim.stderr.read().decode()[-500:]}")
        env = dict(os.environ, TARMAC_NVML_LIB=str(SIM_DIR / "libnvidia-ml.so.1"), TARMAC_SIM_STATE=str(state),
                   LD_LIBRARY_PATH=str(SIM_DIR), TARMAC_SOCKET=str(work / f"agent-{gpus}.sock"), NO_COLOR="1")
        env.pop("CUDA_VISIBLE_DEVICES", None)
        smi = median_ms([str(NVIDIA_SMI)], env)
        direct = median_ms([str(TARMAC), "status", "--direct"], env)
        agent = subprocess.Popen([str(TARMAC), "agent", "--listen", "off", "--state-dir", str(work / f"state-{gpus}"),
                                  "--interval", "1s"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def through_agent():
            r = subprocess.run([str(TARMAC), "--json", "status"], env=env, capture_output=True, text=True)
            return r.returncode == 0 and json.loads(r.stdout)["source"] == "agent"
        if not wait_for(through_agent):
            raise SystemExit("the agent never answered status")
        via_agent = median_ms([str(TARMAC), "status"], env)
        return {"gpus": gpus, "processes": gpus * PROCESSES_PER_GPU, "nvidia_smi_ms": smi, "direct_ms": direct,
                "agent_ms": via_agent}
    finally:
        for p in (agent, sim):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(timeout=30)


def main():
    for f in (TARMAC, SIM, NVIDIA_SMI):
        if not f.exists():
            raise SystemExit(f"missing: {f} (build tarmac; scripts/peers.sh fetches nvidia-smi)")
    work = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-status-bench-"))
    try:
        print(f"tarmac status against nvidia-smi, same simulated GPUs, median of {RUNS} runs ({TARMAC})")
        print(f"{'GPUs':>5} {'procs':>6} {'nvidia-smi':>11} {'direct':>9} {'ratio':>6} {'agent':>9} {'ratio':>6}")
        results = []
        for n in SIZES:
            r = one_size(n, work)
            results.append(r)
            print(f"{n:>5} {r['processes']:>6} {r['nvidia_smi_ms']:>8.1f} ms {r['direct_ms']:>6.1f} ms "
                  f"{r['direct_ms'] / r['nvidia_smi_ms']:>5.2f}x {r['agent_ms']:>6.1f} ms "
                  f"{r['agent_ms'] / r['nvidia_smi_ms']:>5.2f}x")
        print("goals: direct <= 1.0x, through the agent <= 0.2x")
        print(json.dumps({"benchmarks": results}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
