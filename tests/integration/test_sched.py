"""Agentless `tarmac pick` and `tarmac run` (docs/scheduler.md) on simulated GPUs: jobs are the
simulator's load program, and "never two jobs on one GPU" is checked from the simulator's own view
of its processes (the state directory's procs/), not from tarmac's leases."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from agent_support import HANG_S, HeldSim, wait_for
from test_status import BUILD, TARMAC

LOAD = str(BUILD / "sim" / "tarmac-sim-load")
SCENARIOS = pathlib.Path(__file__).resolve().parents[2] / "sim" / "scenarios"


def free_a100x4(directory):
    """a100x4-gpu0-only's four A100s (NV4 between every pair) with no process and no load."""
    text = (SCENARIOS / "a100x4-gpu0-only.toml").read_text()
    text = text[:text.index("[[timeline]]")]
    text = text.replace('name = "a100x4-gpu0-only"', 'name = "a100x4-free"')
    path = pathlib.Path(directory) / "a100x4-free.toml"
    path.write_text(text)
    return str(path)


def live_sim_processes(state):
    """{pid: [gpu, ...]} of the simulator's live registered processes (start time checked)."""
    out = {}
    procs = pathlib.Path(state) / "procs"
    for f in procs.glob("*"):
        try:
            fields = dict(line.split("=", 1) for line in f.read_text().splitlines() if "=" in line)
            stat = pathlib.Path(f"/proc/{fields['pid']}/stat").read_text()
        except (OSError, KeyError, ValueError):
            continue  # gone meanwhile
        after = stat[stat.rindex(")") + 2:].split()
        if after[0] in ("Z", "X") or after[19] != fields.get("starttime"):
            continue
        out[int(fields["pid"])] = [int(g) for g in fields["gpus"].split(",") if g != ""]
    return out


class SchedTest(unittest.TestCase):
    scenario = None

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tarmac-sched-")
        self.locks = os.path.join(self.tmp, "locks")
        scenario = self.scenario or free_a100x4(self.tmp)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.sim = HeldSim(scenario, state=tempfile.mkdtemp(prefix="sim-", dir=self.tmp))
        self.addCleanup(self.sim.close)

    def env(self):
        return self.sim.env({"TARMAC_LOCK_DIR": self.locks})

    def tarmac(self, *args, timeout=120):
        return subprocess.run([TARMAC, *args], env=self.env(), capture_output=True, text=True, timeout=timeout)

    def popen(self, *args):
        return subprocess.Popen([TARMAC, *args], env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def lease_files(self):
        if not os.path.isdir(self.locks):
            return []
        return sorted(f for f in os.listdir(self.locks) if f.endswith(".lease"))


class RunConcurrency(SchedTest):
    def test_twenty_concurrent_runs_never_share_a_gpu(self):
        seen = []           # every poll's {pid: gpus}
        clashes = []
        stop = threading.Event()
        # Each run's load program lives until the watcher has seen it on its GPU and has seen two
        # runs at once (files in SEEN): the watcher misses none, however slowly it polls.
        seen_dir = pathlib.Path(self.tmp) / "seen"
        seen_dir.mkdir()

        def watch():
            while not stop.is_set():
                procs = live_sim_processes(self.sim.state)
                seen.append(procs)
                per_gpu = {}
                for pid, gpus in procs.items():
                    for g in gpus:
                        per_gpu.setdefault(g, []).append(pid)
                    (seen_dir / str(pid)).touch()
                if len(procs) >= 2:
                    (seen_dir / "overlap").touch()
                clashes.extend((g, pids) for g, pids in per_gpu.items() if len(pids) > 1)
                time.sleep(0.05)

        job = (f"{LOAD} --mem 2GiB --util 60 & p=$!; "
               f'until [ -e "{seen_dir}/$p" ] && [ -e "{seen_dir}/overlap" ]; do '
               f'[ -d "{seen_dir}" ] || exit 1; sleep 0.05; done; '  # the test is over
               "kill $p; wait $p; [ $? -eq 143 ]")  # it ended of the SIGTERM
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            runs = [self.popen("run", "-n", "1", "--", "/bin/sh", "-c", job) for _ in range(20)]
            results = [(r.wait(timeout=240), r.stderr.read()) for r in runs]
            for r in runs:
                r.stdout.close()
                r.stderr.close()
        finally:
            stop.set()
            watcher.join()
        self.assertEqual([rc for rc, _ in results], [0] * 20, [err for _, err in results])
        self.assertEqual(clashes, [], "two load programs on one GPU at once")
        pids = {pid for procs in seen for pid in procs}
        self.assertEqual(len(pids), 20, "every job showed up on a GPU once")
        self.assertGreaterEqual(max(len(p) for p in seen), 2, "the runs did overlap in time")
        self.assertTrue(all(len(p) <= 4 for p in seen))
        self.assertEqual(self.lease_files(), [])


class RunBehaviour(SchedTest):
    def test_exit_codes_propagate(self):
        self.assertEqual(self.tarmac("run", "--", "sh", "-c", "exit 7").returncode, 7)
        self.assertEqual(self.tarmac("run", "--", "sh", "-c", "kill -TERM $$").returncode, 128 + signal.SIGTERM)
        r = self.tarmac("run", "-n", "2", "--", "sh", "-c", 'echo "$CUDA_DEVICE_ORDER $CUDA_VISIBLE_DEVICES $TARMAC_JOB_ID"')
        self.assertEqual(r.returncode, 0, r.stderr)
        order, visible, job = r.stdout.split()
        self.assertEqual(order, "PCI_BUS_ID")
        self.assertEqual(len(visible.split(",")), 2)
        self.assertTrue(job)
        r = self.tarmac("run", "--uuids", "--", "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES"')
        self.assertRegex(r.stdout.strip(), r"^GPU-[0-9a-f-]{36}$")
        self.assertEqual(self.lease_files(), [])

    def test_load_runs_on_the_gpus_it_was_given(self):
        # The load is registered with the simulator (its procs/PID file) before the files are read.
        r = self.tarmac("run", "-n", "3", "--", "sh", "-c",
                        f'{LOAD} --seconds 600 & p=$!; '
                        f'until [ -s "$TARMAC_SIM_STATE/procs/$p" ]; do sleep 0.05; done; '
                        f'echo "$CUDA_VISIBLE_DEVICES"; cat "$TARMAC_SIM_STATE"/procs/*; kill $p; wait')
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn(f"gpus={lines[0]}", lines)

    def test_wall_clock_limit_kills_a_job_that_ignores_sigterm_with_its_children(self):
        pidfile = os.path.join(self.tmp, "child.pid")
        script = ("import signal, subprocess, time\n"
                  "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                  f"c = subprocess.Popen(['sleep', '60'])\n"
                  f"open({pidfile!r}, 'w').write(str(c.pid))\n"
                  "time.sleep(60)\n")
        # Without the limit the job runs its 60 s and exits 0 (the timeout of 120 s is a hang's bound).
        r = self.tarmac("run", "--time", "1s", "--grace", "1s", "--", sys.executable, "-c", script, timeout=120)
        self.assertEqual(r.returncode, 128 + signal.SIGKILL, r.stderr)
        self.assertIn("wall-clock limit of 1s reached", r.stderr)
        self.assertIn("SIGKILL", r.stderr)
        child = int(pathlib.Path(pidfile).read_text())
        self.assertFalse(os.path.exists(f"/proc/{child}"), "the job's child survived")
        self.assertEqual(self.lease_files(), [])

    def test_a_stderr_nobody_reads_does_not_hold_back_the_wall_clock_limit(self):
        # The job fills its stderr pipe, which nobody reads, and ignores SIGTERM. run's notice of the
        # limit goes to the same full pipe: it must not block the SIGTERM and the SIGKILL behind it.
        # (Blocking writes of exactly the pipe's capacity: O_NONBLOCK would be shared with run's stderr.)
        script = ("import fcntl, os, signal, time\n"
                  "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                  "size = fcntl.fcntl(2, 1032)  # F_GETPIPE_SZ\n"
                  "while size > 0: size -= os.write(2, b'x' * min(size, 4096))\n"
                  "open(os.environ['FULL'], 'w').close()\n"
                  "time.sleep(60)\n")
        full = os.path.join(self.tmp, "full")
        r_fd, w_fd = os.pipe()  # the read end is never read
        self.addCleanup(os.close, r_fd)
        env = dict(self.env(), FULL=full)
        p = subprocess.Popen([TARMAC, "run", "--time", "2s", "--grace", "1s", "--", sys.executable, "-c", script],
                             env=env, stdout=subprocess.DEVNULL, stderr=w_fd)
        os.close(w_fd)
        self.assertTrue(wait_for(lambda: os.path.exists(full), timeout=HANG_S), "the job never filled its stderr")
        # Before the fix, run blocked in its notice and the job ran its 60 s (or forever).
        self.assertEqual(p.wait(timeout=HANG_S), 128 + signal.SIGKILL)
        self.assertEqual(self.lease_files(), [])

    def test_sigterm_to_run_reaches_the_job(self):
        p = self.popen("run", "-n", "4", "--", LOAD, "--seconds", "60")
        self.assertTrue(wait_for(lambda: len(live_sim_processes(self.sim.state)) == 1, timeout=30))
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, err)
        self.assertEqual(live_sim_processes(self.sim.state), {})
        self.assertEqual(self.lease_files(), [])

    def test_kill_9_of_run_frees_its_leases(self):
        # The job sits in its own process group, so it outlives run (a documented gap of the
        # agentless mode); the leases, owned by run's pid, do not.
        pidfile = os.path.join(self.tmp, "job.pid")
        p = subprocess.Popen([TARMAC, "run", "-n", "4", "--", "sh", "-c", f"echo $$ > {pidfile}; exec sleep 60"],
                             env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.assertTrue(wait_for(lambda: len(self.lease_files()) == 4 and os.path.exists(pidfile), timeout=30))
        self.assertEqual(self.tarmac("pick", "-n", "1").returncode, 1)  # all leased
        p.kill()
        p.wait(timeout=30)
        job = int(pathlib.Path(pidfile).read_text())
        self.addCleanup(lambda: subprocess.run(["kill", "-KILL", str(job)], stderr=subprocess.DEVNULL))
        r = self.tarmac("pick", "-n", "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.lease_files(), [])  # stale ones are removed by the next look

    def test_bad_input_leases_nothing(self):
        cases = [
            ["run", "-n", "0", "--", "true"],
            ["run", "-n", "5", "--", "true"],
            ["run", "--time", "soon", "--", "true"],
            ["run", "--grace", "-1s", "--", "true"],
            ["run", "--min-free", "lots", "--", "true"],
            ["run", "--max-util", "101", "--", "true"],
            ["run", "--no-such-flag", "--", "true"],
            ["run", "-n", "1"],
            ["pick", "-n", "0"],
            ["pick", "-n", "5", "--hold", "1m"],
            ["pick", "--hold", "forever"],
            ["pick", "--format", "yaml"],
        ]
        for args in cases:
            with self.subTest(args=args):
                r = self.tarmac(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertTrue(r.stderr.strip())
                self.assertEqual(self.lease_files(), [])
        r = self.tarmac("run", "-n", "1", "--", "no-such-command-here", "x")
        self.assertEqual(r.returncode, 127)
        self.assertIn("tarmac: no-such-command-here: command not found", r.stderr)
        self.assertEqual(self.lease_files(), [])

    def test_wait_gives_up(self):
        hold = self.tarmac("pick", "-n", "4", "--hold", "30s")
        self.assertEqual(hold.returncode, 0, hold.stderr)
        r = self.tarmac("run", "--wait", "1s", "--", "true")
        self.assertEqual(r.returncode, 1)
        self.assertIn("waiting for 1 free GPU", r.stderr)
        self.assertIn("leased", r.stderr)


class PickOnTopology(SchedTest):
    scenario = "mixed-topology-8gpu"  # GPUs 0-3 busy; 4-5 and 6-7 NV12 pairs, idle

    def test_concurrent_holds_never_share_and_take_nvlink_pairs(self):
        for _ in range(3):
            for f in self.lease_files():
                os.unlink(os.path.join(self.locks, f))
            picks = [self.popen("pick", "-n", "2", "--hold", "30s") for _ in range(2)]
            out = []
            for p in picks:
                stdout, stderr = p.communicate(timeout=60)
                self.assertEqual(p.returncode, 0, stderr)
                out.append(stdout.strip())
            self.assertEqual(sorted(out), ["4,5", "6,7"])
            self.assertEqual(len(self.lease_files()), 4)
        r = self.tarmac("pick", "-n", "1")
        self.assertEqual(r.returncode, 1)
        for gpu in range(8):
            self.assertIn(f"GPU {gpu}: ", r.stderr)
        self.assertIn("GPU 0: process", r.stderr)
        self.assertIn("GPU 4: leased", r.stderr)

    def test_formats_and_json(self):
        self.assertEqual(self.tarmac("pick", "-n", "2").stdout.strip(), "4,5")
        self.assertEqual(self.tarmac("pick", "-n", "2", "--format", "env").stdout.strip(),
                         "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=4,5")
        uuids = self.tarmac("pick", "-n", "2", "--format", "uuid").stdout.strip().split(",")
        self.assertEqual(len(uuids), 2)
        self.assertTrue(all(u.startswith("GPU-") for u in uuids))
        j = json.loads(self.tarmac("--json", "pick", "-n", "2").stdout)
        self.assertEqual([g["index"] for g in j["gpus"]], [4, 5])
        self.assertEqual([g["uuid"] for g in j["gpus"]], uuids)
        self.assertEqual({e["index"]: e["reason"] for e in j["excluded"]}, {0: "process", 1: "process",
                                                                              2: "process", 3: "process"})
        self.assertEqual(self.lease_files(), [])  # no --hold: nothing written


if __name__ == "__main__":
    unittest.main()
