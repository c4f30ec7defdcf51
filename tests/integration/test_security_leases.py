"""The lock directory and its leases under attack by a second, unprivileged user (issue 13, items 1,
2, 3 and 6; docs/security.md): a lock directory the user made first, planted temporary files, a
FIFO among the leases, forged leases naming PID 1 or root's processes, and the agent's busy set
when lease files disappear. Each test is the reproduction of the issue; it failed before the fix.

Runs as root (tests create the user as test_sched_agent.py does)."""
import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

import test_sched_agent as sa
from agent_support import HeldSim
from devtools import SECOND_USER, demoted, require_tool, second_user
from test_sched import free_a100x4
from test_status import TARMAC

USER = SECOND_USER
REPO = pathlib.Path(__file__).resolve().parents[2]


def as_user_python(pw, code, *args):
    """Runs Python CODE (sys.argv[1:] = ARGS) as the second user; fails loudly when it fails."""
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], preexec_fn=demoted(pw), capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"as {USER}: {r.stderr}")


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def starttime(pid):
    text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rindex(")") + 2:].split()[19])


@unittest.skipUnless(os.geteuid() == 0, "needs root to act as a second user")
class AgentlessLeases(unittest.TestCase):
    """Agentless pick under a held simulation; the lock directory sits in a root-owned sticky
    world-writable folder, as /run/lock does, so the second user can make things there."""

    def setUp(self):
        self.pw = second_user(self)
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-secl-"))
        self.addCleanup(shutil.rmtree, str(self.tmp), True)
        self.tmp.chmod(0o755)
        self.pub = self.tmp / "pub"
        self.pub.mkdir()
        self.pub.chmod(0o1777)
        self.locks = self.pub / "locks"
        self.victim = self.tmp / "shadow"
        self.victim.write_text("root:secret\n")
        self.victim.chmod(0o600)
        self.sim = HeldSim(free_a100x4(self.tmp), state=tempfile.mkdtemp(prefix="sim-", dir=str(self.tmp)))
        self.addCleanup(self.sim.close)

    def tarmac(self, *args, locks=None, user=False):
        env = self.sim.env({"TARMAC_LOCK_DIR": str(locks or self.locks)})
        return subprocess.run([TARMAC, *args], env=env, capture_output=True, text=True, timeout=60,
                              preexec_fn=demoted(self.pw) if user else None, cwd=str(self.tmp))

    def uuids(self):
        r = self.tarmac("--json", "pick", "-n", "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        return [g["uuid"] for g in json.loads(r.stdout)["gpus"]]

    # 1
    def test_a_lock_directory_a_user_made_first_is_refused_and_nothing_is_followed(self):
        as_user_python(self.pw, "import os, sys; os.mkdir(sys.argv[1], 0o755); os.symlink(sys.argv[2], sys.argv[1] + "
                                "'/.lock')", self.locks, self.victim)
        r = self.tarmac("pick", "-n", "1")
        self.assertEqual(r.returncode, 3, f"root used {USER}'s lock directory: {r.stdout} {r.stderr}")
        self.assertIn(str(self.locks), r.stderr)
        self.assertIn("not to root", r.stderr)
        self.assertEqual(mode(self.victim), 0o600, "the symlink's target changed mode")

    # 3
    def test_a_fifo_among_the_leases_does_not_hang_pick(self):
        self.uuids()  # root's first pick makes the directory
        as_user_python(self.pw, "import os, sys; os.mkfifo(sys.argv[1])", self.locks / "gpu-evil.lease")
        try:
            r = self.tarmac("pick", "-n", "1")
        except subprocess.TimeoutExpired:
            self.fail("pick hung on a FIFO in the lock directory")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.lexists(self.locks / "gpu-evil.lease"), "root removes what is no lease")

    # 6
    def test_forged_leases_naming_pid_1_or_roots_processes_hold_nothing(self):
        uuids = self.uuids()
        as_user_python(self.pw, "import sys, pathlib; pathlib.Path(sys.argv[1]).write_text(sys.argv[2])",
                       self.locks / f"gpu-{uuids[0]}.lease", f"1 {starttime(1)} 0 evil evil\n")
        # The same with a pid other than 1: this test's own (root's) process.
        as_user_python(self.pw, "import sys, pathlib; pathlib.Path(sys.argv[1]).write_text(sys.argv[2])",
                       self.locks / f"gpu-{uuids[1]}.lease", f"{os.getpid()} {starttime(os.getpid())} 0 evil evil\n")
        r = self.tarmac("pick", "-n", "4")
        self.assertEqual(r.returncode, 0, f"a forged lease held a GPU: {r.stderr}")

    # The shared directory as systemd-tmpfiles makes it: users lease in it, and their leases hold.
    def test_the_tmpfiles_directory_is_shared_by_root_and_users(self):
        tmpfiles = require_tool("systemd-tmpfiles", hint="Debian: the systemd package (scripts/deps.sh --test)")
        root = self.tmp / "root"
        root.mkdir()
        r = subprocess.run([tmpfiles, "--create", f"--root={root}",
                            str(REPO / "packaging" / "tmpfiles.d" / "tarmac.conf")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        locks = root / "run" / "tarmac" / "locks"
        self.assertEqual((mode(locks), os.stat(locks).st_uid), (0o1777, 0))
        self.assertEqual((mode(locks / ".lock"), os.stat(locks / ".lock").st_uid), (0o644, 0))
        # The simulator's state is root's 0700 folder: let the user read it.
        for dirpath, _, _ in os.walk(self.sim.state):
            os.chmod(dirpath, 0o755)
        r = self.tarmac("pick", "-n", "1", "--hold", "10m", locks=locks, user=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        leases = [p for p in locks.iterdir() if p.name.endswith(".lease")]
        self.assertEqual([os.stat(p).st_uid for p in leases], [self.pw.pw_uid])
        r = self.tarmac("pick", "-n", "4", locks=locks)
        self.assertEqual(r.returncode, 1, "the user's lease is honoured by root")
        self.assertIn("leased", r.stderr)


@unittest.skipUnless(os.geteuid() == 0, "needs root to act as a second user")
class AgentLeases(sa.SecondUser):
    """The agent (root) with its lock directory, which it makes 1777, shared with the user."""

    def plant(self, code, *args):
        as_user_python(self.pw, code, *args)

    def uuids(self):
        r = self.tarmac("--json", "pick", "-n", "4")
        self.assertEqual(r.returncode, 0, r.stderr)
        return [g["uuid"] for g in json.loads(r.stdout)["gpus"]]

    # Review finding: .lock is readable by all, and flock works on a read-only descriptor.
    def test_a_user_holding_the_lock_does_not_stop_the_agents_queue(self):
        self.uuids()  # the agent has made the directory and its .lock
        holder = subprocess.Popen(
            ["/usr/bin/python3", "-c",
             "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); "
             "print('held', flush=True); time.sleep(600)", f"{self.locks}/.lock"],
            preexec_fn=demoted(self.pw), stdout=subprocess.PIPE, text=True)
        self.addCleanup(holder.kill)
        self.assertEqual(holder.stdout.readline().strip(), "held")
        job = self.submit("sleep", "120")
        # Before the fix the pass returned at every try while the lock was held: the job never ran.
        self.wait_state(job, "running", timeout=60)

    # 2
    def test_planted_temporary_files_never_become_the_agents_leases(self):
        victim = self.tmp / "shadow"
        victim.write_text("root:secret\n")
        victim.chmod(0o600)
        uuids = self.uuids()
        pid = self.agent.pid
        # The old temporary name was .gpu-<uuid>.lease.<pid>.tmp: a symlink for one GPU, the
        # user's own files for the others.
        self.plant("import os, sys; os.symlink(sys.argv[2], f'{sys.argv[1]}/.gpu-{sys.argv[3]}.lease.{sys.argv[4]}.tmp')",
                   self.locks, victim, uuids[0], pid)
        for u in uuids[1:]:
            self.plant("import os, sys; fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o666); os.fchmod(fd, 0o666)",
                       f"{self.locks}/.gpu-{u}.lease.{pid}.tmp")
        job = self.submit("sleep", "120", n=3)
        self.wait_state(job, "running")
        self.assertEqual(mode(victim), 0o600, "the symlink's target changed mode")
        self.assertEqual(victim.read_text(), "root:secret\n")
        leases = sorted(p for p in pathlib.Path(self.locks).iterdir() if p.name.endswith(".lease"))
        self.assertEqual(len(leases), 3, leases)
        for p in leases:
            st = os.lstat(p)
            self.assertTrue(stat.S_ISREG(st.st_mode), p)
            self.assertEqual(st.st_uid, 0, f"{p.name} is {USER}'s: they could delete it")

    # 2: whatever removes the lease files, the agent's own jobs keep their GPUs.
    def test_the_agents_jobs_keep_their_gpus_when_their_lease_files_go(self):
        a = self.submit("sleep", "120", n=3)
        self.wait_state(a, "running")
        for p in pathlib.Path(self.locks).iterdir():
            if p.name.endswith(".lease"):
                p.unlink()
        b = self.submit("sleep", "120", n=2)
        job = self.wait_jobs([b], lambda j: j["state"] != "queued" or j.get("reason", "").startswith("waiting for"),
                             30, "job b neither started nor waited")[b]
        self.assertEqual(job["state"], "queued", f"job b was started on job a's GPUs: {job}\n{self.jobs()[a]}")
        self.assertIn("(1 free)", job["reason"])

    # 3, for the agent: its thread does not hang on a FIFO.
    def test_a_fifo_among_the_leases_does_not_hang_the_agent(self):
        self.plant("import os, sys; os.mkfifo(sys.argv[1])", f"{self.locks}/gpu-evil.lease")
        job = self.submit("sleep", "120")
        self.wait_state(job, "running")


if __name__ == "__main__":
    unittest.main()
