#!/usr/bin/env python3
"""`tarmac top` against nvtop on 8 simulated GPUs with 64 processes, side by side (the goals of the
issue that added `tarmac top`). A benchmark, not a test: it prints figures and ratios and exits 0
whatever they are (1 only when it could not measure, 2 on bad usage).

The load: bench/top_bench_scenario.toml (eight busy H100 80GB, eight GPU processes on each), held
by the simulator's launcher (`tarmac-sim run --hold --state DIR`). Four clients run in turn, each
alone, each in a detached tmux server of its own (200x60, TERM=tmux-256color, UTF-8, an empty HOME),
started directly in the pane (`exec env -i ...`) so that the pane's pid is the client's:

  tarmac top            (default refresh, 1 s)      nvtop -d 10   (1 s)
  tarmac top -n 0.1     (100 ms)                     nvtop -d 1    (100 ms)

For each one:

  1. Warm-up: until the screen shows all 8 GPUs and process rows (`tmux capture-pane -p`), then
     --warmup seconds more.
  2. A measured window of --seconds: the client's CPU time (all its threads; the sum of
     /proc/PID/task/*/schedstat in ns, or utime+stime in clock ticks when a thread came or went),
     as % of one core and per refresh, and its resident memory (VmRSS at the end, VmHWM). The
     refreshes are counted, not assumed: a counted simulator fault (`calls=1000000000,delay_ms=1`
     on nvmlDeviceGetUtilizationRates of GPU 0, which both clients call once per reading) counts the
     readings in the state directory's uses/r1 (--no-count: the nominal window / interval instead;
     the fault adds a 1 ms sleep and a flock per reading to either client alike). Also over the
     window: the CPU of the client's main thread apart from its others (tarmac top draws and
     reads keys on the main thread and reads the GPUs on another), the tmux server's CPU (the
     terminal's cost of what the client draws) and the rest of the machine's (/proc/stat; other
     work makes the figures less trustworthy, and the output warns when it passes 10 % of a core).
  3. Key latency: --presses times, after a random pause of 0-300 ms (so that the presses fall at
     every phase of the refresh), a key that opens a screen and then one that closes it, each
     timed from the moment it is sent until `capture-pane` shows the change. tarmac top: `h` (its
     first line becomes "tarmac top: keys"), then `h` (any key closes it). nvtop: F2 (the setup
     window, "General Options"), then F2 again. Keys are sent and the screen read through one
     tmux control-mode client (`tmux -C attach -f ignore-size,no-output`), so no process is
     started per poll; the floor of the measurement (the same loop, one send-sized round trip
     and one capture, with nothing to wait for) is reported as "poll floor".

Before the clients, a minimal ctypes NVML client measures what the simulated library costs by
itself per reading (the process list, utilization and memory of the 8 GPUs every 100 ms): its
registry of live processes is re-read at most every 20 ms, 64 state files and 64 /proc/PID/stat
per reading here, which every client pays under the simulator and none on a real driver.

Goals (the issue): < 1 % of one core at 1 s, < 3 % at 100 ms, a key answered within 50 ms.

Usage: bench/top_bench.py [--seconds 20] [--warmup 3] [--presses 20] [--json] [--no-count]
                          [--only tarmac|nvtop] [--seed 1]
  env: TARMAC_BUILD_DIR (default build), TARMAC_PEERS (default ~/.cache/tarmac-peers; nvtop is
  x/nvtop/usr/bin/nvtop there, fetched by scripts/peers.sh; without it the nvtop runs are skipped)
Takes about 4 x (seconds + warmup + 8) + 5 seconds (2 minutes by default). Run it on an otherwise
idle machine: the "others" column says how idle it was.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import pathlib
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(os.environ.get("TARMAC_BUILD_DIR", HERE / "build")).resolve()
TARMAC = BUILD / "tarmac"
SIM = BUILD / "sim" / "tarmac-sim"
SIM_LIB = BUILD / "sim" / "libnvidia-ml.so.1"
PEERS = pathlib.Path(os.environ.get("TARMAC_PEERS") or pathlib.Path.home() / ".cache" / "tarmac-peers")
NVTOP = PEERS / "x" / "nvtop" / "usr" / "bin" / "nvtop"
SCENARIO = pathlib.Path(__file__).resolve().parent / "top_bench_scenario.toml"
WIDTH, HEIGHT = 200, 60
GPUS, PROCESSES = 8, 64
TICKS = os.sysconf("SC_CLK_TCK")
COUNT_FAULT = "function=nvmlDeviceGetUtilizationRates,gpu=0,calls=1000000000,delay_ms=1"
READY_TIMEOUT_S = 60
KEY_TIMEOUT_S = 3.0


class BenchError(Exception):
    pass


class Stop(BaseException):
    """A signal asked the benchmark to stop: raised so that every `finally` cleans up."""


def on_signal(signo, _frame):
    raise Stop(signal.Signals(signo).name)


# ---------------------------------------------------------------------------------------------
# /proc


def read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of the whole process (every thread, exited ones too), in clock ticks."""
    text = read_text(f"/proc/{pid}/stat")
    if text is None:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def cpu_ns_by_thread(pid: int) -> dict[int, int]:
    """Time on a CPU of each live thread, in ns (/proc/PID/task/TID/schedstat, first field)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        text = read_text(f"/proc/{pid}/task/{tid}/schedstat")
        if text:
            out[int(tid)] = int(text.split()[0])
    return out


def host_busy_s() -> float:
    """CPU time the whole machine spent busy so far (every CPU, /proc/stat), in seconds."""
    fields = [int(v) for v in (read_text("/proc/stat") or "cpu 0").splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    guest = sum(fields[8:10]) if len(fields) > 9 else 0  # already counted in user and nice
    return (sum(fields) - guest - idle) / TICKS


def status_kib(pid: int, key: str) -> int | None:
    text = read_text(f"/proc/{pid}/status") or ""
    m = re.search(rf"^{key}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else None


def exe_name(pid: int) -> str:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return "?"


class CpuMeter:
    """CPU time of one process over a window: precise (schedstat, ns) while its threads stay the
    same, else utime+stime (10 ms ticks)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.t0 = time.monotonic()
        self.ticks0 = cpu_ticks(pid)
        self.ns0 = cpu_ns_by_thread(pid)

    def stop(self) -> dict:
        ns1 = cpu_ns_by_thread(self.pid)
        ticks1 = cpu_ticks(self.pid)
        t1 = time.monotonic()
        if self.ticks0 is None or ticks1 is None:
            raise BenchError(f"process {self.pid} ended during the measurement")
        wall = t1 - self.t0
        if ns1 and set(ns1) == set(self.ns0):
            cpu_s = (sum(ns1.values()) - sum(self.ns0.values())) / 1e9
            source = "schedstat"
        else:
            cpu_s = (ticks1 - self.ticks0) / TICKS
            source = "ticks"
        # The main thread (tid = pid) against the others (tarmac top: the reader thread).
        main_s = (ns1.get(self.pid, 0) - self.ns0.get(self.pid, 0)) / 1e9 if source == "schedstat" else None
        return {"wall_s": wall, "cpu_s": cpu_s, "cpu_source": source,
                "cpu_ticks_s": (ticks1 - self.ticks0) / TICKS, "threads": len(ns1),
                "main_thread_cpu_s": main_s}


# ---------------------------------------------------------------------------------------------
# The simulator


class Simulation:
    """`tarmac-sim run --scenario FILE --state DIR --hold`, with the counted fault that counts the
    clients' readings."""

    def __init__(self, work: pathlib.Path, count: bool):
        self.state = work / "state"
        self.log = open(work / "sim.log", "w+")
        self.proc = subprocess.Popen([str(SIM), "run", "--scenario", str(SCENARIO), "--state", str(self.state), "--hold"],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while not (self.state / "ready").exists():
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise BenchError(f"the simulator exited with status {self.proc.returncode}:\n{self.log.read()}")
            if time.monotonic() > deadline:
                raise BenchError("the simulator did not become ready in 30 s")
            time.sleep(0.05)
        live = len(os.listdir(self.state / "procs"))
        if live != PROCESSES:
            raise BenchError(f"the simulator runs {live} GPU processes, not {PROCESSES}")
        self.counter = None
        if count:
            subprocess.run([str(SIM), "fault", "--state", str(self.state), COUNT_FAULT], check=True,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            self.counter = self.state / "uses" / "r1"

    def readings(self) -> int | None:
        """How many times the counted call was answered so far (None: not counted)."""
        if self.counter is None:
            return None
        try:
            fd = os.open(self.counter, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return 0
        try:
            # Under the simulator's own lock: it truncates the file before it writes the new count.
            fcntl.flock(fd, fcntl.LOCK_SH)
            text = os.pread(fd, 64, 0).decode()
        finally:
            os.close(fd)
        try:
            return int(text.strip() or 0)
        except ValueError:
            return None

    def env(self) -> dict[str, str]:
        return {"TARMAC_SIM_STATE": str(self.state), "TARMAC_NVML_LIB": str(SIM_LIB),
                "LD_LIBRARY_PATH": str(SIM_LIB.parent)}

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


# ---------------------------------------------------------------------------------------------
# tmux


class ControlClient:
    """One `tmux -C` client: commands written to its stdin, answers read between %begin and %end,
    with no process started per command."""

    def __init__(self, socket: str, session: str):
        self.proc = subprocess.Popen(["tmux", "-L", socket, "-f", "/dev/null", "-C", "attach-session", "-t", session, "-f", "ignore-size,no-output"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, encoding="utf-8", errors="replace", bufsize=1)
        self.marker = 0
        self.command("display-message -p attached")  # the answer to attach itself comes first

    def command(self, line: str) -> list[str]:
        """Sends one command and returns its output lines (raises on %error)."""
        self.marker += 1
        tag = f"tarmac-bench-{self.marker}"
        # A second command that prints a unique tag: its block marks the end of the answer to ours,
        # whatever notifications and earlier answers came before.
        self.proc.stdin.write(f"{line}\ndisplay-message -p {tag}\n")
        self.proc.stdin.flush()
        blocks: list[tuple[bool, list[str]]] = []
        block: list[str] | None = None
        while True:
            raw = self.proc.stdout.readline()
            if raw == "":
                raise BenchError(f"the tmux control client ended (command: {line})")
            text = raw.rstrip("\n")
            if block is None:
                if text.startswith("%begin "):
                    block = []
                continue
            if text.startswith("%end ") or text.startswith("%error "):
                if block == [tag]:
                    break
                blocks.append((text.startswith("%error "), block))
                block = None
                continue
            block.append(text)
        if not blocks:
            raise BenchError(f"tmux gave no answer to: {line}")
        failed, lines = blocks[-1]
        if failed:
            raise BenchError(f"tmux: {line}: {' '.join(lines)}")
        return lines

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(3)


class Pane:
    """A detached tmux server of its own with one pane whose process is the client."""

    SESSION = "bench"

    def __init__(self, socket: str, argv: list[str], env: dict[str, str]):
        self.socket = socket
        self.control: ControlClient | None = None
        inner = "exec env -i " + shlex.join([f"{k}={v}" for k, v in env.items()] + argv)
        # remain-on-exit keeps the pane (and its last screen) when the client exits early.
        self.tmux("new-session", "-d", "-s", self.SESSION, "-x", str(WIDTH), "-y", str(HEIGHT), inner,
                  ";", "set-option", "-g", "remain-on-exit", "on")
        self.started = True
        out = self.tmux("list-panes", "-F", "#{pane_pid}").strip()
        self.pid = int(out.splitlines()[0])
        self.server_pid = int(self.tmux("display-message", "-p", "#{pid}").strip())
        self.control = ControlClient(socket, self.SESSION)

    def tmux(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=20)
        if r.returncode != 0:
            raise BenchError(f"tmux {' '.join(args[:1])}: {r.stderr.strip()}")
        return r.stdout

    def capture(self) -> str:
        return "\n".join(self.control.command(f"capture-pane -p -t {self.SESSION}"))

    def send(self, key: str):
        self.control.command(f"send-keys -t {self.SESSION} {key}")

    def dead(self) -> bool:
        state = self.control.command(f"display-message -p -t {self.SESSION} '#{{pane_dead}} #{{pane_dead_status}}'")
        return bool(state) and state[0].startswith("1")

    def close(self):
        if self.control is not None:
            self.control.close()
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20)
        # The hang-up ends the client; one that ignores it is ended by its own pid.
        deadline = time.monotonic() + 3
        while os.path.exists(f"/proc/{self.pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        if os.path.exists(f"/proc/{self.pid}") and exe_name(self.pid) in ("tarmac", "nvtop"):
            os.kill(self.pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# The clients


def tarmac_ready(screen: str) -> bool:
    return (re.search(rf"^tarmac top .*\b{GPUS} GPUs\s+{PROCESSES} processes\b", screen, re.M) is not None
            and len(set(re.findall(r"^GPU (\d+) NVIDIA", screen, re.M))) == GPUS
            and len(re.findall(r"^\s*\d+\s+\d+\s+\S+\s+.*\d+(?:\.\d+)?[KMGT]\s", screen, re.M)) >= 8)


def nvtop_ready(screen: str) -> bool:
    return (len(set(re.findall(r"Device (\d+) \[", screen))) == GPUS
            and len(re.findall(r"^\s*\d+\s+\S+\s+\d+\s+Compute\b", screen, re.M)) >= 8)


CLIENTS = {
    # label: (kind, arguments after the binary, refresh interval in s)
    "tarmac top": ("tarmac", ["top"], 1.0),
    "tarmac top -n 0.1": ("tarmac", ["top", "-n", "0.1"], 0.1),
    "nvtop -d 10": ("nvtop", ["-d", "10"], 1.0),
    "nvtop -d 1": ("nvtop", ["-d", "1"], 0.1),
}

KEYS = {
    # kind: (ready, open key, opened, close key, closed)
    "tarmac": (tarmac_ready, "h", lambda s: s.startswith("tarmac top: keys"),
               "h", lambda s: s.startswith("tarmac top ") and not s.startswith("tarmac top: keys")),
    "nvtop": (nvtop_ready, "F2", lambda s: "General Options" in s,
              "F2", lambda s: "General Options" not in s and "Device 0 [" in s),
}


def wait_until(pane: Pane, pred, timeout: float, what: str) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = pane.capture()
        if pred(screen):
            return screen
        if pane.dead():
            raise BenchError(f"{what}: the client exited; its last screen:\n{pane.capture()}")
        time.sleep(0.2)
    raise BenchError(f"{what}: not seen in {timeout:.0f} s; the screen:\n{screen}")


def timed_change(pane: Pane, key: str | None, pred) -> float | None:
    """ms from sending KEY (None: an equal-cost round trip that sends nothing) until the screen
    satisfies PRED; None after KEY_TIMEOUT_S."""
    t0 = time.perf_counter()
    if key is None:
        pane.control.command("display-message -p ''")
    else:
        pane.send(key)
    while True:
        screen = pane.capture()
        t = time.perf_counter()
        if pred(screen):
            return (t - t0) * 1000
        if t - t0 > KEY_TIMEOUT_S:
            return None
        time.sleep(0.0005)


def key_latency(pane: Pane, kind: str, presses: int, rng: random.Random) -> dict:
    _, open_key, opened, close_key, closed = KEYS[kind]
    floor = []
    for _ in range(presses):
        time.sleep(rng.uniform(0, 0.05))
        floor.append(timed_change(pane, None, lambda s: True))
    samples, opens, closes, missed = [], [], [], 0
    for _ in range(presses):
        for key, pred, into in ((open_key, opened, opens), (close_key, closed, closes)):
            time.sleep(rng.uniform(0, 0.3))
            ms = timed_change(pane, key, pred)
            if ms is None:
                missed += 1
                # Back to the main screen before the next press, whatever state it is in.
                if not closed(pane.capture()):
                    pane.send(close_key)
                    wait_until(pane, closed, 5, "the main screen after a missed key")
                continue
            into.append(ms)
            samples.append(ms)
    return {"keys": f"{open_key} / {close_key}", "presses": len(samples) + missed, "missed": missed,
            "median_ms": statistics.median(samples) if samples else None,
            "p90_ms": quantile(samples, 0.9), "max_ms": max(samples) if samples else None,
            "open_median_ms": statistics.median(opens) if opens else None,
            "close_median_ms": statistics.median(closes) if closes else None,
            "floor_median_ms": statistics.median(floor), "floor_max_ms": max(floor)}


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def run_client(label: str, sim: Simulation, work: pathlib.Path, args, rng: random.Random) -> dict:
    kind, extra, interval = CLIENTS[label]
    binary = str(TARMAC) if kind == "tarmac" else str(NVTOP)
    home = work / f"home-{kind}-{interval:g}"
    home.mkdir()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "TERM": "tmux-256color", "LANG": "C.UTF-8", "TZ": "UTC", **sim.env()}
    socket = f"tarmac-top-bench-{os.getpid()}-{kind}-{int(interval * 1000)}"
    pane = None
    try:
        pane = Pane(socket, [binary, *extra], env)
        if exe_name(pane.pid) != os.path.basename(binary):
            raise BenchError(f"{label}: the pane's process {pane.pid} is {exe_name(pane.pid)}, not {binary}")
        t_start = time.monotonic()
        ready = KEYS[kind][0]
        wait_until(pane, ready, READY_TIMEOUT_S, f"{label}: all {GPUS} GPUs and the processes on screen")
        ready_s = time.monotonic() - t_start
        time.sleep(args.warmup)

        count0 = sim.readings()
        server = CpuMeter(pane.server_pid)
        busy0 = host_busy_s()
        meter = CpuMeter(pane.pid)
        time.sleep(args.seconds)
        cpu = meter.stop()
        busy1 = host_busy_s()
        count1 = sim.readings()
        term = server.stop()
        rss = status_kib(pane.pid, "VmRSS")
        hwm = status_kib(pane.pid, "VmHWM")
        if rss is None:
            raise BenchError(f"{label}: the client ended during the measurement")
        screen = pane.capture()
        if not ready(screen):
            raise BenchError(f"{label}: the screen lost its GPUs or processes during the measurement:\n{screen}")

        counted = None if count0 is None or count1 is None else count1 - count0
        nominal = cpu["wall_s"] / interval
        refreshes = counted if counted else nominal
        result = {
            "client": label, "interval_s": interval, "pid": pane.pid, "ready_s": round(ready_s, 2),
            "window_s": round(cpu["wall_s"], 3), "cpu_s": round(cpu["cpu_s"], 5), "cpu_source": cpu["cpu_source"],
            "cpu_ticks_s": cpu["cpu_ticks_s"], "threads": cpu["threads"],
            "cpu_pct": 100 * cpu["cpu_s"] / cpu["wall_s"],
            "readings_counted": counted, "readings_nominal": round(nominal, 1),
            "cpu_ms_per_refresh": 1000 * cpu["cpu_s"] / refreshes if refreshes else None,
            "main_thread_cpu_pct": None if cpu["main_thread_cpu_s"] is None else 100 * cpu["main_thread_cpu_s"] / cpu["wall_s"],
            "other_threads_cpu_ms_per_refresh": None if cpu["main_thread_cpu_s"] is None or not refreshes
            else 1000 * (cpu["cpu_s"] - cpu["main_thread_cpu_s"]) / refreshes,
            "rss_mib": rss / 1024, "hwm_mib": (hwm or 0) / 1024,
            "tmux_server_cpu_pct": 100 * term["cpu_s"] / term["wall_s"],
        }
        # Everything else the machine ran meanwhile (this script's sleep, the simulator, and any
        # other work), in % of one core: high values make the figures above less trustworthy.
        result["others_cpu_pct"] = max(0.0, 100 * (busy1 - busy0) / cpu["wall_s"] - result["cpu_pct"]
                                       - result["tmux_server_cpu_pct"])
        if args.presses > 0:
            result["keys"] = key_latency(pane, kind, args.presses, rng)
        return result
    finally:
        if pane is not None:
            pane.close()
        else:
            subprocess.run(["tmux", "-L", socket, "kill-server"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# A minimal NVML client: what one reading of the simulated library costs by itself (its
# registry of live processes is re-read at most every 20 ms: 64 state files and 64 /proc/PID/stat
# per reading here), a cost every client pays under the simulator and none pays on a real driver.
FLOOR_PROBE = r"""
import ctypes, json, sys, time
lib = ctypes.CDLL(sys.argv[1])
assert lib.nvmlInit_v2() == 0
n = ctypes.c_uint()
lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
handles = []
for i in range(n.value):
    h = ctypes.c_void_p()
    lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
    handles.append(h)
class Proc(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong), ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]
procs = (Proc * 256)()
util = (ctypes.c_uint * 2)()
mem = (ctypes.c_ulonglong * 3)()
def reading():
    seen = 0
    for h in handles:
        count = ctypes.c_uint(256)
        assert lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), procs) == 0
        seen += count.value
        lib.nvmlDeviceGetUtilizationRates(h, util)
        lib.nvmlDeviceGetMemoryInfo(h, mem)
    return seen
readings, gap = int(sys.argv[2]), float(sys.argv[3])
reading()
cpu = 0.0
for _ in range(readings):
    time.sleep(gap)
    t0 = time.process_time()
    seen = reading()
    cpu += time.process_time() - t0
t0 = time.process_time()
for _ in range(readings):
    reading()
hot = time.process_time() - t0
print(json.dumps({"gpus": n.value, "processes": seen, "ms_per_reading": 1000 * cpu / readings,
                  "ms_per_reading_within_20ms": 1000 * hot / readings}))
"""


def simulator_floor(sim: Simulation) -> dict:
    env = dict(os.environ, **sim.env())
    r = subprocess.run([sys.executable, "-c", FLOOR_PROBE, str(SIM_LIB), "30", "0.1"], env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if r.returncode != 0:
        raise BenchError(f"the NVML probe failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


# ---------------------------------------------------------------------------------------------
# Output


def fmt(v, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def table(results: list[dict]) -> str:
    head = ["client", "refresh", "window", "readings", "CPU %core", "CPU ms/refr", "RSS MiB", "peak MiB",
            "tmux %core", "others %core", "key med ms", "key p90", "key max", "floor ms"]
    rows = [head]
    for r in results:
        k = r.get("keys") or {}
        missed = f" ({k['missed']} missed)" if k.get("missed") else ""
        rows.append([r["client"], f"{r['interval_s']:g} s", f"{r['window_s']:.1f} s",
                     str(r["readings_counted"]) if r["readings_counted"] is not None else f"~{r['readings_nominal']:g}",
                     f"{r['cpu_pct']:.3f}", fmt(r["cpu_ms_per_refresh"], ".3f"), f"{r['rss_mib']:.1f}",
                     f"{r['hwm_mib']:.1f}", f"{r['tmux_server_cpu_pct']:.3f}", f"{r['others_cpu_pct']:.1f}", fmt(k.get("median_ms"), ".1f") + missed,
                     fmt(k.get("p90_ms"), ".1f"), fmt(k.get("max_ms"), ".1f"), fmt(k.get("floor_median_ms"), ".1f")])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    out = []
    for n, row in enumerate(rows):
        out.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def ratios(results: list[dict]) -> list[dict]:
    by = {r["client"]: r for r in results}
    out = []
    for t, n, what in (("tarmac top", "nvtop -d 10", "1 s"), ("tarmac top -n 0.1", "nvtop -d 1", "100 ms")):
        if t in by and n in by:
            a, b = by[t], by[n]

            def ratio(x, y):
                return None if x is None or not y else x / y

            ka, kb = a.get("keys") or {}, b.get("keys") or {}
            out.append({"refresh": what, "cpu": ratio(a["cpu_pct"], b["cpu_pct"]),
                        "cpu_per_refresh": ratio(a["cpu_ms_per_refresh"], b["cpu_ms_per_refresh"]),
                        "rss": ratio(a["rss_mib"], b["rss_mib"]),
                        "key_median": ratio(ka.get("median_ms"), kb.get("median_ms"))})
    return out


def goals(results: list[dict]) -> list[str]:
    by = {r["client"]: r for r in results}
    lines = []

    def verdict(ok):
        return "met" if ok else "NOT met"

    if "tarmac top" in by:
        r = by["tarmac top"]
        lines.append(f"< 1 % of one core at 1 s: {r['cpu_pct']:.3f} % ({verdict(r['cpu_pct'] < 1)})")
    if "tarmac top -n 0.1" in by:
        r = by["tarmac top -n 0.1"]
        lines.append(f"< 3 % of one core at 100 ms: {r['cpu_pct']:.3f} % ({verdict(r['cpu_pct'] < 3)})")
    for label in ("tarmac top", "tarmac top -n 0.1"):
        k = (by.get(label) or {}).get("keys")
        if k and k.get("max_ms") is not None:
            ok = k["max_ms"] < 50 and not k["missed"]
            lines.append(f"a key answered within 50 ms ({label}): median {k['median_ms']:.1f} ms, "
                         f"worst {k['max_ms']:.1f} ms of {k['presses']} presses, {k['missed']} missed "
                         f"({verdict(ok)}; the poll floor is {k['floor_median_ms']:.1f} ms)")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description="tarmac top against nvtop: CPU per refresh, resident memory, key latency "
                                            "(8 simulated GPUs, 64 processes)")
    p.add_argument("--seconds", type=float, default=20.0, help="measured window per client (default 20)")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds after the full screen first shows (default 3)")
    p.add_argument("--presses", type=int, default=20, help="key presses per client, each an open and a close (default 20; 0: none)")
    p.add_argument("--json", action="store_true", help="also print the figures as JSON")
    p.add_argument("--no-count", action="store_true", help="no counted fault: refreshes are window / interval")
    p.add_argument("--only", choices=["tarmac", "nvtop"], help="run only one of the two")
    p.add_argument("--seed", type=int, default=1, help="seed of the pauses between key presses")
    args = p.parse_args()
    if args.seconds < 1 or args.warmup < 0 or args.presses < 0:
        p.error("--seconds must be at least 1, --warmup and --presses not negative")

    for path, what in ((TARMAC, "tarmac"), (SIM, "the simulator's launcher"), (SIM_LIB, "the simulated NVML library")):
        if not path.exists():
            print(f"top_bench: {what} is missing: {path} (build with cmake --preset dev && cmake --build --preset dev)", file=sys.stderr)
            return 1
    if shutil.which("tmux") is None:
        print("top_bench: tmux is needed (Debian: apt install tmux)", file=sys.stderr)
        return 1

    labels = [l for l in CLIENTS if args.only in (None, CLIENTS[l][0])]
    notes = []
    if not NVTOP.exists() and args.only != "tarmac":
        notes.append(f"nvtop skipped: {NVTOP} is missing (scripts/peers.sh fetches it)")
        labels = [l for l in labels if CLIENTS[l][0] != "nvtop"]
    if not labels:
        print("top_bench: nothing to run: " + "; ".join(notes), file=sys.stderr)
        return 1

    for signo in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signo, on_signal)
    load = os.getloadavg()[0]
    results = []
    floor = None
    rng = random.Random(args.seed)
    work = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-top-bench-"))
    sim = None
    try:
        sim = Simulation(work, count=not args.no_count)
        print("top_bench: the simulated library's own cost ...", file=sys.stderr, flush=True)
        floor = simulator_floor(sim)
        for label in labels:
            print(f"top_bench: {label} ...", file=sys.stderr, flush=True)
            results.append(run_client(label, sim, work, args, rng))
    except BenchError as e:
        print(f"top_bench: {e}", file=sys.stderr)
        return 1
    except Stop as e:
        print(f"top_bench: stopped by {e}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if sim is not None:
                sim.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)

    print(f"tarmac top vs nvtop: {GPUS} simulated H100, {PROCESSES} GPU processes ({SCENARIO.name}), "
          f"{WIDTH}x{HEIGHT} tmux panes, {os.cpu_count()} CPUs, load average {load:.2f} at the start")
    print(f"window {args.seconds:g} s per client after {args.warmup:g} s of warm-up; readings "
          + ("counted by the simulator (GPU 0's utilization calls)" if not args.no_count else "nominal (window / interval)"))
    print()
    print(table(results))
    print()
    print("CPU: all the client's threads; ms/refr: the window's CPU / its readings. RSS: VmRSS at the end, peak: VmHWM.")
    print("tmux %core: the tmux server's CPU over the same window (the terminal's share of what the client draws).")
    print("others %core: the rest of the machine over the window (everything but the client and tmux; /proc/stat).")
    busy = [r for r in results if r["others_cpu_pct"] > 10]
    if busy:
        print("WARNING: the machine was busy with other work during " + ", ".join(r["client"] for r in busy)
              + ": CPU figures read high under contention (caches, frequency); rerun on an idle machine.")
    for r in results:
        if r["readings_counted"] is not None and r["readings_counted"] > 1.1 * r["readings_nominal"] + 1:
            print(f"WARNING: {r['client']}: {r['readings_counted']} readings counted in a window that holds "
                  f"{r['readings_nominal']:g} refreshes: something else read GPU 0's utilization in this simulation.")
    for r in results:
        if r["threads"] > 1 and r["main_thread_cpu_pct"] is not None:
            print(f"{r['client']}: main thread (drawing, keys) {r['main_thread_cpu_pct']:.3f} % of a core; "
                  f"the other {r['threads'] - 1} thread(s) (reading) {fmt(r['other_threads_cpu_ms_per_refresh'], '.3f')} ms per reading.")
    if floor:
        print(f"The simulated NVML library alone (a minimal ctypes client reading the process list, utilization and memory of "
              f"the {floor['gpus']} GPUs every 100 ms)")
        print(f"  costs {floor['ms_per_reading']:.3f} ms of CPU per reading ({floor['ms_per_reading_within_20ms']:.3f} ms when "
              "readings come within 20 ms): part of every client's figures above, absent on a real driver.")
    if args.presses:
        print(f"keys: {args.presses} opens + {args.presses} closes after 0-300 ms pauses (tarmac top: h / h, nvtop: F2 / F2),")
        print("      sent until the screen shows the change; floor: the same loop with nothing to wait for.")
    rs = ratios(results)
    if rs:
        print()
        print("tarmac top / nvtop:")
        for r in rs:
            print(f"  at {r['refresh']:>6}: CPU x{fmt(r['cpu'], '.2f')}, CPU per refresh x{fmt(r['cpu_per_refresh'], '.2f')}, "
                  f"RSS x{fmt(r['rss'], '.2f')}, key median x{fmt(r['key_median'], '.2f')}")
    g = goals(results)
    if g:
        print()
        print("goals (issue):")
        for line in g:
            print("  " + line)
    for n in notes:
        print("note: " + n)
    if args.json:
        print()
        print(json.dumps({"gpus": GPUS, "processes": PROCESSES, "scenario": SCENARIO.name, "width": WIDTH, "height": HEIGHT,
                          "cpus": os.cpu_count(), "loadavg_start": load, "seconds": args.seconds, "warmup": args.warmup,
                          "counted": not args.no_count, "simulator_floor": floor, "results": results, "ratios": rs, "notes": notes}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
