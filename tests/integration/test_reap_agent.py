"""The agent's reaper end to end (docs/reap.md "As a service", issue 15) on the simulator: a zombie
(tarmac-sim-load at 0 %) next to a worker (at 80 %) on GPU 1 of h100x8-idle-fleet, the agent with
reaper.interval at its 10 s minimum, warn_after 1 s and idle_for 3 s, its evidence from its own
store. With reaper.enabled it warns (the
webhook's firing `reaper` notice, a "hold" event), reaps in a later pass (the simulator's registry
no longer lists the zombie, the worker runs on), records the "reap" event, announces it (resolved)
and counts it on /metrics. With reaper.enabled = false it warns and never signals.

A holder must have its GPU's device file open (docs/reap.md, "Safety checks"): as in test_reap.py,
/dev/zero stands for every GPU's (TARMAC_REAP_TEST_DEVICE_FILE) and each load holds it open.

No fixed sleeps: every wait is for an event (a notice, a metrics line, a row), bounded by a hang."""
import json
import os
import pathlib
import re
import signal
import subprocess
import tempfile
import unittest

from agent_support import (HeldSim, create_context_after_a_sample, end_process, free_port, gpu_pids, http_get, query,
                           wait_for)
from devtools import require_tool
from test_alerts_live import Receiver
from test_status import BUILD, TARMAC

LOAD = BUILD / "sim" / "tarmac-sim-load"
SCENARIO = "h100x8-idle-fleet"
GPU = 1
DEVICE_FILE = "/dev/zero"  # every GPU's device file, for these tests


def config(hook, enabled, kill_switch):
    return (f'[alerts]\nwebhook = "{hook}"\n\n'
            f'[reaper]\nenabled = {"true" if enabled else "false"}\nwarn_after = "1s"\nidle_for = "3s"\n'
            f'min_age = "0s"\ninterval = "10s"\ngrace = "2s"\nkill_switch = "{kill_switch}"\n')


class AgentReaperTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_tool("tarmac-sim-load", str(LOAD), hint="the simulator's load program: build the target tarmac-sim-load")

    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-reap-agent-"))
        self.sim = HeldSim(SCENARIO, state=str(self.dir / "sim"))
        self.hook = Receiver()
        self.procs = []
        self.err = None
        self.device = os.open(DEVICE_FILE, os.O_RDONLY | os.O_CLOEXEC)
        self.addCleanup(os.close, self.device)
        self.port = free_port()

    def tearDown(self):
        for p in self.procs:
            end_process(p)
        self.hook.close()
        if self.err is not None:
            self.err.close()
        self.sim.close()
        self.sim.proc.stdout.close()
        self.sim.proc.stderr.close()
        subprocess.run(["rm", "-rf", str(self.dir)])

    def load(self, util, name):
        env = self.sim.env({"CUDA_VISIBLE_DEVICES": str(GPU), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        p = subprocess.Popen([str(LOAD), "--mem", "2GiB", "--util", str(util), "--name", name, "--context-on-usr1"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(self.device,))
        self.procs.append(p)
        # Its context once the agent has sampled it without one: the agent sees its listing begin
        # while it has its pid, which is what lets the agent end it (docs/reap.md, "Safety checks").
        create_context_after_a_sample(p, self.dir / "state" / "tarmac.db")
        self.assertTrue(wait_for(lambda: p.pid in gpu_pids(self.sim.state, GPU)), f"{name} never registered")
        return p

    def start_agent(self, enabled):
        cfg = self.dir / "tarmac.toml"
        cfg.write_text(config(self.hook.url, enabled, self.dir / "reap.disabled"))
        self.err = open(self.dir / "agent.stderr", "w+")
        agent = subprocess.Popen([str(TARMAC), "--config", str(cfg), "agent", "--state-dir", str(self.dir / "state"),
                                  "--listen", f"127.0.0.1:{self.port}", "--socket", "off", "--interval", "250ms",
                                  "--process-interval", "500ms", "--flush", "250ms"],
                                 env=self.sim.env({"TARMAC_REAP_TEST_DEVICE_FILE": DEVICE_FILE}),
                                 stdout=subprocess.DEVNULL,
                                 stderr=self.err, text=True)
        self.procs.append(agent)
        return agent

    def log(self):
        self.err.seek(0)
        return self.err.read()

    def metrics(self):
        try:
            status, _, body = http_get(self.port, "/metrics")
        except OSError:
            return ""
        return body if status == 200 else ""

    def metric(self, name, **labels):
        """The value of the first NAME sample whose labels include LABELS, or None."""
        for line in self.metrics().splitlines():
            m = re.match(rf"{name}(?:\{{(.*)\}})? (\S+)$", line)
            if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
                return float(m.group(2))
        return None

    def notices(self, pid, status):
        return [n for n in self.hook.matching(rule="reaper", gpu=GPU, status=status) if n["alert"]["pid"] == pid]

    def events(self, kind):
        db = self.dir / "state" / "tarmac.db"
        if not db.exists():
            return []
        return [json.loads(r[0]) for r in query(db, "SELECT detail FROM event WHERE kind = ?", kind)]

    def report_zombies(self):
        r = subprocess.run([str(TARMAC), "--json", "report", "--db", str(self.dir / "state" / "tarmac.db"),
                            "--since", "1h"], env=self.sim.env(), capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["zombies"]

    def test_it_warns_then_reaps_the_zombie_records_announces_and_counts_it_and_the_worker_runs_on(self):
        self.start_agent(enabled=True)
        zombie = self.load(0, "jupyter-kernel")
        worker = self.load(80, "trainer")
        self.assertTrue(wait_for(lambda: self.notices(zombie.pid, "firing")),
                        f"no warning reached the webhook: {self.hook.all()} {self.log()[-2000:]}")
        warning = self.notices(zombie.pid, "firing")[0]["alert"]
        self.assertEqual(warning["severity"], "warning")
        self.assertRegex(warning["summary"], rf"^pid {zombie.pid} \(\S+, tarmac-sim-load --mem 2GiB\) holds 2\.0 GiB on GPU {GPU} "
                                             r"at 0 % for \S+; reaped at 3s$")
        self.assertTrue(wait_for(lambda: any(e["pid"] == zombie.pid for e in self.events("hold"))), "no hold event")
        self.assertIsNone(zombie.poll(), "ended in the pass that warned its owner")

        self.assertEqual(zombie.wait(timeout=120), -signal.SIGTERM)
        self.assertTrue(wait_for(lambda: zombie.pid not in gpu_pids(self.sim.state, GPU)))
        self.assertIsNone(worker.poll(), "the worker next to the zombie was ended")
        self.assertIn(worker.pid, gpu_pids(self.sim.state, GPU))
        self.assertTrue(wait_for(lambda: self.notices(zombie.pid, "resolved")), f"no reaped notice: {self.hook.all()}")
        self.assertRegex(self.notices(zombie.pid, "resolved")[0]["alert"]["summary"],
                         rf"^reaped pid {zombie.pid} \(.*\) on GPU {GPU}: 2\.0 GiB free after \S+$")
        self.assertTrue(wait_for(lambda: any(e["pid"] == zombie.pid and e["outcome"] == "ended"
                                             for e in self.events("reap"))), "no reap event in the store")
        self.assertTrue(wait_for(lambda: self.metric("tarmac_reaped_processes_total", gpu=GPU, outcome="ended") == 1),
                        self.metrics()[-3000:])
        self.assertIn(f"pid {zombie.pid}", self.log())  # every action is logged
        self.assertEqual(len(self.notices(zombie.pid, "firing")), 1, "warned twice")
        # The grounded-fleet report's "zombies found / reaped" (docs/report.md), from the same store.
        # Its range ends where the recording does (the last activity span written): waited for.
        self.assertTrue(wait_for(lambda: self.report_zombies()["reaped"] >= 1, step=0.5), self.report_zombies())
        zombies = self.report_zombies()
        self.assertGreaterEqual(zombies["found"], 1, zombies)
        self.assertEqual(zombies["reaped"], 1, zombies)
        self.assertEqual(zombies["freed_bytes"], 2 << 30, zombies)
        self.assertEqual(zombies["recent"][0]["pid"], zombie.pid)

    def test_with_reaper_enabled_false_it_warns_counts_the_holder_and_never_kills(self):
        self.start_agent(enabled=False)
        zombie = self.load(0, "jupyter-kernel")
        self.assertTrue(wait_for(lambda: self.notices(zombie.pid, "firing")), f"no warning: {self.log()[-2000:]}")
        self.assertIn("the agent does not reap", self.notices(zombie.pid, "firing")[0]["alert"]["summary"])
        # Two passes after the warning, when an enabled agent would have ended it.
        self.assertTrue(wait_for(lambda: (self.metric("tarmac_reaper_passes_total") or 0) >= 3), self.metrics()[-2000:])
        self.assertEqual(self.metric("tarmac_holding_processes", gpu=GPU), 1)
        self.assertEqual(self.metric("tarmac_holding_processes", gpu=0), 0)
        self.assertIsNone(zombie.poll(), "reaper.enabled = false ended a process")
        self.assertIn(zombie.pid, gpu_pids(self.sim.state, GPU))
        self.assertIsNone(self.metric("tarmac_reaped_processes_total"))
        self.assertEqual(self.events("reap"), [])
        self.assertEqual(len(self.notices(zombie.pid, "firing")), 1, "warned twice")


if __name__ == "__main__":
    unittest.main()
