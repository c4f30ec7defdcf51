#!/usr/bin/env python3
"""The agent's queue under load (docs/scheduler.md, "Agent mode: the queue"). A benchmark, not a
test: it prints figures and never fails on them.

On a held simulation of mixed-topology-8gpu (GPUs 0-3 busy with the scenario's job, 4-7 free) with
`tarmac agent --socket PATH --listen off`:

  1. Submissions: JOBS small detached jobs (the simulator's load program for 0 s, 1 MiB) sent as fast
     as one client can over the socket, speaking the JSON-lines protocol directly (one connection
     per request, as the CLI does): submissions per second. Then CLI_JOBS more through
     `tarmac run --detach`, one process each: submissions per second. Meanwhile a lease holds the
     four free GPUs, so the figure is the queue's intake, not the machine's job churn.
  2. Hand-over: the lease is released and the queue drains; once every job has ended, `tarmac --json jobs --all` (else the store's sched_job
     table) gives each job's GPUs, submission, start and end; for each GPU, the time from one job's
     end to the next job's start on that GPU, counted only where the next job was already waiting
     (submitted before that end): median, p99 and the worst, in ms. Also the drain rate (jobs
     ended per second) and the agent's CPU over the whole run.

Goals: >= 500 submissions/s over the socket; hand-over p99 < 100 ms.

Usage: bench/sched_bench.py   (env: TARMAC_BUILD_DIR=build, JOBS=1000, CLI_JOBS=100, DRAIN_S=900)
"""
import collections
import json
import math
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

HERE = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(os.environ.get("TARMAC_BUILD_DIR", HERE / "build")).resolve()
TARMAC = str(BUILD / "tarmac")
SIM_LIB = str(BUILD / "sim" / "libnvidia-ml.so.1")
LOAD = str(BUILD / "sim" / "tarmac-sim-load")
JOBS = int(os.environ.get("JOBS", "1000"))
CLI_JOBS = int(os.environ.get("CLI_JOBS", "100"))
DRAIN_S = float(os.environ.get("DRAIN_S", "900"))
TICKS = os.sysconf("SC_CLK_TCK")
ENDED = {"done", "cancelled", "failed", "lost", "released", "expired", "reclaimed"}
JOB_CMD = [LOAD, "--seconds", "0", "--mem", "1"]


class HeldSim:
    def __init__(self, scenario, work):
        self.state = tempfile.mkdtemp(prefix="sim-", dir=str(work))
        self.proc = subprocess.Popen([TARMAC, "sim", "--scenario", scenario, "--state", self.state, "--hold"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while not os.path.exists(os.path.join(self.state, "ready")):
            if self.proc.poll() is not None:
                sys.exit(f"the simulator did not start: {self.proc.stderr.read().decode()}")
            time.sleep(0.02)

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()


def cpu_seconds(pid):
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def request(path, obj, timeout=60):
    """One request over the agent's socket: the first line of the answer, parsed."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(json.dumps(obj).encode() + b"\n")
        buf = b""
        while b"\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf.split(b"\n", 1)[0])


def tagged_pids(tag):
    wanted = f"TARMAC_BENCH_TAG={tag}".encode()
    out = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if wanted in (entry / "environ").read_bytes().split(b"\0"):
                    out.append(int(entry.name))
            except OSError:
                pass
    return out


def percentile(values, p):
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


class Bench:
    def __init__(self, work):
        self.work = work
        self.sim = HeldSim("mixed-topology-8gpu", work)
        self.sock = str(work / "agent.sock")
        self.state = work / "state"
        self.env = dict(os.environ, TARMAC_NVML_LIB=SIM_LIB, TARMAC_SIM_STATE=self.sim.state,
                        TARMAC_SOCKET=self.sock, TARMAC_LOCK_DIR=str(work / "locks"), TARMAC_BENCH_TAG=str(work))
        self.env.pop("JOURNAL_STREAM", None)
        self.log = open(work / "agent.log", "w+")
        self.agent = subprocess.Popen([TARMAC, "agent", "--state-dir", str(self.state), "--listen", "off",
                                       "--socket", self.sock], env=self.env, stdout=subprocess.DEVNULL,
                                      stderr=self.log, cwd=str(work))
        deadline = time.monotonic() + 60
        while self.tarmac("--json", "jobs").returncode != 0:
            if self.agent.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                log = self.log.read()[-2000:]
                self.close()
                sys.exit(f"the agent did not answer on {self.sock}:\n{log}")
            time.sleep(0.1)

    def tarmac(self, *args):
        return subprocess.run([TARMAC, *args], env=self.env, capture_output=True, text=True, cwd=str(self.work))

    def submit_raw(self, count):
        """COUNT submissions over the socket; (seconds, ids, first error)."""
        env = [f"{k}={v}" for k, v in self.env.items()]
        ids, error = [], None
        t0 = time.perf_counter()
        for _ in range(count):
            answer = request(self.sock, {"op": "submit", "argv": JOB_CMD, "env": env, "cwd": str(self.work),
                                         "n": 1, "detach": True})
            if not answer.get("ok"):
                error = answer.get("error", answer)
                break
            ids.append(answer["job"]["id"])
        return time.perf_counter() - t0, ids, error

    def submit_cli(self, count):
        ids, error = [], None
        t0 = time.perf_counter()
        for _ in range(count):
            r = self.tarmac("run", "-n", "1", "--detach", "--", *JOB_CMD)
            if r.returncode != 0:
                error = f"exit {r.returncode}: {r.stderr.strip()}"
                break
            ids.append(int(r.stdout.split()[-1]))
        return time.perf_counter() - t0, ids, error

    def jobs(self):
        r = self.tarmac("--json", "jobs", "--all")
        if r.returncode != 0:
            return None
        data = json.loads(r.stdout)
        return data["jobs"] if isinstance(data, dict) else data

    def drain(self, ids):
        """Waits until every job of IDS has ended; returns (seconds, jobs) (None on a timeout)."""
        wanted = set(ids)
        t0 = time.monotonic()
        last = -1
        while time.monotonic() - t0 < DRAIN_S:
            jobs = self.jobs() or []
            left = sum(1 for j in jobs if j["id"] in wanted and j["state"] not in ENDED)
            if left == 0 and jobs:
                return time.monotonic() - t0, jobs
            if left != last and int(time.monotonic() - t0) % 10 == 0:
                print(f"    ... {left} jobs still queued or running", flush=True)
                last = left
            time.sleep(1)
        return None, self.jobs()

    def jobs_from_store(self):
        """The jobs from sched_job, when its columns have the JSON's names; else []."""
        try:
            with sqlite3.connect(f"file:{self.state / 'tarmac.db'}?mode=ro", uri=True) as conn:
                cols = [c[1] for c in conn.execute("PRAGMA table_info(sched_job)")]
                need = {"id", "submitted_unix_ms", "started_unix_ms", "ended_unix_ms", "uuids"}
                if not need <= set(cols):
                    return []
                rows = conn.execute("SELECT id, submitted_unix_ms, started_unix_ms, ended_unix_ms, uuids "
                                    "FROM sched_job").fetchall()
        except sqlite3.Error:
            return []
        out = []
        for i, sub, start, end, uuids in rows:
            try:
                parsed = json.loads(uuids) if uuids else []
            except ValueError:
                parsed = [u for u in str(uuids).split(",") if u]
            out.append({"id": i, "submitted_unix_ms": sub, "started_unix_ms": start, "ended_unix_ms": end,
                        "uuids": parsed, "kind": "job"})
        return out

    def close(self):
        if self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()
        for _ in range(50):
            pids = tagged_pids(str(self.work))
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.1)
        self.sim.close()
        self.log.close()


def handovers(jobs, wanted):
    """Per GPU, start of the next job minus end of the previous, where the next was already waiting."""
    per_gpu = collections.defaultdict(list)
    for j in jobs:
        if j["id"] not in wanted or j.get("kind", "job") != "job":
            continue
        if j.get("started_unix_ms") is None or j.get("ended_unix_ms") is None:
            continue
        for g in j.get("uuids") or j.get("gpus") or []:
            per_gpu[g].append(j)
    delays = []
    for runs in per_gpu.values():
        runs.sort(key=lambda j: (j["started_unix_ms"], j["id"]))
        for prev, nxt in zip(runs, runs[1:]):
            if nxt["submitted_unix_ms"] <= prev["ended_unix_ms"]:
                delays.append(nxt["started_unix_ms"] - prev["ended_unix_ms"])
    return delays, len(per_gpu)


def main():
    for path in (TARMAC, LOAD, SIM_LIB):
        if not os.path.exists(path):
            sys.exit(f"missing {path}: build tarmac first")
    work = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-sched-bench-"))
    bench = None
    try:
        print(f"tarmac scheduler benchmark ({os.cpu_count()} CPUs; mixed-topology-8gpu, 4 free GPUs)")
        bench = Bench(work)
        # The submissions are measured as the queue's intake: the four free GPUs are leased first,
        # so nothing starts while they arrive (on 2 cores, jobs starting beside the submissions
        # would measure the jobs). The lease is released for the drain, which measures hand-overs.
        r = bench.tarmac("--json", "reserve", "-n", "4", "--for", "1h")
        if r.returncode != 0:
            sys.exit(f"reserve -n 4: {r.stderr}")
        lease = json.loads(r.stdout)["id"]
        cpu0 = cpu_seconds(bench.agent.pid)
        ids = []
        seconds, raw_ids, error = bench.submit_raw(JOBS)
        ids += raw_ids
        if raw_ids:
            print(f"submit over the socket (JSON lines, one connection each): {len(raw_ids)} jobs in "
                  f"{seconds:.2f} s = {len(raw_ids) / seconds:,.0f} submissions/s   (goal >= 500)")
        if error:
            print(f"submit over the socket: refused after {len(raw_ids)}: {error}")
        seconds, cli_ids, error = bench.submit_cli(CLI_JOBS)
        ids += cli_ids
        if cli_ids:
            print(f"submit through `tarmac run --detach`: {len(cli_ids)} jobs in {seconds:.2f} s = "
                  f"{len(cli_ids) / seconds:,.1f} submissions/s   ({seconds / len(cli_ids) * 1000:.1f} ms each)")
        if error:
            print(f"submit through `tarmac run --detach`: failed after {len(cli_ids)}: {error}")
        if not ids:
            return
        cpu_submit = cpu_seconds(bench.agent.pid)
        if cpu0 is not None and cpu_submit is not None:
            print(f"agent CPU per submission: {(cpu_submit - cpu0) / len(ids) * 1e3:.2f} ms")
        r = bench.tarmac("release", str(lease))
        if r.returncode != 0:
            sys.exit(f"release {lease}: {r.stderr}")
        took, jobs = bench.drain(ids)
        cpu1 = cpu_seconds(bench.agent.pid)
        if took is None:
            print(f"drain: not every job ended within {DRAIN_S:.0f} s; figures below cover those that did")
        else:
            print(f"drain: {len(ids)} jobs ended {took:.1f} s after the last submission = "
                  f"{len(ids) / took:,.1f} jobs/s on 4 GPUs")
        if cpu0 is not None and cpu1 is not None:
            print(f"agent CPU over submissions and drain: {cpu1 - cpu0:.2f} s")
        if not jobs or not any(j.get("started_unix_ms") is not None for j in jobs):
            jobs = bench.jobs_from_store()
            print("(jobs read from the store's sched_job table)")
        states = collections.Counter(j.get("state", "?") for j in jobs if j["id"] in set(ids))
        print(f"states: {dict(states)}")
        delays, gpus = handovers(jobs, set(ids))
        if delays:
            print(f"hand-over, one job's end to the next waiting job's start on the same GPU ({len(delays)} "
                  f"hand-overs on {gpus} GPUs): median {statistics.median(delays):.0f} ms, p99 "
                  f"{percentile(delays, 99):.0f} ms, worst {max(delays):.0f} ms, best {min(delays):.0f} ms"
                  f"   (goal p99 < 100 ms)")
        else:
            print("hand-over: no job had a waiting successor on its GPU (no start or end times?)")
    finally:
        if bench is not None:
            bench.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
