"""End-to-end tests of the configuration: `tarmac config`, the default file paths, and bad files."""
import json
import os
import pathlib
import subprocess
import tempfile
import unittest

from test_status import TARMAC, sim


def run(*args, env=None):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run([TARMAC, *args], capture_output=True, text=True, timeout=30, env=full)


class Config(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.home = pathlib.Path(self.dir.name)
        self.env = {"XDG_CONFIG_HOME": str(self.home)}

    def tearDown(self):
        self.dir.cleanup()

    def write(self, text):
        path = self.home / "tarmac" / "tarmac.toml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return path

    def test_defaults_print_as_toml_that_reads_back(self):
        r = run("config", "--defaults")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("[doctor]\n", r.stdout)
        self.assertIn('holding_after = "10m"\n', r.stdout)
        path = self.write(r.stdout)
        r = run("--json", "config", env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j["files"], [str(path)])
        self.assertEqual(j["warnings"], [])
        self.assertEqual(j["values"]["doctor.window"], "3s")

    def test_user_file_is_read_and_checked(self):
        path = self.write('[activity]\nbusy_util_pct = 40\nbsy = 1\n')
        r = run("config", "--check", env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"configuration ok: {path} (1 warning)", r.stdout)
        self.assertIn(f"tarmac: warning: {path}:3: unknown key 'activity.bsy' (ignored)", r.stderr)
        r = run("config", env=self.env)
        self.assertIn("busy_util_pct = 40\n", r.stdout)

    def test_a_bad_value_names_its_line_and_stops_every_command(self):
        path = self.write('[activity]\n\nholding_after = "a while"\n')
        for args in (["config", "--check"], ["status"], ["doctor", "--window", "0"]):
            with self.subTest(args=args):
                r = run(*args, env=self.env)
                self.assertEqual(r.returncode, 2)
                self.assertIn(f"{path}:3:17: activity.holding_after: expected a duration", r.stderr)
                self.assertEqual(r.stdout, "")

    def test_a_missing_explicit_file_is_an_error(self):
        r = run("--config", str(self.home / "missing.toml"), "config")
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing.toml: no such file", r.stderr)

    def test_status_uses_the_configured_thresholds(self):
        # The balanced box runs at 93-96 %: with busy at 97 % and more, none of its GPUs is busy.
        self.write("[activity]\nbusy_util_pct = 97\n")
        r = sim("a100x4-balanced", TARMAC, "status", "--json", env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual({g["activity"] for g in json.loads(r.stdout)["gpus"]}, {"starved"})


if __name__ == "__main__":
    unittest.main()
