"""The agent's socket under abuse by a second user (issue 13, items 4, 5, 7, 10 and 11; docs/security.md):
a client that never reads, descriptors sent by clients that hang up or send an oversized line, a
thousand idle connections, the groups a job runs with, and a grace period nobody could wait out.

Each abuse runs as a process of its own (ABUSE below, run by `python3 -c` under a second uid) that
prints `ready` once it has done its part and holds its connections until its stdin closes. The
agent's descriptors are counted in /proc/PID/fd, its memory read from /proc/PID/status."""
import os
import pathlib
import pwd
import grp
import signal
import subprocess
import sys
import time
import unittest

from agent_support import HANG_S, wait_for
from test_sched import LOAD, live_sim_processes
from test_sched_agent import JOB_ENDED, SLOW, AgentQueueTest, SecondUser
from test_status import TARMAC

ABUSE = r'''
import os, socket, sys
mode, path, *args = sys.argv[1:]
held = []

def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s

def push(s, data):
    """Sends what the socket takes now; never blocks."""
    s.setblocking(False)
    sent = 0
    try:
        while sent < len(data):
            sent += s.send(data[sent:sent + 65536])
    except (BlockingIOError, BrokenPipeError, ConnectionResetError):
        pass
    return sent

if mode == "nonreader":      # JOB LINES: follow JOB, then ask LINES questions and read no answer
    s = connect()
    held.append(s)
    request = b'{"op":"wait","id":%d}\n' % int(args[0]) + b'{"op":"jobs","all":true}\n' * int(args[1])
    print("sent", push(s, request), flush=True)
elif mode == "fds":          # COUNT HOW: descriptors with a line that never ends
    for i in range(int(args[0])):
        fds = [os.open("/dev/null", os.O_RDONLY), os.open("/dev/null", os.O_RDONLY)]
        try:
            s = connect()
            socket.send_fds(s, [b'{"op":"submit"'], fds)
            if args[1] == "oversize":
                push(s, b"x" * (1 << 20) * 2)
            s.close()
        except OSError:
            pass  # refused at the user's cap: the agent closed first
        for fd in fds:
            os.close(fd)
elif mode == "idle":         # COUNT: connections that say nothing
    for i in range(int(args[0])):
        try:
            held.append(connect())
        except OSError as e:
            print("connect", i, e, flush=True)
            break
print("ready", len(held), flush=True)
sys.stdin.read()
'''


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@unittest.skipUnless(os.geteuid() == 0, "needs root to act as a second user")
class SocketAbuse(SecondUser):
    # Short enough that the test sees idle connections go; the default is 30s.
    config = 'connection_idle_timeout = "4s"\nuser_connection_cap = 16\n'

    def abuse(self, *args, uid=None, gid=None, groups=None):
        """Starts ABUSE ARGS as the second user (or UID/GID/GROUPS); returns it once it printed
        `ready`, with the line."""
        pw = self.pw
        uid = pw.pw_uid if uid is None else uid
        gid = pw.pw_gid if gid is None else gid

        def demote():
            os.setgroups(groups or [])
            os.setgid(gid)
            os.setuid(uid)

        # Debian's python3: the test's own interpreter may live where the second user cannot reach.
        proc = subprocess.Popen(["/usr/bin/python3", "-c", ABUSE, args[0], self.sock, *map(str, args[1:])],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=demote,
                                cwd=str(self.tmp))
        self.addCleanup(self.end_abuse, proc)
        line = ""
        deadline = time.monotonic() + 120 * SLOW
        while not line.startswith("ready"):
            line = proc.stdout.readline()
            if not line and proc.poll() is not None or time.monotonic() > deadline:
                self.fail(f"the abuse {args} did not get ready: exit {proc.poll()}, {line!r}")
        return proc, line

    @staticmethod
    def end_abuse(proc):
        if proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def timed_jobs(self):
        """Root's `tarmac --json jobs`: (exit code, seconds, stderr)."""
        start = time.monotonic()
        r = self.tarmac("--json", "jobs", timeout=90)
        return r.returncode, time.monotonic() - start, r.stderr

    def settle_fds(self, baseline, what):
        """Waits until the agent holds no more descriptors than BASELINE (+2: the store's journal may
        be open); fails naming WHAT."""
        pid = self.agent.pid
        ok = wait_for(lambda: fd_count(pid) <= baseline + 2, 30 * SLOW)
        self.assertTrue(ok, f"{what}: the agent holds {fd_count(pid)} descriptors, {baseline} before\n"
                            f"{self.agent_log()}")

    # -- 4 -------------------------------------------------------------------------------------------
    def test_a_client_that_never_reads_neither_stops_the_queue_nor_grows_the_agent(self):
        job = self.submit(LOAD, "--seconds", "300")
        self.wait_state(job, "running")
        pid = self.agent.pid
        fds, rss = fd_count(pid), rss_kib(pid)
        abuser, line = self.abuse("nonreader", job, 20000)
        code, took, err = self.timed_jobs()
        print(f"\n[measure] non-reading client: root's jobs {took:.2f} s (exit {code}); agent {fd_count(pid)} "
              f"fds (before {fds}), RSS {rss_kib(pid)} KiB (before {rss})", file=sys.stderr)
        self.assertEqual(code, 0, f"root's jobs while a client does not read: {err}\n{self.agent_log()}")
        # Its answers wait in a bounded buffer; it is dropped when it makes no progress.
        self.settle_fds(fds, "the client that never reads was not dropped")
        self.assertLess(rss_kib(pid) - rss, 64 * 1024, "the agent's memory grew by more than 64 MiB")
        # The job it followed is untouched, and a new job still starts.
        self.assertEqual(self.job(job)["state"], "running")
        other = self.submit(LOAD, "--seconds", "0.2")
        self.assertEqual(self.wait_state(other, JOB_ENDED)["state"], "done")

    # -- 5 -------------------------------------------------------------------------------------------
    def test_descriptors_of_clients_that_hang_up_or_send_too_much_are_closed(self):
        pid = self.agent.pid
        before = fd_count(pid)
        for how in ("hangup", "oversize"):
            with self.subTest(how=how):
                abuser, _ = self.abuse("fds", 300, how)
                self.end_abuse(abuser)
                self.settle_fds(before, f"300 clients that sent 2 descriptors each and then {how}")
        print(f"\n[measure] 600 descriptor-passing clients: agent {fd_count(pid)} fds (before {before})",
              file=sys.stderr)
        self.assertEqual(self.tarmac("--json", "jobs").returncode, 0)

    # -- 7 -------------------------------------------------------------------------------------------
    def test_a_thousand_idle_connections_of_one_user_lock_nobody_out(self):
        pid = self.agent.pid
        fds, rss = fd_count(pid), rss_kib(pid)
        abuser, line = self.abuse("idle", 1030)
        # The user at their cap is told so, in words (first: the idle timeout closes their connections).
        r = self.as_user("jobs")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("user_connection_cap", r.stderr)
        code, took, err = self.timed_jobs()
        print(f"\n[measure] 1030 idle connections: root's jobs {took:.2f} s (exit {code}); agent {fd_count(pid)} fds "
              f"(before {fds}), RSS {rss_kib(pid)} KiB (before {rss})", file=sys.stderr)
        self.assertEqual(code, 0, f"root's jobs beside 1030 idle connections: {err}\n{self.agent_log()}")
        self.assertLessEqual(fd_count(pid), fds + 16 + 4, "more connections than the per-user cap were kept")
        # Idle connections are closed after the idle timeout; then the user gets in again.
        self.settle_fds(fds, "idle connections were not closed")
        r = self.as_user("jobs")
        self.assertEqual(r.returncode, 0, r.stderr)


@unittest.skipUnless(os.geteuid() == 0, "needs root to act as a second user")
class JobCredentials(SecondUser):
    """The job's uid, gid and groups are the submitter's own (SO_PEERCRED, SO_PEERGROUPS), not what
    the passwd and group files say about the uid's name."""
    group = "tarmac-tg"
    orphan_uid, orphan_gid, orphan_groups = 61234, 61235, [61236, 61237]

    def setUp(self):
        if subprocess.run(["getent", "group", self.group], capture_output=True).returncode != 0:
            r = subprocess.run(["groupadd", self.group], capture_output=True, text=True)
            if r.returncode != 0:
                self.skipTest(f"cannot create group {self.group}: {r.stderr.strip()}")
        super().setUp()
        if self.user not in grp.getgrnam(self.group).gr_mem:
            subprocess.run(["usermod", "-a", "-G", self.group, self.user], check=True)
        self.assertIn(grp.getgrnam(self.group).gr_gid, os.getgrouplist(self.user, self.pw.pw_gid),
                      "the test user's passwd-side groups include the extra group")

    def submit_as(self, uid, gid, groups, *cmd, env_extra=None):
        def demote():
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)

        env = self.env({"HOME": str(self.tmp), **(env_extra or {})})
        r = self.tarmac("run", "--detach", "--", *cmd, env=env, preexec_fn=demote)
        self.assertEqual(r.returncode, 0, f"{r.stderr}\n{self.agent_log()}")
        return int(r.stdout.split()[-1])

    def ids_of(self, job_id):
        """(uid, gid, {groups}) the job printed with `id -u; id -g; id -G` into its log."""
        log = self.state / "logs" / f"{job_id}.log"
        self.assertTrue(wait_for(lambda: log.exists() and len(log.read_text().split("\n")) >= 4, 10 * SLOW),
                        f"{log}: {log.read_text() if log.exists() else '(none)'}")
        lines = log.read_text().split("\n")
        return int(lines[0]), int(lines[1]), set(map(int, lines[2].split()))

    ID = ("sh", "-c", "id -u; id -g; id -G")

    def test_a_job_gets_the_groups_its_submitter_has_not_those_of_its_name(self):
        # The user dropped the extra group the group file gives its name.
        job = self.submit_as(self.pw.pw_uid, self.pw.pw_gid, [], *self.ID)
        self.assertEqual(self.wait_state(job, JOB_ENDED)["state"], "done")
        self.assertEqual(self.ids_of(job), (self.pw.pw_uid, self.pw.pw_gid, {self.pw.pw_gid}))

    def test_a_uid_without_a_passwd_entry_gets_exactly_its_own_groups_even_after_a_restart(self):
        with self.assertRaises(KeyError):
            pwd.getpwuid(self.orphan_uid)
        # Every GPU leased: the job waits in the queue across a kill -9 of the agent.
        lease, _ = self.reserve(4, "10m")
        job = self.submit_as(self.orphan_uid, self.orphan_gid, self.orphan_groups, *self.ID)
        self.assertEqual(self.job(job)["state"], "queued")
        self.kill_agent()
        self.start_agent()
        self.assertEqual(self.tarmac("release", str(lease)).returncode, 0)
        self.assertEqual(self.wait_state(job, JOB_ENDED)["state"], "done", self.agent_log())
        self.assertEqual(self.ids_of(job),
                         (self.orphan_uid, self.orphan_gid, {self.orphan_gid, *self.orphan_groups}))


class GraceCap(AgentQueueTest):
    config = 'max_grace = "10s"\n'

    def test_a_grace_over_the_cap_is_refused_and_a_job_ignoring_sigterm_is_stopped_within_it(self):
        r = self.tarmac("run", "--detach", "--grace", "100000d", "--", LOAD, "--ignore-sigterm", "--seconds", "600")
        self.assertEqual(r.returncode, 2, f"{r.stdout} {r.stderr}")
        self.assertIn("scheduler.max_grace", r.stderr)
        self.assertEqual(self.jobs(), {}, "nothing was queued")
        job = self.submit(LOAD, "--ignore-sigterm", "--seconds", "600", flags=("--grace", "3s"))
        self.wait_state(job, "running")
        # The load registers with the simulator once it ignores SIGTERM.
        self.assertTrue(wait_for(lambda: live_sim_processes(self.sim.state), 30 * SLOW))
        start = time.monotonic()
        self.assertEqual(self.tarmac("cancel", str(job)).returncode, 0)
        ended = self.wait_state(job, JOB_ENDED, timeout=30)
        self.assertEqual((ended["state"], ended["exit_code"]), ("cancelled", 128 + signal.SIGKILL))
        self.assertLess(time.monotonic() - start, 30 * SLOW)


class NonUtf8Request(AgentQueueTest):
    """Bytes that are not UTF-8 (legal in argv and the environment) are refused by name before
    anything is sent, with exit 2, instead of nlohmann's exception text; the queue stays empty."""

    def run_bytes(self, argv, extra_env=None):
        env = {k.encode(): v.encode() for k, v in self.env().items()}
        env.update(extra_env or {})
        return subprocess.run([TARMAC.encode(), b"run", b"--detach", b"--", *argv], env=env,
                              capture_output=True, timeout=HANG_S, cwd=str(self.tmp))

    def test_an_argument_or_variable_that_is_not_utf8_is_named_and_nothing_is_queued(self):
        r = self.run_bytes([b"/bin/echo", b"caf\xe9"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(b"argument 1 is not valid UTF-8", r.stderr)
        self.assertIn(b"caf\\xe9", r.stderr, "the bytes are shown escaped")
        r = self.run_bytes([b"/bin/true"], {b"BAD_VAR": b"\xff\x1b[2J"})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(b"the environment variable BAD_VAR", r.stderr)
        self.assertNotIn(b"\x1b", r.stderr, "no raw escape reaches the terminal")
        self.assertEqual(self.jobs(), {}, "nothing was queued")


if __name__ == "__main__":
    unittest.main()
