"""Files root reads and writes, tried by a second user (issue 13, items 14 and 16): root's
configuration must be a file only root can change (sudo -E hands root a user's XDG_CONFIG_HOME,
whose alerts.command root would run), and the store, which holds every job's command line and
working directory, is not readable by everyone."""
import json
import os
import pathlib
import shutil
import stat
import subprocess
import tempfile
import unittest

from agent_support import HeldSim
from devtools import SECOND_USER, demoted, second_user
from test_status import TARMAC

USER = SECOND_USER


def as_user(pw, *args, env=None):
    """tarmac ARGS with PW's uid, gid and no supplementary groups."""
    demote = demoted(pw)
    full = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    full.update(env or {})
    return subprocess.run([TARMAC, *args], capture_output=True, text=True, timeout=60, env=full,
                          preexec_fn=demote)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@unittest.skipUnless(os.geteuid() == 0, "needs root to act as a second user")
class RootConfiguration(unittest.TestCase):
    def setUp(self):
        self.pw = second_user(self)
        self.top = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-rootcfg-"))
        self.addCleanup(shutil.rmtree, self.top, True)
        os.chmod(self.top, 0o755)
        # The user's XDG_CONFIG_HOME, with an alerts.command that root must never run.
        self.home = self.top / "home"
        self.user_file = self.home / ".config" / "tarmac" / "tarmac.toml"
        self.user_file.parent.mkdir(parents=True)
        self.marker = self.top / "ran-as-root"
        self.user_file.write_text(f'[alerts]\ncommand = "/usr/bin/touch {self.marker}"\nfault_for = "0s"\n')
        for p in (self.home, self.home / ".config", self.user_file.parent, self.user_file):
            os.chown(p, self.pw.pw_uid, self.pw.pw_gid)
        self.sudo_e = {"XDG_CONFIG_HOME": str(self.home / ".config"), "HOME": str(self.home)}

    def root(self, *args):
        env = dict(os.environ)
        env.update(self.sudo_e)
        return subprocess.run([TARMAC, *args], capture_output=True, text=True, timeout=60, env=env)

    def assert_refused(self, r, why):
        self.assertEqual(r.returncode, 2, f"{r.stdout}\n{r.stderr}")
        self.assertIn(f"refusing the configuration file {self.user_file}: ", r.stderr)
        self.assertIn(why, r.stderr)
        self.assertFalse(self.marker.exists(), "the user's alerts.command ran as root")

    def test_root_refuses_a_users_file_that_sudo_e_points_it_to(self):
        uid = self.pw.pw_uid
        r = self.root("--json", "config")
        self.assert_refused(r, f"is owned by uid {uid}, not by root")
        self.assertEqual(r.stdout, "")
        # The agent stops before it samples anything or starts the user's command.
        s = HeldSim("a100x4-balanced")
        self.addCleanup(s.close)
        env = s.env(self.sudo_e)
        r = subprocess.run([TARMAC, "agent", "--listen", "off", "--state-dir", str(self.top / "state"),
                            "--duration", "2s"], capture_output=True, text=True, timeout=60, env=env)
        self.assert_refused(r, f"is owned by uid {uid}, not by root")
        self.assertFalse((self.top / "state" / "tarmac.db").exists())

    def test_the_user_still_reads_their_own_file(self):
        r = as_user(self.pw, "--json", "config", env=self.sudo_e)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["values"]["alerts.command"], f"/usr/bin/touch {self.marker}")

    def test_a_root_file_others_could_change_is_refused_too(self):
        for p in (self.home, self.home / ".config", self.user_file.parent, self.user_file):
            os.chown(p, 0, 0)
        os.chmod(self.user_file, 0o664)
        self.assert_refused(self.root("config", "--check"), "it is writable by its group (mode 0664)")
        os.chmod(self.user_file, 0o644)
        os.chmod(self.user_file.parent, 0o777)
        self.assert_refused(self.root("config", "--check"),
                            f"its directory {self.user_file.parent} is writable by everyone (mode 0777)")
        os.chmod(self.user_file.parent, 0o755)
        r = self.root("config", "--check")
        self.assertEqual(r.returncode, 0, r.stderr)
        # And --config names a file the same rules apply to.
        os.chown(self.user_file, self.pw.pw_uid, self.pw.pw_gid)
        r = subprocess.run([TARMAC, "--config", str(self.user_file), "config"], capture_output=True, text=True,
                           timeout=60)
        self.assert_refused(r, f"is owned by uid {self.pw.pw_uid}, not by root")


@unittest.skipUnless(os.geteuid() == 0, "needs root to act as a second user")
class StorePrivacy(unittest.TestCase):
    def setUp(self):
        self.pw = second_user(self)
        self.top = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-store-"))
        self.addCleanup(shutil.rmtree, self.top, True)
        os.chmod(self.top, 0o755)
        self.state = self.top / "state"
        self.db = self.state / "tarmac.db"

    def record(self):
        s = HeldSim("a100x4-balanced")
        self.addCleanup(s.close)
        r = s.run("agent", "--listen", "off", "--state-dir", str(self.state), "--interval", "100ms",
                  "--flush", "200ms", "--duration", "1s")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_the_store_is_not_world_readable_and_a_user_is_told_so(self):
        self.record()
        self.assertEqual(mode(self.state), 0o711)
        self.assertEqual(mode(self.db), 0o640)
        for suffix in ("-wal", "-shm"):
            p = pathlib.Path(str(self.db) + suffix)
            if p.exists():
                self.assertEqual(mode(p), 0o640, p)
        # Root reads it.
        r = subprocess.run([TARMAC, "history", "--db", str(self.db)], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        # A user gets a sentence, not a crash and not "no telemetry".
        for cmd in (["history"], ["report"], ["--json", "history"]):
            with self.subTest(cmd=cmd):
                r = as_user(self.pw, *cmd, "--db", str(self.db), env={"HOME": str(self.top)})
                self.assertGreater(r.returncode, 0, f"{r.stdout}\n{r.stderr}")
                self.assertIn(f"cannot read the store {self.db}: permission denied", r.stderr)
                self.assertIn("docs/recorder.md", r.stderr)
                self.assertNotIn("terminate", r.stderr)

    def test_a_store_from_an_older_tarmac_is_tightened(self):
        self.state.mkdir(mode=0o755)
        self.record()
        os.chmod(self.db, 0o644)
        self.record()
        self.assertEqual(mode(self.db), 0o640)
        self.assertEqual(mode(self.state), 0o755, "a directory tarmac did not create keeps its mode")


if __name__ == "__main__":
    unittest.main()
