"""The agent's queue end to end (docs/scheduler.md, "Agent mode: the queue"): `tarmac agent --socket`
on a held simulation, with `run`, `jobs`, `cancel`, `reserve`, `release` and `extend` talking to it.
Jobs are the simulator's load program; "never two jobs on one GPU" is checked from the simulator's
own view of its processes (procs/), "every job runs exactly once" from a file each job's wrapper
script appends its TARMAC_JOB_ID to, and the jobs' states from `tarmac --json jobs --all`.

Every test starts its own simulation and agent in its own temporary folder. Everything a test starts
carries TARMAC_TEST_TAG=<that folder> in its environment (jobs inherit the caller's environment),
so the cleanup can end the jobs' processes, which live in process groups of their own, by pid."""
import collections
import json
import os
import pathlib
import pwd
import random
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import unittest

from agent_support import HANG_S, HeldSim, end_process, query, wait_for
from devtools import demoted, require_tool, second_user
from test_sched import LOAD, SCENARIOS, free_a100x4, live_sim_processes
from test_status import TARMAC

# Waits are scaled on slow runs: the sanitizer build (TARMAC_COMPAT_PRELOAD is set there) is several
# times slower per process, and the CI machine has 2 cores. TARMAC_TEST_SLOW overrides the factor.
SLOW = float(os.environ.get("TARMAC_TEST_SLOW") or (3 if os.environ.get("TARMAC_COMPAT_PRELOAD") else 1))

JOB_ENDED = {"done", "cancelled", "failed", "lost"}
LEASE_ENDED = {"released", "expired", "reclaimed"}
ENDED = JOB_ENDED | LEASE_ENDED
# GPUs 0-3 carry the scenario's training job (4 processes); 4-5 and 6-7 are NV12 pairs, all idle.
MIXED = str(SCENARIOS / "mixed-topology-8gpu.toml")

# The 30 jobs of the queue tests: (n, seconds, exit code). 15 of one GPU, 10 of two, 5 of four:
# with only GPUs 4-7 free on mixed-topology-8gpu, no job may ask for more than 4.
THIRTY = [((1, 2, 1, 4, 2, 1)[i % 6], round(0.3 + (i * 0.37) % 1.2, 2), i % 7) for i in range(30)]


def make_executable(path, text):
    path = pathlib.Path(path)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def environ_of(pid):
    """{name: value} of /proc/PID/environ, or None when it cannot be read (gone, not ours)."""
    try:
        raw = pathlib.Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            out[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return out


def tagged_pids(tag):
    """Pids of the live processes whose environment carries TARMAC_TEST_TAG=TAG (this test's)."""
    wanted = f"TARMAC_TEST_TAG={tag}".encode()
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_tagged(tag, timeout=10):
    """SIGKILL to every process of this test (agents, wrappers, jobs and their children), by pid,
    until none is left."""
    deadline = time.monotonic() + timeout
    while True:
        pids = tagged_pids(tag)
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def uid_of(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


class GpuWatch:
    """Polls the simulation's live processes every 50 ms on a thread of its own. Processes present
    when it starts (the scenario's own) are left out; every other one is mapped to its job through
    the TARMAC_JOB_ID in its environment. A clash is one GPU used at once by processes of two jobs;
    it is only recorded when a second read, after the whole scan, finds every process of it still
    registered (a scan is not atomic: a job that just unregistered could otherwise be seen beside
    the one that replaced it)."""

    def __init__(self, sim_state):
        self.state = sim_state
        self.baseline = set(live_sim_processes(sim_state))
        self.gpus = {}      # pid -> set of GPUs it was seen on
        self.job_of = {}    # pid -> TARMAC_JOB_ID (a string), when readable
        self.clashes = []   # (gpu, [(pid, job), ...])
        self.polls = 0
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _still_registered(self, pid):
        try:
            fields = dict(line.split("=", 1) for line in (pathlib.Path(self.state) / "procs" / str(pid))
                          .read_text().splitlines() if "=" in line)
            stat_text = pathlib.Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        after = stat_text[stat_text.rindex(")") + 2:].split()
        return after[0] not in ("Z", "X") and after[19] == fields.get("starttime")

    def _run(self):
        while not self._stop.is_set():
            try:
                self._poll()
            except Exception as e:  # noqa: BLE001 - a half-written file; the next poll reads it again
                self.errors.append(repr(e))
            self.polls += 1
            time.sleep(0.05)

    def _poll(self):
        procs = {pid: gpus for pid, gpus in live_sim_processes(self.state).items() if pid not in self.baseline}
        per_gpu = collections.defaultdict(list)
        for pid, gpus in procs.items():
            if pid not in self.job_of:
                env = environ_of(pid)
                if env is not None and "TARMAC_JOB_ID" in env:
                    self.job_of[pid] = env["TARMAC_JOB_ID"]
            self.gpus.setdefault(pid, set()).update(gpus)
            for g in gpus:
                per_gpu[g].append(pid)
        for g, pids in per_gpu.items():
            jobs = {self.job_of.get(pid, f"pid {pid}") for pid in pids}
            if len(jobs) > 1 and all(self._still_registered(pid) for pid in pids):
                self.clashes.append((g, [(pid, self.job_of.get(pid)) for pid in pids]))

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=30)

    def live(self):
        """{pid: gpus} of the processes started since the watch began that are still registered."""
        return {pid: gpus for pid, gpus in live_sim_processes(self.state).items() if pid not in self.baseline}

    def pids_of_job(self, job_id):
        return [pid for pid, job in self.job_of.items() if job == str(job_id)]


class AgentQueueTest(unittest.TestCase):
    """A held simulation of `scenario` (None: four free A100s) and `tarmac --config CFG agent --socket
    SOCK --listen off` on it; clients get TARMAC_SOCKET and TARMAC_LOCK_DIR in their environment."""

    scenario = None
    config = ""  # more configuration text, appended to the file
    agent_config = ""  # more keys of the [agent] section

    listen = "off"  # a test that reads the agent's HTTP endpoint sets a loopback address

    def setUp(self):
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-sa-"))
        self.tmp.chmod(0o755)  # other users reach the socket (the rights test)
        self.addCleanup(shutil.rmtree, str(self.tmp), True)
        self.tag = str(self.tmp)
        self.sock = str(self.tmp / "agent.sock")
        self.locks = str(self.tmp / "locks")
        self.state = self.tmp / "state"
        self.db = self.state / "tarmac.db"
        self.log_path = self.tmp / "agent.log"
        scenario = self.scenario or free_a100x4(self.tmp)
        self.sim = HeldSim(scenario, state=tempfile.mkdtemp(prefix="sim-", dir=str(self.tmp)))
        self.addCleanup(self.sim.close)
        self.addCleanup(kill_tagged, self.tag)  # runs before sim.close (cleanups run last-in first-out)
        self.cfg = self.tmp / "tarmac.toml"
        self.cfg.write_text(
            "[agent]\ninterval = \"200ms\"\nprocess_interval = \"200ms\"\nflush = \"250ms\"\n" + self.agent_config + "\n"
            f"[scheduler]\nsocket = \"{self.sock}\"\nlock_dir = \"{self.locks}\"\n"
            + self.config)
        self.agent = None
        self.addCleanup(self.stop_agent)
        self.start_agent()

    # -- the agent ----------------------------------------------------------------------------------
    def env(self, extra=None):
        env = self.sim.env({"TARMAC_SOCKET": self.sock, "TARMAC_LOCK_DIR": self.locks, "TARMAC_TEST_TAG": self.tag})
        env.update(extra or {})
        return env

    def start_agent(self, timeout=60):
        log = open(self.log_path, "a")
        try:
            self.agent = subprocess.Popen(
                [TARMAC, "--config", str(self.cfg), "agent", "--state-dir", str(self.state), "--listen", self.listen,
                 "--socket", self.sock],
                env=self.env(), stdout=subprocess.DEVNULL, stderr=log, cwd=str(self.tmp))
        finally:
            log.close()
        deadline = time.monotonic() + timeout * SLOW
        while True:
            r = self.tarmac("--json", "jobs")
            if r.returncode == 0:
                return
            if self.agent.poll() is not None or time.monotonic() > deadline:
                self.fail(f"the agent did not answer on {self.sock} (agent exit {self.agent.poll()}, last jobs "
                          f"exit {r.returncode}: {r.stderr.strip()}); its log:\n{self.agent_log()}")
            time.sleep(0.1)

    def kill_agent(self):
        self.agent.kill()
        self.agent.wait(timeout=30)

    def stop_agent(self):
        if self.agent is not None:
            end_process(self.agent)

    def agent_log(self, tail=3000):
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    # -- clients ------------------------------------------------------------------------------------
    def tarmac(self, *args, timeout=120, env=None, **kw):
        return subprocess.run([TARMAC, *args], env=env or self.env(), capture_output=True, text=True,
                              timeout=timeout * SLOW, cwd=kw.pop("cwd", str(self.tmp)), **kw)

    def submit(self, *cmd, n=1, flags=()):
        """`tarmac run -n N --detach FLAGS -- CMD`; returns the job's id."""
        r = self.tarmac("run", "-n", str(n), "--detach", *flags, "--", *cmd)
        self.assertEqual(r.returncode, 0, f"run --detach -n {n} {' '.join(flags)}: {r.stderr}\n{self.agent_log()}")
        lines = [line.strip() for line in r.stdout.splitlines() if line.strip()]
        self.assertTrue(lines and re.fullmatch(r"\d+", lines[-1]), f"no job id on stdout: {r.stdout!r}")
        return int(lines[-1])

    def reserve(self, n, duration):
        """`tarmac reserve -n N --for D`: (lease id, {name: value} of the export line)."""
        r = self.tarmac("reserve", "-n", str(n), "--for", duration)
        self.assertEqual(r.returncode, 0, f"reserve: {r.stderr}\n{self.agent_log()}")
        exports = [line for line in r.stdout.splitlines() if line.startswith("export CUDA_VISIBLE_DEVICES=")]
        self.assertEqual(len(exports), 1, f"no export line: {r.stdout!r}")
        exported = dict(word.split("=", 1) for word in exports[0].split()[1:] if "=" in word)
        self.assertEqual(exported.get("CUDA_DEVICE_ORDER"), "PCI_BUS_ID", exports[0])
        self.assertRegex(exported.get("TARMAC_JOB_ID", ""), r"^\d+$", exports[0])
        lease = int(exported["TARMAC_JOB_ID"])
        rest = "\n".join(line for line in r.stdout.splitlines() if line not in exports)
        self.assertRegex(rest, rf"(?<!\d){lease}(?!\d)", f"the lease's id is not printed: {r.stdout!r}")
        return lease, exported

    def jobs(self, all_=True):
        """{id: job} from `tarmac --json jobs [--all]` (a list, or an object with "jobs")."""
        r = self.tarmac("--json", "jobs", *(["--all"] if all_ else []))
        if r.returncode != 0:
            raise AssertionError(f"jobs: exit {r.returncode}: {r.stderr}\n{self.agent_log()}")
        data = json.loads(r.stdout)
        if isinstance(data, dict):
            data = data["jobs"]
        return {j["id"]: j for j in data}

    def job(self, job_id):
        return self.jobs()[job_id]

    def wait_jobs(self, ids, predicate, timeout, what):
        """Polls until PREDICATE(job) holds for every id; returns {id: job}. Fails naming WHAT."""
        deadline = time.monotonic() + timeout * SLOW
        while True:
            try:
                jobs = self.jobs()
            except AssertionError:
                jobs = None  # the agent is restarting
            if jobs is not None and all(i in jobs and predicate(jobs[i]) for i in ids):
                return jobs
            if time.monotonic() > deadline:
                states = {i: (jobs[i]["state"] if jobs and i in jobs else None) for i in ids}
                self.fail(f"{what} within {timeout * SLOW:.0f} s: {states}\n{self.agent_log()}")
            time.sleep(0.2)

    def wait_state(self, job_id, states, timeout=30):
        states = {states} if isinstance(states, str) else set(states)
        return self.wait_jobs([job_id], lambda j: j["state"] in states, timeout,
                              f"job {job_id} did not become {'/'.join(sorted(states))}")[job_id]

    def wait_ended(self, ids, timeout):
        return self.wait_jobs(ids, lambda j: j["state"] in ENDED, timeout, "not every job ended")

    def wait_held(self, job_id, words="waiting"):
        """Waits until a queue pass has looked at queued job JOB_ID and said why it waits (its reason
        holds WORDS); returns the job. A job started instead fails at once."""
        job = self.wait_jobs([job_id], lambda j: j["state"] != "queued" or words in (j.get("reason") or ""), HANG_S,
                             f"no queue pass said why job {job_id} waits ({words!r})")[job_id]
        self.assertEqual(job["state"], "queued", job)
        return job

    def wrapper(self, runs):
        """A script that appends its TARMAC_JOB_ID to RUNS, then becomes the load program."""
        return make_executable(self.tmp / "job.sh", f'#!/bin/sh\necho "$TARMAC_JOB_ID" >> {runs}\n'
                                                    f'exec {LOAD} "$@"\n')

    def classes(self, gpu):
        """The activity classes the recorder has written for GPU so far."""
        try:
            return {row[0] for row in query(self.db, "SELECT class FROM activity WHERE gpu = ?", gpu)}
        except Exception:  # noqa: BLE001 - the store may not be there yet
            return set()

    def last_sample_ms(self, gpu):
        """The timestamp of the recorder's latest stored sample of GPU (0 before any)."""
        try:
            return query(self.db, "SELECT max(ts_ms) FROM gpu_sample WHERE gpu = ?", gpu)[0][0] or 0
        except Exception:  # noqa: BLE001 - the store may not be there yet
            return 0

    def events(self):
        try:
            return query(self.db, "SELECT ts_ms, gpu, kind, detail FROM event ORDER BY ts_ms")
        except Exception:  # noqa: BLE001 - the store may not be there yet
            return []


# -- 1, 2: thirty jobs, with and without kill -9 of the agent ---------------------------------------
class ThirtyJobs(AgentQueueTest):
    scenario = MIXED  # GPUs 0-3 busy with the scenario's job; 4-5 and 6-7 NV12 pairs

    def run_thirty(self, kills=0, seed=None):
        runs = self.tmp / "RUNS"
        wrap = self.wrapper(runs)
        watch = GpuWatch(self.sim.state)
        self.addCleanup(watch.stop)
        given = {}
        for n, seconds, code in THIRTY:
            job_id = self.submit(wrap, "--seconds", str(seconds), "--exit-code", str(code), "--mem", "1GiB",
                                 "--util", "60", n=n)
            self.assertNotIn(job_id, given, "a job id was given twice")
            given[job_id] = (n, seconds, code)
        rng = random.Random(seed)
        for k in range(kills):
            time.sleep(rng.uniform(0.2, 2.0))
            self.kill_agent()
            time.sleep(rng.uniform(0.0, 0.5))
            self.start_agent()
        jobs = self.wait_ended(list(given), 180)
        watch.stop()

        lost = [i for i in given if jobs[i]["state"] == "lost"]
        self.assertEqual(lost, [], f"jobs ended `lost` (their wrapper vanished without a result): "
                                   f"{[(i, jobs[i].get('reason')) for i in lost]}\n{self.agent_log()}")
        self.assertEqual(watch.clashes[:5], [], "two jobs' load programs on one GPU at once")
        self.assertEqual({i: (jobs[i]["state"], jobs[i]["exit_code"]) for i in given},
                         {i: ("done", code) for i, (_, _, code) in given.items()},
                         "every job ends `done` with the status its command exited with")
        counted = collections.Counter(runs.read_text().split()) if runs.exists() else collections.Counter()
        self.assertEqual(dict(counted), {str(i): 1 for i in given},
                         "every job started exactly once, with TARMAC_JOB_ID its id")
        for i, (n, _, _) in given.items():
            j = jobs[i]
            with self.subTest(job=i):
                self.assertEqual((j["kind"], j["n"]), ("job", n))
                self.assertEqual(len(j["gpus"]), n, j)
                self.assertEqual(len(j["uuids"]), n, j)
                self.assertEqual(j["gpus"], sorted(j["gpus"]), "GPUs are given in ascending index order")
                self.assertTrue(set(j["gpus"]) <= {4, 5, 6, 7}, f"GPUs 0-3 run processes: {j['gpus']}")
                self.assertTrue(all(u.startswith("GPU-") for u in j["uuids"]), j["uuids"])
                self.assertIn(j.get("outside"), ([], None), "its load ran only on its own GPUs")
                self.assertTrue(j["submitted_unix_ms"] <= j["started_unix_ms"] <= j["ended_unix_ms"], j)
                if not kills:
                    self.assertEqual(j["requeues"], 0, "requeues counts backfill preemptions only")
        # The load programs showed up on the GPUs their jobs were given, and nowhere else.
        seen_jobs = set()
        for pid, job in watch.job_of.items():
            if job is not None and job.isdigit() and int(job) in given:
                seen_jobs.add(int(job))
                self.assertEqual(watch.gpus[pid], set(jobs[int(job)]["gpus"]), f"job {job}'s load (pid {pid})")
        self.assertGreaterEqual(len(seen_jobs), 15, f"the watch saw too few jobs ({watch.polls} polls)")
        return given, jobs

    def test_thirty_jobs_of_mixed_sizes_each_run_once_and_never_share(self):
        self.run_thirty()

    def test_kill_9_of_the_agent_five_times_loses_and_doubles_no_job(self):
        seed = int(os.environ.get("TARMAC_TEST_SEED", "20240611"))
        with self.subTest(seed=seed):
            self.run_thirty(kills=5, seed=seed)


class TopologyPlacement(AgentQueueTest):
    """The pick policy through the agent, where it is deterministic: GPUs 4-7 free, all alike."""
    scenario = MIXED

    def test_pairs_go_to_nvlink_pairs_and_singles_to_the_lowest_index(self):
        a = self.submit(LOAD, n=2)
        self.assertEqual(self.wait_state(a, "running")["gpus"], [4, 5])
        b = self.submit(LOAD, n=2)
        self.assertEqual(self.wait_state(b, "running")["gpus"], [6, 7])
        c = self.submit(LOAD, n=1)
        self.wait_held(c)  # no free GPU: GPUs 0-3 run processes, 4-7 are given
        self.assertEqual(self.job(c)["state"], "queued", "no free GPU: GPUs 0-3 run processes, 4-7 are given")
        r = self.tarmac("cancel", str(a))
        self.assertEqual(r.returncode, 0, r.stderr)
        done_a = self.wait_state(a, "cancelled")
        self.assertEqual(done_a["exit_code"], 128 + signal.SIGTERM, "the load dies of the SIGTERM of cancel")
        self.assertEqual(self.wait_state(c, "running")["gpus"], [4])
        r = self.tarmac("cancel", str(b))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_state(b, "cancelled")
        d = self.submit(LOAD, n=2)
        self.assertEqual(self.wait_state(d, "running")["gpus"], [6, 7], "5, 6, 7 free: the NVLink pair wins")
        e = self.submit(LOAD, n=1)
        self.assertEqual(self.wait_state(e, "running")["gpus"], [5])
        for i in (c, d, e):
            self.assertEqual(self.tarmac("cancel", str(i)).returncode, 0)
        self.wait_ended([c, d, e], 30)


# -- 3: an attached run through the agent -----------------------------------------------------------
class AttachedRun(AgentQueueTest):
    def test_attached_run_streams_output_and_exits_with_the_jobs_status(self):
        wrap = make_executable(self.tmp / "marker.sh", f'#!/bin/sh\necho "marker-$TARMAC_JOB_ID"\n'
                                                       f'exec {LOAD} "$@"\n')
        r = self.tarmac("run", "-n", "1", "--", wrap, "--seconds", "0.5", "--exit-code", "7", timeout=60)
        self.assertEqual(r.returncode, 7, f"{r.stderr}\n{self.agent_log()}")
        m = re.search(r"marker-(\d+)", r.stdout)
        self.assertTrue(m, f"the job's output is not on run's stdout: {r.stdout!r} (stderr {r.stderr!r})")
        job = self.job(int(m.group(1)))  # it went through the agent: the agent knows it by that id
        self.assertEqual((job["kind"], job["state"], job["exit_code"], len(job["gpus"])), ("job", "done", 7, 1))

    def test_detached_output_goes_to_the_jobs_log(self):
        job_id = self.submit("sh", "-c", 'echo "hello from $TARMAC_JOB_ID on $CUDA_VISIBLE_DEVICES"')
        job = self.wait_state(job_id, "done")
        self.assertEqual(job["exit_code"], 0)
        log = self.state / "logs" / f"{job_id}.log"
        self.assertTrue(wait_for(lambda: log.exists() and "hello" in log.read_text(), 10 * SLOW), str(log))
        self.assertIn(f"hello from {job_id} on {job['gpus'][0]}", log.read_text())
        # The agent starts the wrapper with its stop signals blocked; the job gets none blocked.
        job_id = self.submit("grep", "SigBlk", "/proc/self/status")
        self.assertEqual(self.wait_state(job_id, "done")["exit_code"], 0)
        log = self.state / "logs" / f"{job_id}.log"
        self.assertTrue(wait_for(lambda: log.exists() and "SigBlk" in log.read_text(), 10 * SLOW), str(log))
        self.assertIn("SigBlk:\t0000000000000000", log.read_text())


# -- 4: idle leases are warned about, then reclaimed ------------------------------------------------
class IdleLease(AgentQueueTest):
    def setUp(self):
        self.alerts = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-sa-alerts-")) / "alerts.txt"
        self.addCleanup(shutil.rmtree, str(self.alerts.parent), True)
        script = make_executable(self.alerts.parent / "alert.sh",
                                 '#!/bin/sh\n{ echo "rule=$TARMAC_ALERT_RULE status=$TARMAC_ALERT_STATUS"; cat; '
                                 'echo; } >> "$1"\n')
        self.config = ('lease_idle_limit = "2s"\nlease_idle_grace = "2s"\n\n'
                       f'[alerts]\ncommand = "{script} {self.alerts}"\n')
        super().setUp()

    def test_an_unused_lease_is_reclaimed_and_a_used_one_kept(self):
        idle, idle_env = self.reserve(1, "10m")
        used, used_env = self.reserve(1, "10m")
        load = subprocess.Popen([LOAD, "--mem", "2GiB", "--util", "60"], env=self.env(used_env),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(end_process, load)
        jobs = self.jobs()
        for lease, exported in ((idle, idle_env), (used, used_env)):
            self.assertEqual((jobs[lease]["kind"], jobs[lease]["state"], len(jobs[lease]["gpus"])), ("lease", "active", 1))
            self.assertEqual(exported["CUDA_VISIBLE_DEVICES"], ",".join(map(str, jobs[lease]["gpus"])))
        self.assertNotEqual(jobs[idle]["gpus"], jobs[used]["gpus"])
        self.assertTrue(wait_for(lambda: load.pid in live_sim_processes(self.sim.state), 10 * SLOW))
        self.assertEqual(live_sim_processes(self.sim.state)[load.pid], jobs[used]["gpus"])

        # While it waits unused, the recorder classes its GPU reserved-idle, not idle.
        idle_gpu = jobs[idle]["gpus"][0]
        self.assertTrue(wait_for(lambda: self.classes(idle_gpu) & {"reserved-idle"}, 10 * SLOW),
                        f"GPU {idle_gpu}: {self.classes(idle_gpu)}")
        reclaimed = self.wait_state(idle, "reclaimed", timeout=20)
        self.assertTrue(wait_for(lambda: self.alerts.exists() and "lease_idle" in self.alerts.read_text(), 10 * SLOW),
                        f"the alert command got no lease_idle notice: "
                        f"{self.alerts.read_text() if self.alerts.exists() else '(never ran)'}")
        self.assertTrue(wait_for(lambda: {"lease_idle", "lease_reclaimed"} <= {e[2] for e in self.events()},
                                 10 * SLOW), f"events: {self.events()}")
        ev = self.events()
        warned = min(e[0] for e in ev if e[2] == "lease_idle")
        taken = min(e[0] for e in ev if e[2] == "lease_reclaimed")
        began = reclaimed.get("started_unix_ms") or reclaimed["submitted_unix_ms"]
        # Not before its time: 2 s unused, then 2 s more (a sample's worth of slack).
        self.assertGreaterEqual(warned - began, 1500, ev)
        self.assertGreaterEqual(taken - warned, 1500, ev)

        # The agent has sampled the used lease's GPU for limit + grace + 1 s more than the idle lease
        # needed (its own timestamps, whatever the machine's speed).
        used_gpu = jobs[used]["gpus"][0]
        used_began = self.job(used).get("started_unix_ms") or self.job(used)["submitted_unix_ms"]
        self.assertTrue(wait_for(lambda: self.last_sample_ms(used_gpu) >= used_began + 5000, HANG_S),
                        f"GPU {used_gpu} not sampled 5 s past {used_began}\n{self.agent_log()}")
        self.assertIsNone(load.poll(), "the load program of the used lease ended")
        self.assertEqual(self.job(used)["state"], "active", "a lease in use is never reclaimed")
        r = self.tarmac("release", str(used))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.wait_state(used, "released")["kind"], "lease")


# -- 5: backfill jobs give way to a normal job ------------------------------------------------------
class Backfill(AgentQueueTest):
    config = 'backfill_idle = "1s"\n'

    def test_a_normal_job_preempts_backfill_jobs_which_run_again_later(self):
        watch = GpuWatch(self.sim.state)
        self.addCleanup(watch.stop)
        fills = [self.submit(LOAD, "--seconds", "8", n=1, flags=("--backfill",)) for _ in range(4)]
        running = self.wait_jobs(fills, lambda j: j["state"] == "running", 30, "the backfill jobs did not all start")
        before = {i: running[i]["gpus"] for i in fills}
        self.assertEqual(sorted(g for gpus in before.values() for g in gpus), [0, 1, 2, 3])
        self.assertTrue(all(running[i]["backfill"] for i in fills))

        normal = self.submit(LOAD, "--seconds", "1", n=2)

        def preempted(jobs):
            return [i for i in fills if jobs[i]["requeues"] >= 1 or jobs[i]["state"] in ("stopping", "queued")]

        deadline = time.monotonic() + HANG_S
        while True:
            jobs = self.jobs()
            if jobs[normal]["state"] in ("running", "done") and len(preempted(jobs)) >= 2:
                break
            if time.monotonic() > deadline:
                self.fail(f"within {HANG_S} s the normal job is {jobs[normal]['state']} and the backfill "
                          f"jobs {[(jobs[i]['state'], jobs[i]['requeues']) for i in fills]}\n{self.agent_log()}")
            time.sleep(0.1)
        gave_way = preempted(jobs)
        self.assertEqual(len(gave_way), 2, f"only as many backfill jobs as the normal job needs give way: "
                         f"{[(i, jobs[i]['state'], jobs[i]['requeues']) for i in fills]}\n{self.agent_log()}")
        self.assertEqual(sorted(jobs[normal]["gpus"]), sorted(g for i in gave_way for g in before[i]),
                         "the normal job starts on the GPUs of the backfill jobs that gave way")
        self.assertFalse(jobs[normal]["backfill"])

        ended = self.wait_ended(fills + [normal], 90)
        watch.stop()
        self.assertEqual({i: (ended[i]["state"], ended[i]["exit_code"]) for i in fills + [normal]},
                         {i: ("done", 0) for i in fills + [normal]},
                         "the preempted jobs ran again to their end; their SIGTERM is not their end")
        self.assertEqual(sorted(ended[i]["requeues"] for i in fills), [0, 0, 1, 1])
        self.assertEqual({i for i in fills if ended[i]["requeues"]}, set(gave_way))
        self.assertEqual(ended[normal]["requeues"], 0)
        self.assertEqual(watch.clashes[:5], [], "the normal job started beside a backfill job")


# -- --wait through the agent ---------------------------------------------------------------------
class WaitLimit(AgentQueueTest):
    def test_a_job_not_started_within_wait_is_cancelled_and_run_exits_1(self):
        lease, _ = self.reserve(4, "10m")  # every GPU taken
        # Without --wait, run would wait for the lease's 10 minutes: tarmac()'s timeout is the bound.
        r = self.tarmac("run", "--wait", "1s", "--", LOAD, "--seconds", "1")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("not started after 1s", r.stderr)
        self.assertIn("cancelled before it started", r.stderr)
        job = [j for j in self.jobs().values() if j["kind"] == "job"]
        self.assertEqual([(j["state"], j["started_unix_ms"]) for j in job], [("cancelled", None)])
        self.assertEqual(self.job(lease)["state"], "active")


# -- 6: the wall-clock limit through the agent ------------------------------------------------------
class WallClock(AgentQueueTest):
    def test_time_limit_kills_the_whole_group_that_ignores_sigterm(self):
        watch = GpuWatch(self.sim.state)
        self.addCleanup(watch.stop)
        job_id = self.submit("sh", "-c", f"{LOAD} --ignore-sigterm --seconds 60 & "
                                         f"exec {LOAD} --ignore-sigterm --seconds 60",
                             flags=("--time", "1s", "--grace", "1s"))
        # Without the limit the loads run 60 s and exit 0: the exit status tells, not the time taken.
        job = self.wait_state(job_id, JOB_ENDED, timeout=HANG_S)
        self.assertEqual((job["state"], job["exit_code"]), ("done", 128 + signal.SIGKILL), job)
        self.assertGreaterEqual(job["ended_unix_ms"] - job["started_unix_ms"], 1500,
                                "SIGKILL only after the limit (1 s) and the grace (1 s)")
        self.assertTrue(wait_for(lambda: watch.live() == {}, HANG_S),
                        f"load programs of the job still run: {watch.live()}")
        watch.stop()
        self.assertEqual(len(watch.pids_of_job(job_id)), 2, f"both load programs ran: {watch.job_of}")


# -- a job whose processes use a GPU it was not given is flagged ----------------------------------------
class OutsideItsGpus(AgentQueueTest):
    def test_a_process_on_a_gpu_the_job_was_not_given_is_flagged_and_recorded(self):
        # The job is given one GPU (the first free, 0) but its program picks GPU 3 itself.
        job_id = self.submit("sh", "-c", f"CUDA_VISIBLE_DEVICES=3 exec {LOAD} --seconds 4 --mem 1GiB --util 50")
        job = self.wait_state(job_id, "running")
        self.assertNotIn(3, job["gpus"])
        job = self.wait_jobs([job_id], lambda j: 3 in (j.get("outside") or []), 15,
                             "the job's process on GPU 3 was not flagged")[job_id]
        self.assertEqual(job["outside"], [3])
        kinds = [e for e in self.events() if e[2] == "job_outside"]
        self.assertEqual(len(kinds), 1, kinds)
        self.assertEqual(kinds[0][1], 3)
        self.assertIn(f"job {job_id}", kinds[0][3])
        self.assertIn("which it was not given", self.agent_log())
        # A well-behaved job is not flagged.
        good = self.submit(LOAD, "--seconds", "1")
        self.assertEqual(self.wait_state(good, JOB_ENDED, timeout=30)["outside"], [])


# -- 7: who may do what ---------------------------------------------------------------------------
class SecondUser(AgentQueueTest):
    """A second user, created when missing, whose commands run with its uid (as_user)."""

    def setUp(self):
        self.pw = second_user(self)
        self.user = self.pw.pw_name
        super().setUp()

    def as_user(self, *args):
        """tarmac ARGS as the second user (setuid in the child), from the 0755 test folder."""
        pw = self.pw
        env = self.env({"HOME": str(self.tmp), "USER": pw.pw_name, "LOGNAME": pw.pw_name})
        for k in [k for k in env if k.startswith("XDG_")]:
            del env[k]
        return self.tarmac(*args, env=env, preexec_fn=demoted(pw))


@unittest.skipUnless(os.geteuid() == 0, "needs root to act as a second user")
class Rights(SecondUser):
    def assert_refused(self, r, what):
        self.assertEqual(r.returncode, 2, f"{what}: {r.stdout} {r.stderr}")
        self.assertTrue(re.search(r"owner|not yours", r.stderr, re.I), f"{what}: {r.stderr!r}")

    def test_only_the_owner_or_root_may_cancel_release_or_extend(self):
        job = self.submit(LOAD, "--seconds", "120")
        self.wait_state(job, "running")
        lease, _ = self.reserve(1, "10m")
        expires = self.job(lease)["expires_unix_ms"]

        self.assert_refused(self.as_user("cancel", str(job)), "cancel of root's job")
        self.assert_refused(self.as_user("release", str(lease)), "release of root's lease")
        self.assert_refused(self.as_user("extend", str(lease), "1h"), "extend of root's lease")
        r = self.as_user("--json", "jobs")
        self.assertEqual(r.returncode, 0, f"anyone may list the jobs: {r.stderr}")
        listed = json.loads(r.stdout)
        listed = listed["jobs"] if isinstance(listed, dict) else listed
        self.assertIn(job, [j["id"] for j in listed])
        jobs = self.jobs()
        self.assertEqual((jobs[job]["state"], jobs[lease]["state"]), ("running", "active"), "nothing changed")
        self.assertEqual(jobs[lease]["expires_unix_ms"], expires, "the refused extend moved nothing")

        r = self.tarmac("cancel", str(job))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.wait_state(job, JOB_ENDED)["state"], "cancelled")
        r = self.tarmac("release", str(lease))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_state(lease, "released")

    def test_a_users_job_runs_as_that_user_and_is_theirs_to_cancel(self):
        r = self.as_user("run", "-n", "1", "--detach", "--", "sleep", "120")
        self.assertEqual(r.returncode, 0, f"{r.stderr}\n{self.agent_log()}")
        job_id = int(r.stdout.split()[-1])
        job = self.wait_state(job_id, "running")
        self.assertEqual((job["user"], job["uid"]), (self.user, self.pw.pw_uid))
        self.assertTrue(wait_for(lambda: self.job_pids(job_id), 10 * SLOW), "no process carries the job's id")
        for pid in self.job_pids(job_id):
            self.assertEqual(uid_of(pid), self.pw.pw_uid, f"pid {pid} of the job")
        r = self.as_user("cancel", str(job_id))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.wait_state(job_id, JOB_ENDED)["state"], "cancelled")

    def job_pids(self, job_id):
        """Pids of the job's command (`sleep`), found by the TARMAC_JOB_ID in its environment."""
        out = []
        for pid in tagged_pids(self.tag):
            env = environ_of(pid)
            try:
                argv0 = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if env and env.get("TARMAC_JOB_ID") == str(job_id) and os.path.basename(argv0) == b"sleep":
                out.append(pid)
        return out


# -- fairness and the per-user cap -------------------------------------------------------------------
@unittest.skipUnless(os.geteuid() == 0, "needs root to act as a second user")
class Fairness(SecondUser):
    def test_the_user_with_fewer_recent_gpu_hours_goes_first(self):
        # root uses all four GPUs for a while, then holds them with a job that runs until cancelled.
        first = self.submit(LOAD, "--seconds", "1.5", n=4)
        self.wait_state(first, "done", timeout=HANG_S)
        hold = self.submit(LOAD, n=4)
        self.wait_state(hold, "running")
        # While they are held, root queues a job for all four, then the other user does (later by the
        # clock the agent stamps submissions with, not only in order).
        mine = self.submit(LOAD, "--seconds", "0.5", n=4)
        mine_ms = self.job(mine)["submitted_unix_ms"]
        self.assertTrue(wait_for(lambda: time.time() * 1000 > mine_ms + 1, HANG_S))
        r = self.as_user("run", "-n", "4", "--detach", "--", "/bin/sleep", "0.5")
        self.assertEqual(r.returncode, 0, r.stderr)
        theirs = int(r.stdout.split()[-1])
        # Both are in the queue (a submission returns once the agent has it); only then do the GPUs
        # come free. (A pass skips a request as large as one it found no room for without a reason.)
        jobs = self.jobs()
        self.assertEqual((jobs[mine]["state"], jobs[theirs]["state"]), ("queued", "queued"))
        self.assertEqual(self.tarmac("cancel", str(hold)).returncode, 0)
        jobs = self.wait_ended([hold, mine, theirs], HANG_S)
        self.assertEqual((jobs[mine]["state"], jobs[theirs]["state"]), ("done", "done"))
        self.assertLess(jobs[mine]["submitted_unix_ms"], jobs[theirs]["submitted_unix_ms"])
        self.assertLess(jobs[theirs]["started_unix_ms"], jobs[mine]["started_unix_ms"],
                        "the user with no GPU-hours went first, though submitted later")


class UserCap(AgentQueueTest):
    config = "user_gpu_cap = 2\n"

    def test_a_user_holds_at_most_the_cap_and_more_is_refused(self):
        ids = [self.submit(LOAD, "--seconds", "120") for _ in range(3)]
        running = lambda jobs: [i for i in ids if jobs[i]["state"] == "running"]  # noqa: E731
        self.wait_jobs(ids, lambda j: True, 5, "")  # all listed
        deadline = time.monotonic() + 30 * SLOW
        while len(running(self.jobs())) < 2:
            self.assertLess(time.monotonic(), deadline, f"two jobs never ran: {self.jobs()}")
            time.sleep(0.1)
        # A pass with two GPUs still free says the third waits for the cap.
        self.wait_held(next(i for i in ids if i not in running(self.jobs())), "cap")
        jobs = self.jobs()
        self.assertEqual(sorted(jobs[i]["state"] for i in ids), ["queued", "running", "running"])
        waiting = next(i for i in ids if jobs[i]["state"] == "queued")
        self.assertIn("cap", jobs[waiting]["reason"])
        r = self.tarmac("run", "-n", "3", "--detach", "--", LOAD)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("cap", r.stderr)
        self.assertEqual(len(self.jobs()), 3, "the refused job was not queued")
        # One of the user's jobs ends: the waiting one may start.
        self.assertEqual(self.tarmac("cancel", str(running(jobs)[0])).returncode, 0)
        self.wait_state(waiting, "running", timeout=30)
        for i in ids:
            self.tarmac("cancel", str(i))
        ended = self.wait_ended(ids, 60)
        self.assertEqual({ended[i]["state"] for i in ids}, {"cancelled"})


# -- 8: bad input leaves the queue as it was --------------------------------------------------------
class BadInput(AgentQueueTest):
    scenario = MIXED  # 8 GPUs; 0-3 run processes

    def snapshot(self):
        return sorted((i, j["kind"], j["state"], tuple(j["gpus"] or ()), j.get("expires_unix_ms"))
                      for i, j in self.jobs().items())

    def test_bad_input_exits_nonzero_and_changes_nothing(self):
        lease, _ = self.reserve(2, "10m")  # 4,5
        running = self.submit(LOAD, "--seconds", "300", n=2)  # 6,7
        self.wait_state(running, "running")
        queued = self.submit(LOAD, "--seconds", "300", n=2)
        self.wait_held(queued)
        self.assertEqual(self.job(queued)["state"], "queued")
        before = self.snapshot()

        cases = [
            # (args, exit code, words stderr must contain)
            (["run", "--bogus", "--", "true"], 2, ["bogus"]),
            (["run", "--detach", "--bogus", "--", "true"], 2, ["bogus"]),
            (["run", "-n", "0", "--", "true"], 2, []),
            (["run", "--detach", "-n", "0", "--", "true"], 2, []),
            (["run", "-n", "9", "--", "true"], 2, []),
            (["run", "--detach", "-n", "9", "--", "true"], 2, []),
            (["run", "--detach", "--time", "bogus", "--", "true"], 2, ["bogus"]),
            (["run", "--time", "bogus", "--", "true"], 2, ["bogus"]),
            (["reserve", "-n", "1", "--for", "xyz"], 2, ["xyz"]),
            (["reserve", "-n", "9", "--for", "1m"], 2, []),
            (["run", "--detach", "-n", "1", "--", "no-such-command-here", "x"], 127,
             ["no-such-command-here", "command not found"]),
            (["run", "-n", "1", "--", "no-such-command-here", "x"], 127, ["no-such-command-here", "command not found"]),
            (["cancel", "999999"], 2, ["999999"]),
            (["release", "999999"], 2, ["999999"]),
            (["extend", "999999", "1m"], 2, ["999999"]),
            (["extend", str(lease), "bogus"], 2, ["bogus"]),
        ]
        for args, code, words in cases:
            with self.subTest(args=args):
                r = self.tarmac(*args, timeout=60)
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertTrue(r.stderr.strip(), "a message on stderr")
                for word in words:
                    self.assertIn(word, r.stderr)
                self.assertEqual(self.snapshot(), before, "the queue changed")
        # Not bad input but not possible now: two free GPUs wanted, none free. Exit 1, nothing changes.
        r = self.tarmac("reserve", "-n", "2", "--for", "1m")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(self.snapshot(), before)


if __name__ == "__main__":
    unittest.main()
