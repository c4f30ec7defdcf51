"""Helpers for the agent's end-to-end tests: a held simulation, agents started and stopped in it,
and reading the store back with Python's own sqlite3 (a real, independent SQLite client)."""
import os
import pathlib
import signal
import sqlite3
import subprocess
import tempfile
import time

from test_status import BUILD, TARMAC

SIM_LIB = str(BUILD / "sim" / "libnvidia-ml.so.1")


class HeldSim:
    """`tarmac sim --hold`: a simulation that stays up while agents come and go."""

    def __init__(self, scenario, speed=1, state=None):
        self.state = state or tempfile.mkdtemp(prefix="tarmac-sim-")
        self.proc = subprocess.Popen(
            [TARMAC, "sim", "--scenario", scenario, "--speed", str(speed), "--state", self.state, "--hold"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
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
        """Starts `tarmac agent` on this simulation; returns the Popen."""
        return subprocess.Popen([TARMAC, "agent", "--state-dir", str(state_dir), *args], env=self.env(),
                                stdout=subprocess.PIPE, stderr=stderr, text=True)

    def run(self, *args, timeout=120):
        return subprocess.run([TARMAC, *args], env=self.env(), capture_output=True, text=True, timeout=timeout)

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def stop(agent, timeout=10):
    """SIGTERM, as systemd stops it; returns (exit code, stderr)."""
    agent.send_signal(signal.SIGTERM)
    _, err = agent.communicate(timeout=timeout)
    return agent.returncode, err


def query(db, sql, *params):
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(sql, params).fetchall()


def integrity(db):
    with sqlite3.connect(str(db)) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def wait_for(predicate, timeout=20, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False
