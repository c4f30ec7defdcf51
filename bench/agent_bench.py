#!/usr/bin/env python3
"""The agent's costs on 8 simulated GPUs with processes, in one run (issue 5). A benchmark, not a
test: it prints figures and ratios and never fails on them.

  1. CPU per second of recording, as % of one core, at 1 s and at 100 ms sampling (real clock,
     scenario mixed-topology-8gpu: 8 GPUs, 4 training processes), next to the script tarmac
     replaces: a Python pynvml loop that appends util/memory/power of every GPU to a CSV each
     second (its CPU at 1 s is the ratio's denominator).
  2. Ingest: the store alone (bench/store_bench: Recorder::add + flush with rollups, no NVML), and
     end to end: a simulated week of h100x8-idle-fleet recorded under --speed with a 10 s
     interval, GPU-samples per second of real time (bounded by the simulator's NVML cost per call,
     which the store's figure separates out), and the agent's resident memory (VmHWM, VmRSS at the
     end) after more than 100k GPU-samples.
  3. Disk: bytes per GPU-sample at the default cadences (1 s values, 5 s processes, 30 s slow
     values), rollups, spans and events included: 3 simulated hours of mixed-topology-8gpu (8 GPUs,
     4 training processes) at --speed 300, the file after a checkpoint divided by the GPU-samples.
  4. `tarmac report --since 7d` over the recorded week: median wall time of 5 runs.
  5. The reaper's added CPU (docs/reap.md "As a service"): the agent at 1 s with reaper.interval
     at its 10 s minimum (a survey every 10 s, six times the default) against reaper.interval =
     1d (no pass in the run: the reaper off), and what that makes at the default 1m. The per-pass
     cost over 64 processes and their trees is bench/reap_bench's.

Goals: < 1 % of a core at 1 s; < 30 MiB resident; >= 50,000 GPU-samples/s; <= 48 bytes per
GPU-sample; the week's report < 1 s.

Usage: bench/agent_bench.py   (env: TARMAC_BUILD_DIR=build, TARMAC_PEERS=~/.cache/tarmac-peers,
                               CPU_SECONDS=30, SPEED=20000, ONLY=reaper to run part 5 alone)
"""
import os
import pathlib
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

# The agent's scheduler serves a socket of this run's own, not the system's.
os.environ.setdefault("TARMAC_SOCKET", f"{tempfile.gettempdir()}/tarmac-bench-{os.getpid()}.sock")
HERE = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(os.environ.get("TARMAC_BUILD_DIR", HERE / "build")).resolve()
TARMAC = str(BUILD / "tarmac")
SIM_LIB = str(BUILD / "sim" / "libnvidia-ml.so.1")
PEERS = pathlib.Path(os.environ.get("TARMAC_PEERS", pathlib.Path.home() / ".cache/tarmac-peers")) / "x"
CPU_SECONDS = float(os.environ.get("CPU_SECONDS", "30"))
SPEED = int(os.environ.get("SPEED", "20000"))
TICKS = os.sysconf("SC_CLK_TCK")

PYNVML_LOGGER = r"""
import sys, time, pynvml as n
n.nvmlInit()
handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
out = open(sys.argv[1], "a")
while True:
    cells = []
    for h in handles:
        u = n.nvmlDeviceGetUtilizationRates(h)
        m = n.nvmlDeviceGetMemoryInfo(h)
        cells.append(f"{u.gpu}|{u.memory}|{m.used // 1048576}|{n.nvmlDeviceGetPowerUsage(h) // 1000}")
    out.write(f"{int(time.time())}," + ",".join(cells) + "\n")
    out.flush()
    time.sleep(1)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid):
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def status_kib(pid, key):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


class HeldSim:
    def __init__(self, scenario, speed=1):
        self.state = tempfile.mkdtemp(prefix="tarmac-bench-sim-")
        self.proc = subprocess.Popen([TARMAC, "sim", "--scenario", scenario, "--speed", str(speed), "--state",
                                      self.state, "--hold"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while not os.path.exists(os.path.join(self.state, "ready")):
            if self.proc.poll() is not None:
                sys.exit(f"the simulator did not start: {self.proc.stderr.read().decode()}")
            time.sleep(0.02)
        self.env = dict(os.environ, TARMAC_NVML_LIB=SIM_LIB, TARMAC_SIM_STATE=self.state,
                        LD_LIBRARY_PATH=str(pathlib.Path(SIM_LIB).parent))
        self.env.pop("JOURNAL_STREAM", None)

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()


def cpu_percent(cmd, env, seconds, warmup=2.0):
    """% of one core used by CMD over SECONDS, after a warm-up."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(warmup)
        t0, c0 = time.monotonic(), cpu_ticks(proc.pid)
        time.sleep(seconds)
        t1, c1 = time.monotonic(), cpu_ticks(proc.pid)
        return 100.0 * (c1 - c0) / TICKS / (t1 - t0)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait()


def bench_cpu(work):
    sim = HeldSim("mixed-topology-8gpu")
    try:
        # With its HTTP endpoint on (a free port), as it runs in production, but not scraped.
        agent = lambda interval: [TARMAC, "agent", "--listen", f"127.0.0.1:{free_port()}", "--state-dir",
                                  str(work / f"cpu-{interval}"), "--interval", interval]
        tarmac_1s = cpu_percent(agent("1s"), sim.env, CPU_SECONDS)
        tarmac_100ms = cpu_percent(agent("100ms"), sim.env, CPU_SECONDS)
        logger = None
        pynvml = PEERS / "python3-pynvml/usr/lib/python3/dist-packages"
        if pynvml.exists():
            env = dict(sim.env, PYTHONPATH=str(pynvml))
            logger = cpu_percent([sys.executable, "-c", PYNVML_LOGGER, str(work / "gpu_utilization.csv")], env,
                                 CPU_SECONDS)
    finally:
        sim.close()
    return tarmac_1s, tarmac_100ms, logger


def bench_reaper(work):
    """% of one core of the agent at 1 s with the reaper every 10 s, and with it off (1d)."""
    sim = HeldSim("mixed-topology-8gpu")
    try:
        def agent(interval):
            cfg = work / f"reaper-{interval}.toml"
            cfg.write_text(f'[reaper]\ninterval = "{interval}"\n')
            return [TARMAC, "--config", str(cfg), "agent", "--listen", f"127.0.0.1:{free_port()}", "--state-dir",
                    str(work / f"reaper-{interval}"), "--interval", "1s"]
        off = cpu_percent(agent("1d"), sim.env, CPU_SECONDS)
        on = cpu_percent(agent("10s"), sim.env, CPU_SECONDS)
    finally:
        sim.close()
    return off, on


def bench_ingest(work):
    state = work / "week"
    cmd = [TARMAC, "sim", "--scenario", "h100x8-idle-fleet", "--speed", str(SPEED), "--", TARMAC, "agent",
           "--listen", "off", "--clock", "sim", "--interval", "10s", "--process-interval", "60s", "--duration", "7d", "--state-dir",
           str(state)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    agent_pid, hwm, rss = None, 0, 0
    while proc.poll() is None:
        if agent_pid is None:
            found = subprocess.run(["pgrep", "-f", f"agent --listen off --clock sim.*{state}"], capture_output=True, text=True)
            pids = [int(p) for p in found.stdout.split() if int(p) != proc.pid]
            agent_pid = pids[-1] if pids else None
        else:
            try:
                hwm = max(hwm, status_kib(agent_pid, "VmHWM"))
                rss = status_kib(agent_pid, "VmRSS") or rss
            except (FileNotFoundError, ProcessLookupError):
                pass
        time.sleep(0.2)
    err = proc.stderr.read()
    if proc.returncode != 0:
        sys.exit(f"agent failed: {err}")
    line = [l for l in err.splitlines() if "stopped:" in l][-1]
    db = state / "tarmac.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        samples = conn.execute("SELECT count(*) FROM gpu_sample").fetchone()[0]
        start, stop = conn.execute("SELECT min(ts_ms), max(ts_ms) FROM gpu_sample").fetchone()
    size = db.stat().st_size
    words = line.split()
    real_s = float(words[words.index("in") + 1])
    return {"samples": samples, "real_s": real_s, "rate": samples / real_s, "hwm_kib": hwm, "rss_kib": rss,
            "bytes_per_sample": size / samples, "db_bytes": size, "days": (stop - start) / 86400e3, "db": db,
            "line": line}


def bench_disk(work):
    state = work / "disk"
    cmd = [TARMAC, "sim", "--scenario", "mixed-topology-8gpu", "--speed", "300", "--", TARMAC, "agent", "--listen",
           "off", "--clock", "sim", "--duration", "3h", "--state-dir", str(state)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = state / "tarmac.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        samples = conn.execute("SELECT count(*) FROM gpu_sample").fetchone()[0]
        per_table = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall() \
            if has_dbstat(conn) else []
    size = db.stat().st_size
    return samples, size, per_table


def has_dbstat(conn):
    try:
        conn.execute("SELECT 1 FROM dbstat LIMIT 1")
        return True
    except sqlite3.Error:
        return False


def bench_store():
    exe = BUILD / "bench" / "store_bench"
    if not exe.exists():
        return None
    r = subprocess.run([str(exe), "--benchmark_format=json"], capture_output=True, text=True, check=True)
    import json
    return {b["name"]: b["gpu_samples_per_s"] for b in json.loads(r.stdout)["benchmarks"]}


def bench_report(db):
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([TARMAC, "report", "--db", str(db), "--since", "7d", "--price", "2.5"], check=True,
                       stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def print_reaper(work):
    off, on = bench_reaper(work)
    added = max(0.0, on - off)
    print(f"CPU, 1 s sampling, reaper off (interval 1d):  {off:6.2f} % of one core")
    print(f"CPU, 1 s sampling, reaper every 10 s:         {on:6.2f} % of one core   added {added:.2f} points; "
          f"at the default 1m about {added / 6:.2f}   (goal: the agent < 1 % in all)")


def main():
    if not os.path.exists(TARMAC):
        sys.exit(f"missing {TARMAC}: build tarmac first")
    work = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-agent-bench-"))
    try:
        print(f"tarmac agent benchmark ({os.cpu_count()} CPUs; {CPU_SECONDS:.0f} s per CPU figure)")
        if os.environ.get("ONLY") == "reaper":
            print_reaper(work)
            return
        t1, t100, logger = bench_cpu(work)
        print(f"CPU, 8 GPUs with processes, 1 s sampling:    {t1:6.2f} % of one core   (goal < 1 %)")
        print(f"CPU, 8 GPUs with processes, 100 ms sampling: {t100:6.2f} % of one core")
        if logger is not None:
            print(f"CPU, pynvml CSV logger at 1 s (the peer):    {logger:6.2f} % of one core   "
                  f"tarmac/pynvml = {t1 / logger if logger else float('nan'):.2f}")
        else:
            print("CPU, pynvml CSV logger: skipped (scripts/peers.sh fetches pynvml)")
        store = bench_store()
        if store:
            for name, rate in store.items():
                print(f"ingest, the store alone ({name.split('/')[1]} snapshots of 8 GPUs a flush): "
                      f"{rate:,.0f} GPU-samples/s   (goal >= 50,000)")
        ing = bench_ingest(work)
        print(f"ingest, end to end, a simulated week of 8 GPUs at --speed {SPEED}: {ing['samples']} GPU-samples in "
              f"{ing['real_s']:.1f} s = {ing['rate']:,.0f} GPU-samples/s (bounded by the simulated NVML)")
        print(f"resident memory after {ing['samples']} GPU-samples: peak {ing['hwm_kib'] / 1024:.1f} MiB, "
              f"at the end {ing['rss_kib'] / 1024:.1f} MiB   (goal < 30 MiB; dcgm-exporter: 400-500 MiB)")
        samples, size, per_table = bench_disk(work)
        print(f"disk at the default cadences: {size:,} bytes for {samples} GPU-samples = {size / samples:.1f} "
              f"bytes per GPU-sample, rollups, spans and events included   (goal <= 48)")
        for name, bytes_ in per_table[:6]:
            print(f"    {name:<28} {bytes_ / samples:6.1f} bytes per GPU-sample")
        t = bench_report(ing["db"])
        print(f"tarmac report --since 7d over that week: {t * 1000:.0f} ms median of 5   (goal < 1 s)")
        print_reaper(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
