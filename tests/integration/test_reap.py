"""End-to-end tests of `tarmac reap` (docs/reap.md, issue 15) on the simulator, with tarmac-sim-load
processes and the simulator's process registry (procs/PID, one file per live GPU process) as the
judge: what reap says it ended has left the GPU, and what it must leave alone is still there.

The GPUs of h100x8-idle-fleet are idle at simulated Monday 00:00, so every utilization seen is the
test's own processes'. An agent records the simulation for the whole class: root's --kill acts on
its store's evidence only (a watch cannot tie a listing to the process now at the pid: docs/reap.md
"Safety checks"), and a dry run or a user's own --kill without a store watches for a short --window.

A holder must have its GPU's device file open (docs/reap.md, "Safety checks"). No test can create
a GPU's device node (major 195) without the driver, so reap takes /dev/zero as every GPU's file
(TARMAC_REAP_TEST_DEVICE_FILE, compiled only into builds with tests) and a load "holds" its GPU
when the test passes it an open /dev/zero."""
import json
import os
import pathlib
import signal
import subprocess
import tempfile
import unittest

from agent_support import HeldSim, create_context_after_a_sample, end_process, gpu_pids, query, wait_for
from devtools import demoted, require_tool, second_user
from test_status import BUILD, TARMAC

LOAD = BUILD / "sim" / "tarmac-sim-load"
SCENARIO = "h100x8-idle-fleet"
QUICK = ("--idle-for", "1s", "--window", "1500ms", "--grace", "1s")
DEVICE_FILE = "/dev/zero"  # every GPU's device file, for these tests


class ReapTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_tool("tarmac-sim-load", str(LOAD), hint="the simulator's load program: build the target tarmac-sim-load")
        cls.sim = HeldSim(SCENARIO)
        # Readable by the second user, who runs reap in one test.
        os.chmod(cls.sim.state, 0o755)
        cls.agent_dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-reap-agent-"))
        cls.db = cls.agent_dir / "state" / "tarmac.db"
        cls.agent_err = open(cls.agent_dir / "agent.stderr", "w+")
        cls.agent = subprocess.Popen([str(TARMAC), "agent", "--state-dir", str(cls.agent_dir / "state"),
                                      "--listen", "off", "--socket", "off", "--interval", "250ms",
                                      "--process-interval", "250ms", "--flush", "250ms"],
                                     env=cls.sim.env(), stdout=subprocess.DEVNULL, stderr=cls.agent_err)
        if not wait_for(lambda: cls.db.exists() and cls.agent.poll() is None):
            cls.tearDownClass()
            raise AssertionError("the agent never wrote its store")

    @classmethod
    def tearDownClass(cls):
        end_process(cls.agent)
        cls.agent_err.close()
        subprocess.run(["rm", "-rf", str(cls.agent_dir)])
        cls.sim.close()

    def setUp(self):
        self.loads = []
        self.device = os.open(DEVICE_FILE, os.O_RDONLY | os.O_CLOEXEC)
        self.addCleanup(os.close, self.device)
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-reap-"))
        os.chmod(self.dir, 0o755)
        self.kill_switch = self.dir / "reap.disabled"
        self.config = self.dir / "tarmac.toml"
        self.write_config()

    def tearDown(self):
        for p in self.loads:
            end_process(p)
        subprocess.run(["rm", "-rf", str(self.dir)])

    def write_config(self, min_age="0s", extra=""):
        # A root-owned file that only root can change: what root's tarmac accepts (docs/security.md).
        self.config.write_text(f'[reaper]\nmin_age = "{min_age}"\nkill_switch = "{self.kill_switch}"\n{extra}')
        os.chmod(self.config, 0o644)

    def load(self, gpu, util, *args, user=None, holds_device=True):
        """A tarmac-sim-load on GPU `gpu` at `util` % holding 2 GiB (and, unless `holds_device` is
        false, the GPU's device file), its context created once the agent has sampled it without one
        (so that its listing is proven its own); waits until the registry lists it."""
        env = self.sim.env({"CUDA_VISIBLE_DEVICES": str(gpu), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        p = subprocess.Popen([str(LOAD), "--mem", "2GiB", "--util", str(util), "--context-on-usr1", *args], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             pass_fds=(self.device,) if holds_device else (),
                             preexec_fn=demoted(user) if user else None)
        self.loads.append(p)
        create_context_after_a_sample(p, self.db)
        self.assertTrue(wait_for(lambda: p.pid in gpu_pids(self.sim.state, gpu)), f"load on GPU {gpu} never registered")
        return p

    def reap(self, *args, user=None, gpus=None, db=None):
        """`tarmac --json reap` with the test's configuration and the agent's store (or `db`);
        returns (exit code, report, stderr)."""
        cmd = [str(TARMAC), "--json", "--config", str(self.config), "reap", "--db", str(db or self.db),
               *QUICK, *args]
        if gpus is not None:
            cmd += ["--gpu", ",".join(str(g) for g in gpus)]
        env = self.sim.env({"TARMAC_REAP_TEST_DEVICE_FILE": DEVICE_FILE})
        r = subprocess.run(cmd, env=env, capture_output=True, text=True,
                           timeout=120,
                           preexec_fn=demoted(user) if user else None)
        if not r.stdout.strip():
            raise AssertionError(f"reap printed nothing, exit {r.returncode}: {r.stderr}")
        return r.returncode, json.loads(r.stdout), r.stderr

    def watch(self, *args, user=None, gpus=None):
        """reap without a store to read: it watches for --window."""
        return self.reap(*args, user=user, gpus=gpus, db=self.dir / "none.db")

    def recorded(self, pid):
        """Once the agent has stored a sample of `pid`: its evidence, not just the current reading."""
        return wait_for(lambda: query(self.db, "SELECT count(*) FROM process_sample WHERE pid = ?", pid)[0][0] > 0)

    def until_candidate(self, pid, gpus):
        """A dry run once the agent has recorded `pid` idle for --idle-for: the store's evidence
        makes it a candidate (what root's --kill then acts on)."""
        last = {}

        def candidate():
            last["report"] = self.reap(gpus=gpus)[1]
            return self.entry(last["report"], pid)["decision"] == "candidate"
        self.assertTrue(wait_for(candidate, step=0.25), f"never a candidate: {last.get('report')}")
        return last["report"]

    @staticmethod
    def entry(report, pid):
        found = [p for p in report["processes"] if p["pid"] == pid]
        if not found:
            raise AssertionError(f"pid {pid} is not in the report: {report['processes']}")
        return found[0]

    def assert_alive(self, p, gpu):
        self.assertIsNone(p.poll(), f"pid {p.pid} was ended")
        self.assertIn(p.pid, gpu_pids(self.sim.state, gpu))


class FindsAndEnds(ReapTest):
    def test_a_lone_idle_holder_is_found_by_a_dry_run_that_changes_nothing_then_ended(self):
        zombie = self.load(5, 0, "--name", "jupyter-kernel")
        worker = self.load(0, 80, "--name", "trainer")
        rc, report, _ = self.watch(gpus=[0, 5])  # no store: a dry run watches
        self.assertEqual(rc, 1, report)
        self.assertEqual(report["mode"], "dry-run")
        self.assertEqual(report["evidence"]["source"], "watch")
        self.assertGreaterEqual(report["evidence"]["watched_ms"], 1500)
        z = self.entry(report, zombie.pid)
        self.assertEqual(z["decision"], "candidate", z)
        # Its own reading where NVML gives one, else the GPU's, since it is the GPU's only process.
        self.assertIn(z["util_source"], ("per-process", "device (only process)"))
        self.assertLessEqual(z["idle_ms"], report["evidence"]["watched_ms"], "more idle time claimed than watched")
        self.assertEqual(z["mem_used_bytes"], 2 << 30)
        self.assertEqual(self.entry(report, worker.pid)["decision"], "busy")
        self.assert_alive(zombie, 5)
        self.assert_alive(worker, 0)

        self.assertTrue(self.recorded(worker.pid))
        report = self.until_candidate(zombie.pid, [0, 5])
        self.assertEqual(report["evidence"]["source"], "store")
        self.assertEqual(self.entry(report, worker.pid)["decision"], "busy")
        rc, report, stderr = self.reap("--kill", gpus=[0, 5])
        self.assertEqual(rc, 0, (report, stderr))
        action = self.entry(report, zombie.pid)["action"]
        self.assertEqual(action["outcome"], "ended", action)
        self.assertEqual(action["signal"], "SIGTERM")
        self.assertTrue(action["memory_freed"], action)
        self.assertEqual(report["reaped"], 1)
        self.assertEqual(zombie.wait(timeout=30), -signal.SIGTERM)
        self.assertNotIn(zombie.pid, gpu_pids(self.sim.state, 5))
        self.assert_alive(worker, 0)
        self.assertIn(f"pid {zombie.pid}", stderr)  # every kill is logged

    def test_a_zombie_next_to_a_worker_on_the_same_gpu_is_ended_and_the_worker_keeps_running(self):
        zombie = self.load(1, 0, "--name", "dead-rank")
        worker = self.load(1, 80, "--name", "trainer")
        self.assertTrue(self.recorded(worker.pid))
        report = self.until_candidate(zombie.pid, [1])
        self.assertEqual(self.entry(report, worker.pid)["decision"], "busy")
        rc, report, _ = self.reap("--kill", gpus=[1])
        self.assertEqual(rc, 0, report)
        self.assertEqual(zombie.wait(timeout=30), -signal.SIGTERM)
        self.assert_alive(worker, 1)

    def test_a_holder_that_ignores_sigterm_is_sigkilled_after_the_grace(self):
        stubborn = self.load(2, 0, "--ignore-sigterm")
        self.until_candidate(stubborn.pid, [2])
        rc, report, _ = self.reap("--kill", gpus=[2])
        self.assertEqual(rc, 0, report)
        action = self.entry(report, stubborn.pid)["action"]
        self.assertEqual(action["outcome"], "killed", action)
        self.assertEqual(action["signal"], "SIGKILL")
        self.assertEqual([s["signal"] for s in action["steps"] if s["sent"]], ["SIGTERM", "SIGKILL"])
        self.assertEqual(stubborn.wait(timeout=30), -signal.SIGKILL)
        # A SIGKILLed load cannot remove its registry file: the launcher drops it as stale.
        self.assertTrue(wait_for(lambda: stubborn.pid not in gpu_pids(self.sim.state, 2)))


class LeavesAlone(ReapTest):
    def test_roots_kill_without_an_agent_store_refuses_before_it_watches(self):
        zombie = self.load(5, 0)
        r = subprocess.run([str(TARMAC), "--config", str(self.config), "reap", "--db", str(self.dir / "none.db"),
                            *QUICK, "--kill", "--gpu", "5"],
                           env=self.sim.env({"TARMAC_REAP_TEST_DEVICE_FILE": DEVICE_FILE}),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("acts on the agent's recorded evidence only", r.stderr)
        self.assertIn("nothing was done", r.stderr)
        self.assertEqual(r.stdout, "")
        self.assert_alive(zombie, 5)

    def test_another_users_process_is_refused_for_a_non_root_caller(self):
        t2 = second_user(self)
        zombie = self.load(3, 0)  # root's
        rc, report, _ = self.watch("--kill", user=t2, gpus=[3])  # a user cannot read root's store
        z = self.entry(report, zombie.pid)
        self.assertEqual(z["decision"], "other-user", z)
        self.assertIsNone(z["action"])
        self.assertEqual(rc, 0)
        self.assert_alive(zombie, 3)

    def test_allow_listed_too_young_and_unknown_utilization_are_never_touched(self):
        protected = self.load(4, 0, "--name", "nvidia-smi")
        # Two idle processes on one GPU whose per-process utilization fails to read: unknown for both
        # (the device's own figure speaks for a process only when it is alone).
        for function in ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization"):
            r = self.sim.run("sim", "fault", "--state", self.sim.state, f"function={function},gpu=6,return=UNKNOWN")
            self.assertEqual(r.returncode, 0, r.stderr)
        unknown = [self.load(6, 0), self.load(6, 0)]
        for p in (protected, *unknown):
            self.assertTrue(self.recorded(p.pid), f"the agent never recorded pid {p.pid}")
        rc, report, _ = self.reap("--kill", gpus=[4, 6])
        self.assertEqual(self.entry(report, protected.pid)["decision"], "protected")
        for p in unknown:
            self.assertEqual(self.entry(report, p.pid)["decision"], "unknown-utilization", report)
            self.assertEqual(self.entry(report, p.pid)["why"], "the last reading is unknown")
        self.assertEqual(rc, 0)
        self.write_config(min_age="1h")
        young = self.load(7, 0)
        self.assertTrue(self.recorded(young.pid))
        rc, report, _ = self.reap("--kill", gpus=[7])
        self.assertEqual(self.entry(report, young.pid)["decision"], "too-young")
        self.assertEqual(rc, 0)
        self.assert_alive(protected, 4)
        for p in unknown:
            self.assert_alive(p, 6)
        self.assert_alive(young, 7)

    def test_a_listed_pid_without_the_gpus_device_file_is_never_signalled(self):
        # The review's C1: NVML lists a pid, but the process that has it now does not hold the GPU
        # (the listed one ended, its context kept by a child): the old reap ended it.
        stranger = self.load(5, 0, holds_device=False)
        self.assertTrue(self.recorded(stranger.pid))
        rc, report, _ = self.reap("--kill", gpus=[5])
        s = self.entry(report, stranger.pid)
        self.assertEqual(s["decision"], "not-holding", s)
        self.assertIn("does not have the GPU's device file", s["why"])
        self.assertIsNone(s["action"])
        self.assertEqual(rc, 0)
        self.assert_alive(stranger, 5)

    def test_an_encoder_only_process_at_sm_0_is_busy(self):
        # The review's H4: NVENC at 40 % with SM and memory at 0 % is working, by its own sample.
        transcoder = self.load(3, 0, "--enc-util", "40")
        self.assertTrue(self.recorded(transcoder.pid))
        rc, report, _ = self.reap("--kill", gpus=[3])
        t = self.entry(report, transcoder.pid)
        self.assertEqual(t["decision"], "busy", t)
        self.assertEqual(t["sm_util_pct"], 40)
        self.assertEqual(rc, 0)
        self.assert_alive(transcoder, 3)

    def test_the_kill_switch_stops_everything(self):
        zombie = self.load(5, 0)
        self.until_candidate(zombie.pid, [5])
        self.kill_switch.write_text("maintenance until Monday\n")
        rc, report, _ = self.reap("--kill", gpus=[5])
        z = self.entry(report, zombie.pid)
        self.assertEqual(z["decision"], "candidate")
        self.assertEqual(z["action"]["outcome"], "left")
        self.assertIn("kill switch", z["action"]["message"])
        self.assertTrue(report["rules"]["kill_switch_present"])
        rc, report, _ = self.reap(gpus=[5])  # a dry run says so too
        self.assertTrue(report["rules"]["kill_switch_present"])
        self.assertEqual(rc, 1)
        self.assert_alive(zombie, 5)


if __name__ == "__main__":
    unittest.main()
