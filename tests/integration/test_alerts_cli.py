"""`tarmac alerts` end to end: a few simulated minutes recorded by `tarmac agent --clock sim`, then
`alerts --check` read from that store (exit 1 naming GPU 3's holding on holding-zombie, exit 0 on
a100x4-balanced), and `alerts --prometheus-rules` checked by Prometheus's own promtool."""
import json
import pathlib
import shutil
import subprocess
import tempfile
import unittest

from devtools import require_tool
from test_status import TARMAC, sim

SPEED = 60  # a simulated minute per second


def record(scenario, directory, duration):
    """Records `duration` of simulated time of `scenario` into directory/tarmac.db; returns the db."""
    config = directory / "tarmac.toml"
    config.write_text('[http]\nlisten = ""\n')  # no HTTP endpoint: tests run side by side
    r = sim(scenario, TARMAC, "--config", str(config), "agent", "--clock", "sim", "--interval", "10s",
            "--process-interval", "10s", "--duration", duration, "--state-dir", str(directory),
            extra=["--speed", str(SPEED)], timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"agent exit {r.returncode}: {r.stderr}")
    return directory / "tarmac.db"


def tarmac(*args, timeout=60):
    return subprocess.run([TARMAC, *args], capture_output=True, text=True, timeout=timeout)


class CheckFromTheStore(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-alerts-"))
        (cls.dir / "zombie").mkdir()
        (cls.dir / "balanced").mkdir()
        # holding needs activity.holding_after (10 min) at 0 % before the GPU's class is holding.
        cls.zombie_db = record("holding-zombie", cls.dir / "zombie", "14m")
        cls.balanced_db = record("a100x4-balanced", cls.dir / "balanced", "6m")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_holding_zombie_fires_holding_on_gpu_3(self):
        r = tarmac("alerts", "--check", "--db", str(self.zombie_db))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("1 alert firing", r.stdout)
        self.assertRegex(r.stdout, r"\[warning\] holding: GPU 3 \(GPU-5b2e0c55-[^)]*\): python -m ipykernel_launcher "
                                   r"\([^,]+, pid \d+\) holds 20\.0 GiB at 0 % for 1\dm")

    def test_holding_zombie_json(self):
        r = tarmac("--json", "alerts", "--check", "--state-dir", str(self.dir / "zombie"))
        self.assertEqual(r.returncode, 1, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual([(a["rule"], a["gpu"], a["severity"]) for a in j["firing"]], [("holding", 3, "warning")])
        alert = j["firing"][0]
        self.assertIn("ipykernel_launcher", alert["command"])
        self.assertEqual(alert["uuid"], "GPU-5b2e0c55-9a3d-4c0e-8f1e-2d7a64c3e9b0")
        self.assertIsInstance(alert["pid"], int)
        self.assertGreater(j["samples"], 0)

    def test_disabling_the_rule_silences_it(self):
        config = self.dir / "quiet.toml"
        config.write_text('[alerts]\ndisabled = "holding"\n')
        r = tarmac("--config", str(config), "alerts", "--check", "--db", str(self.zombie_db))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no alerts firing", r.stdout)

    def test_balanced_fires_nothing(self):
        r = tarmac("alerts", "--check", "--db", str(self.balanced_db))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no alerts firing", r.stdout)
        j = json.loads(tarmac("--json", "alerts", "--check", "--db", str(self.balanced_db)).stdout)
        self.assertEqual(j["firing"], [])

    def test_a_store_that_cannot_be_read_is_exit_3(self):
        r = tarmac("alerts", "--check", "--db", str(self.dir / "missing.db"))
        self.assertEqual(r.returncode, 3, r.stderr)
        junk = self.dir / "junk.db"
        junk.write_text("not a database")
        self.assertEqual(tarmac("alerts", "--check", "--db", str(junk)).returncode, 3)


class PrometheusRules(unittest.TestCase):
    def test_promtool_accepts_the_rules(self):
        promtool = require_tool("promtool", hint="Debian's prometheus package; scripts/deps.sh --test installs it")
        with tempfile.TemporaryDirectory() as d:
            path = pathlib.Path(d) / "tarmac-rules.yml"
            r = tarmac("alerts", "--prometheus-rules", "-o", str(path))
            self.assertEqual(r.returncode, 0, r.stderr)
            checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
            self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
            # 7 alerting rules, then the fleet report's 10 recording rules and their 10 hourly twins.
            self.assertIn("SUCCESS: 27 rules found", checked.stdout)

    def test_stdout_and_configuration(self):
        with tempfile.TemporaryDirectory() as d:
            config = pathlib.Path(d) / "t.toml"
            config.write_text('[alerts]\nthermal_c = 80\ndisabled = "idle"\n')
            r = tarmac("--config", str(config), "alerts", "--prometheus-rules")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("groups:\n  - name: tarmac\n", r.stdout)
        self.assertIn("DCGM_FI_DEV_GPU_TEMP >= 80", r.stdout)
        self.assertNotIn("TarmacGpuIdle", r.stdout)
        self.assertIn("alert: TarmacGpuHolding", r.stdout)


class Usage(unittest.TestCase):
    def test_bad_flags_are_exit_2(self):
        for args in (["alerts"], ["alerts", "--check", "--prometheus-rules"], ["alerts", "--bogus"],
                     ["alerts", "--check", "-o", "x.yml"], ["alerts", "--prometheus-rules", "--db", "x.db"],
                     ["alerts", "--check", "--db", "a.db", "--state-dir", "/tmp"]):
            with self.subTest(args=args):
                r = tarmac(*args)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertTrue(r.stderr, "a message on stderr")

    def test_help_names_every_flag(self):
        r = tarmac("alerts", "--help")
        self.assertEqual(r.returncode, 0)
        for flag in ("--check", "--prometheus-rules", "--db", "--state-dir", "--output"):
            self.assertIn(flag, r.stdout)


if __name__ == "__main__":
    unittest.main()
