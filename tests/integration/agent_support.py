"""Helpers for the agent's end-to-end tests: a held simulation, agents started and stopped in it
(LiveAgent: one serving HTTP on a free loopback port), and reading the store back with Python's own
sqlite3 (a real, independent SQLite client)."""
import contextlib
import fcntl
import http.client
import os
import pathlib
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time

from test_status import BUILD, TARMAC

SIM_LIB = str(BUILD / "sim" / "libnvidia-ml.so.1")

# The bound of a wait for something that does happen (a log line, a row, an answer): only a hang
# reaches it, never a slow machine. Tests wait for events, not for time (STYLE.md, habit 9).
HANG_S = 120


class HeldSim:
    """`tarmac sim --hold`: a simulation that stays up while agents come and go."""

    def __init__(self, scenario, speed=1, state=None):
        self.state = state or tempfile.mkdtemp(prefix="tarmac-sim-")
        self.proc = subprocess.Popen(
            [TARMAC, "sim", "--scenario", scenario, "--speed", str(speed), "--state", self.state, "--hold"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + HANG_S
        while not os.path.exists(os.path.join(self.state, "ready")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the simulator did not start: {self.proc.stderr.read()}")
            time.sleep(0.02)

    def env(self, extra=None):
        env = dict(os.environ)
        env.update({"TARMAC_NVML_LIB": SIM_LIB, "TARMAC_SIM_STATE": self.state})
        env.pop("JOURNAL_STREAM", None)
        env.update(extra or {})
        return env

    def agent(self, state_dir, *args, stderr=subprocess.PIPE):
        """Starts `tarmac agent` on this simulation; returns the Popen. Without HTTP unless ARGS give
        --listen: tests run side by side, and the default port is one."""
        if "--listen" not in args:
            args = ("--listen", "off", *args)
        return subprocess.Popen([TARMAC, "agent", "--state-dir", str(state_dir), *args], env=self.env(),
                                stdout=subprocess.PIPE, stderr=stderr, text=True)

    def run(self, *args, timeout=120):
        return subprocess.run([TARMAC, *args], env=self.env(), capture_output=True, text=True, timeout=timeout)

    def close(self):
        end_process(self.proc)


class CountedCalls:
    """How many times the processes of SIM (a HeldSim) have called the NVML function FUNCTION on
    GPU: a runtime fault that only counts those calls (docs/simulator.md, Faults: `calls = N`
    counts across every process of the simulation, in the state directory's uses/ID, under flock;
    the 1 ms delay is there because a fault must do something). An event to wait for: a program's
    snapshot has begun, however fast or slow the machine.

    hold() takes that lock: every caller then stops at its next such call until the hold ends, and
    no count is half-written meanwhile (a kill -9 cannot land inside the update). Inside a hold,
    read the count with the function it gives: count() would wait for the hold itself."""

    def __init__(self, sim, function, gpu):
        spec = f"function={function},gpu={gpu},delay_ms=1,calls=1000000000"
        r = sim.run("sim", "fault", "--state", sim.state, spec)
        if r.returncode != 0:
            raise AssertionError(f"tarmac sim fault {spec}: exit {r.returncode}: {r.stderr}")
        # Runtime rules are named by their line in the faults file: this one is the last.
        lines = (pathlib.Path(sim.state) / "faults").read_text().split("\n")
        line = max(i for i, text in enumerate(lines) if text.strip()) + 1
        self.path = pathlib.Path(sim.state) / "uses" / f"r{line}"

    def count(self):
        with self.hold() as count:
            return count()

    @contextlib.contextmanager
    def hold(self):
        """Holds the lock while the with-block runs; gives a function that reads the count."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield lambda: int(os.pread(fd, 64, 0).decode().strip() or 0)
        finally:
            os.close(fd)  # closing releases the lock


def end_process(proc, timeout=10):
    """SIGTERM to PROC if it still runs, SIGKILL after TIMEOUT seconds; waits for it either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def gpu_pids(sim_state, gpu):
    """The pids of the simulation's live processes on GPU `gpu` alone (docs/simulator.md, the state
    directory: one procs/PID file per process, `key=value` lines, `gpus` a comma list)."""
    found = []
    for f in (pathlib.Path(sim_state) / "procs").iterdir():
        try:
            text = f.read_text()
        except FileNotFoundError:  # the process just went away
            continue
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        if fields.get("gpus", "").split(",") == [str(gpu)]:
            found.append(int(fields["pid"]))
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port, path, timeout=10):
    """(status, headers, body text) of GET http://127.0.0.1:PORT/PATH."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode("utf-8", "replace")
    finally:
        conn.close()


class LiveAgent:
    """A held simulation of SCENARIO (at SPEED) and `tarmac [--config FILE] agent --listen
    127.0.0.1:PORT --interval 500ms --process-interval 1s EXTRA...` on it, up once /healthz answers
    200. CONFIG is the text of the configuration file, if any. `.sim` (HeldSim), `.port`, `.url`
    ("http://127.0.0.1:PORT/"), `.agent` (the Popen), `.dir` (its own temporary folder)."""

    def __init__(self, scenario, config=None, extra=(), speed=1, wait_s=HANG_S):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-http-"))
        self.sim = None
        self.agent = None
        self.err = None
        try:
            self.sim = HeldSim(scenario, speed=speed, state=str(self.dir / "sim"))
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}/"
            cmd = [TARMAC]
            if config is not None:
                cfg = self.dir / "tarmac.toml"
                cfg.write_text(config)
                cmd += ["--config", str(cfg)]
            cmd += ["agent", "--state-dir", str(self.dir / "state"), "--listen", f"127.0.0.1:{self.port}",
                    "--interval", "500ms", "--process-interval", "1s", *extra]
            self.err = open(self.dir / "agent.stderr", "w+")
            self.agent = subprocess.Popen(cmd, env=self.sim.env(), stdout=subprocess.DEVNULL, stderr=self.err,
                                          text=True)
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    if http_get(self.port, "/healthz", timeout=2)[0] == 200:
                        break
                except OSError:
                    pass
                if self.agent.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"no /healthz 200 on port {self.port} (agent exit {self.agent.poll()}): "
                                         f"{self.stderr()[-1500:]}")
                time.sleep(0.05)
        except BaseException:
            self.close()
            raise

    def get(self, path, timeout=10):
        return http_get(self.port, path, timeout)

    def metrics(self):
        status, headers, body = self.get("/metrics")
        if status != 200:
            raise AssertionError(f"/metrics: {status} {body[:300]}")
        return body

    def stderr(self):
        if self.err is None:
            return ""
        self.err.seek(0)
        return self.err.read()

    def stop(self, timeout=10):
        """SIGTERM, as systemd stops it; returns the exit code."""
        self.agent.send_signal(signal.SIGTERM)
        return self.agent.wait(timeout=timeout)

    def close(self):
        if self.agent is not None:
            end_process(self.agent)
        if self.sim is not None:
            self.sim.close()
            self.sim.proc.stdout.close()
            self.sim.proc.stderr.close()
        if self.err is not None:
            self.err.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def stop(agent, timeout=10):
    """SIGTERM, as systemd stops it; returns (exit code, stderr)."""
    agent.send_signal(signal.SIGTERM)
    _, err = agent.communicate(timeout=timeout)
    return agent.returncode, err


def samples_taken(port):
    """tarmac_agent_samples_total on the /metrics of the agent on PORT (GPU-samples it has taken),
    0 while it does not answer yet."""
    try:
        status, _, body = http_get(port, "/metrics", timeout=5)
    except OSError:
        return 0
    m = re.search(r"^tarmac_agent_samples_total (\S+)$", body, re.M) if status == 200 else None
    return float(m.group(1)) if m else 0


def catches(pid, signo):
    """Whether process PID catches signal SIGNO (SigCgt in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return (int(line.split()[1], 16) >> (signo - 1)) & 1 == 1
    except OSError:
        pass
    return False


def start_unix(pid):
    """The start time of PID in whole Unix seconds, as tarmac reads it (btime + starttime ticks)."""
    with open("/proc/stat") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    with open(f"/proc/{pid}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    return btime + ticks // os.sysconf("SC_CLK_TCK")


def create_context_after_a_sample(proc, db):
    """Lets PROC, a `tarmac-sim-load --context-on-usr1`, create its context (appear on its GPUs)
    once the agent recording into DB has taken a process sample after PROC started (the store's
    gpu.last_ms is the last one's time): the agent then sees its listing begin while it has its
    pid, which is what lets root's reap end it (docs/reap.md, "Safety checks")."""
    if not wait_for(lambda: catches(proc.pid, signal.SIGUSR1)):
        raise AssertionError(f"pid {proc.pid} never caught SIGUSR1")
    after_ms = (start_unix(proc.pid) + 2) * 1000

    def sampled():
        try:
            return (query(db, "SELECT max(last_ms) FROM gpu")[0][0] or 0) >= after_ms
        except sqlite3.Error:
            return False
    if not wait_for(sampled):
        raise AssertionError(f"the agent recording {db} took no process sample after pid {proc.pid} started")
    os.kill(proc.pid, signal.SIGUSR1)


def query(db, sql, *params):
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(sql, params).fetchall()


def integrity(db):
    with sqlite3.connect(str(db)) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def wait_for(predicate, timeout=HANG_S, step=0.05):
    """Polls PREDICATE until it is true (returns True) or TIMEOUT seconds pass (returns False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False
