"""End-to-end tests of `tarmac agent`: recording under the simulator, kill -9 at random moments,
a full or read-only state directory, configuration errors, one agent per store, clean stops."""
import os
import pathlib
import random
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
import unittest

from agent_support import HANG_S, CountedCalls, HeldSim, free_port, integrity, query, samples_taken, stop, wait_for
from test_status import TARMAC


class AgentRecords(unittest.TestCase):
    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-agent-"))
        self.db = self.dir / "tarmac.db"

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def per_gpu(self):
        try:
            return dict(query(self.db, "SELECT gpu, count(*) FROM gpu_sample GROUP BY gpu"))
        except sqlite3.OperationalError:  # not created yet
            return {}

    def test_records_samples_spans_processes_and_events(self):
        s = HeldSim("a100x4-gpu0-only")
        try:
            agent = s.agent(self.dir, "--interval", "100ms", "--process-interval", "200ms", "--flush", "200ms")
            self.addCleanup(agent.kill)
            # Recording until every GPU has 10 samples in the store, however long that takes here.
            self.assertTrue(wait_for(lambda: len(self.per_gpu()) == 4 and min(self.per_gpu().values()) >= 10
                                     or agent.poll() is not None, timeout=HANG_S), self.per_gpu())
            rc, err = stop(agent)
        finally:
            s.close()
        self.assertEqual(rc, 0, err)
        self.assertIn("recording 4 GPUs every 100 ms", err)
        self.assertEqual(integrity(self.db), "ok")
        self.assertEqual(query(self.db, "PRAGMA journal_mode")[0][0], "wal")
        per_gpu = dict(query(self.db, "SELECT gpu, count(*) FROM gpu_sample GROUP BY gpu"))
        self.assertEqual(sorted(per_gpu), [0, 1, 2, 3])
        self.assertTrue(all(n >= 10 for n in per_gpu.values()), per_gpu)
        # GPU 0 trains at 98 %, the others sit idle (docs/simulator.md, a100x4-gpu0-only).
        util0 = query(self.db, "SELECT DISTINCT util_pct, mem_used_mib FROM gpu_sample WHERE gpu = 0")
        self.assertEqual(util0, [(98, 39000)])
        classes = dict(query(self.db, "SELECT gpu, group_concat(DISTINCT class) FROM activity GROUP BY gpu"))
        self.assertEqual(classes[0], "busy")
        self.assertEqual(classes[1], "idle")
        procs = query(self.db, "SELECT gpu, command, mem_used_mib_max FROM process")
        self.assertEqual([(p[0], p[1]) for p in procs], [(0, "python train.py --epochs 90 --batch-size 256 --data /datasets/imagenet")])
        kinds = [k for (k,) in query(self.db, "SELECT kind FROM event ORDER BY id")]
        self.assertEqual(kinds[0], "agent-start")
        self.assertIn("process-start", kinds)
        self.assertEqual(kinds[-1], "agent-stop")
        names = [n for (n,) in query(self.db, "SELECT name FROM gpu ORDER BY gpu")]
        self.assertEqual(names, ["NVIDIA A100-SXM4-40GB"] * 4)
        # The rollups agree with the samples they summarize.
        n_samples = query(self.db, "SELECT count(*) FROM gpu_sample")[0][0]
        self.assertEqual(query(self.db, "SELECT sum(samples) FROM gpu_minute")[0][0], n_samples)
        self.assertEqual(query(self.db, "SELECT sum(samples) FROM gpu_hour")[0][0], n_samples)

    def test_sigterm_flushes_and_exits_0(self):
        s = HeldSim("a100x4-balanced")
        try:
            port = free_port()
            agent = s.agent(self.dir, "--interval", "100ms", "--flush", "60s", "--listen", f"127.0.0.1:{port}")
            self.addCleanup(agent.kill)
            # 5 snapshots of the 4 GPUs taken (the agent's own count on /metrics), none written yet.
            self.assertTrue(wait_for(lambda: samples_taken(port) >= 4 * 5 or agent.poll() is not None,
                                     timeout=HANG_S), f"agent exit {agent.poll()}")
            rc, err = stop(agent)
            self.assertEqual(rc, 0, err)
            self.assertIn("stopped:", err)
            # The flush interval is a minute: everything here was written by the stop.
            self.assertGreaterEqual(query(self.db, "SELECT count(*) FROM gpu_sample")[0][0], 4 * 5)
            self.assertEqual(query(self.db, "SELECT kind FROM event ORDER BY id DESC LIMIT 1")[0][0], "agent-stop")
        finally:
            s.close()

    def test_one_agent_per_store(self):
        s = HeldSim("a100x4-balanced")
        try:
            first = s.agent(self.dir, "--interval", "200ms")
            self.addCleanup(first.kill)
            self.assertTrue(wait_for(lambda: self.db.exists()))
            second = s.run("agent", "--listen", "off", "--state-dir", str(self.dir), "--duration", "1s")
            self.assertEqual(second.returncode, 2)
            self.assertIn(f"another tarmac agent (pid {first.pid}) already records to {self.dir}", second.stderr)
            self.assertEqual(stop(first)[0], 0)
        finally:
            s.close()

    def stored(self, sql, *params):
        return query(self.db, sql, *params)[0][0]

    def test_kill_9_twenty_times_never_corrupts_and_resumes(self):
        """kill -9 at random moments while recording at 100 ms: after every restart the file is
        intact, recording resumes, and what was lost is at most the last flush interval.

        Loss is counted in snapshots, not in time, so that a slow machine neither fails the test
        nor hides a loss: the snapshots each agent began (the simulator counts the reads of GPU 0)
        less the samples of GPU 0 it stored."""
        interval_ms, flush_ms = 100, 300
        # Unflushed at a kill: the snapshots begun within one flush interval after the last flush
        # (flush_ms / interval_ms of them), one more in an agent's first interval (its first
        # snapshot is taken before the store is opened), and the one in progress or being flushed.
        most_lost = flush_ms // interval_ms + 2
        rng = random.Random(1234)
        s = HeldSim("a100x4-balanced")
        begun = []  # snapshots each killed agent began
        try:
            snapshots = CountedCalls(s, "nvmlDeviceGetUtilizationRates", gpu=0)
            for i in range(20):
                before = snapshots.count()
                agent = s.agent(self.dir, "--interval", f"{interval_ms}ms", "--flush", f"{flush_ms}ms",
                                stderr=subprocess.DEVNULL)
                # Enough snapshots that an agent which lost everything since its start would show.
                enough = before + rng.randint(most_lost + 1, 3 * most_lost)
                self.assertTrue(wait_for(lambda: snapshots.count() >= enough or agent.poll() is not None),
                                f"agent {i}: exit {agent.poll()}, {snapshots.count() - before} snapshots")
                # Then a random moment of its flush cycle; what is checked does not depend on it.
                time.sleep(rng.uniform(0, flush_ms / 1000))
                with snapshots.hold() as count:  # no count half-written by the kill
                    agent.send_signal(signal.SIGKILL)
                    agent.wait()
                    begun.append(count() - before)
                agent.stdout.close()
                self.assertEqual(integrity(self.db), "ok")
            before = snapshots.count()
            agent = s.agent(self.dir, "--interval", f"{interval_ms}ms", "--flush", f"{flush_ms}ms")
            self.addCleanup(agent.kill)
            self.assertTrue(wait_for(lambda: snapshots.count() >= before + 3 or agent.poll() is not None))
            rc, err = stop(agent)
            self.assertEqual(rc, 0, err)
            last_begun = snapshots.count() - before
        finally:
            s.close()
        self.assertEqual(integrity(self.db), "ok")
        starts = [t for (t,) in query(self.db, "SELECT ts_ms FROM event WHERE kind = 'agent-start' ORDER BY ts_ms")]
        self.assertEqual(len(starts), 21)
        ends = starts[1:] + [2**62]
        stored = [self.stored("SELECT count(*) FROM gpu_sample WHERE gpu = 0 AND ts_ms >= ? AND ts_ms < ?", a, b)
                  for a, b in zip(starts, ends)]
        # The clean stop lost nothing, and the count is one per snapshot: the agent's own total
        # (agent-stop: "N GPU-samples", 4 per snapshot) is what it stored and what was counted.
        said = self.stored("SELECT detail FROM event WHERE kind = 'agent-stop' ORDER BY id DESC LIMIT 1")
        self.assertEqual(said, f"{4 * last_begun} GPU-samples")
        self.assertEqual(stored[20], last_begun)
        self.assertEqual(self.stored("SELECT count(*) FROM gpu_sample WHERE ts_ms >= ?", starts[20]), 4 * last_begun)
        for i, killed in enumerate(begun):
            with self.subTest(kill=i):
                # Lost: what the agent had begun and not stored, at most one flush interval's worth.
                self.assertLessEqual(killed - stored[i], most_lost, f"began {killed}, stored {stored[i]}")
                self.assertGreaterEqual(killed - stored[i], 0, f"began {killed}, stored {stored[i]}")
                # Resumed: the next agent stored samples of its own.
                self.assertGreater(stored[i + 1], 0)


@unittest.skipUnless(os.geteuid() == 0, "needs root to mount a small tmpfs")
class AgentFullDisk(unittest.TestCase):
    """A state directory on a tiny tmpfs: full, then freed; read-only, then writable."""

    def setUp(self):
        self.mnt = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-tmpfs-"))
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tarmac-test", str(self.mnt)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            self.mnt.rmdir()
            self.skipTest(f"cannot mount a tmpfs here: {r.stderr.strip()}")

    def tearDown(self):
        subprocess.run(["umount", "-l", str(self.mnt)], check=False)
        self.mnt.rmdir()

    def test_full_disk_is_survived_and_recording_resumes(self):
        db = self.mnt / "tarmac.db"
        filler = self.mnt / "filler"
        s = HeldSim("a100x4-balanced")
        try:
            # Start with 900 KiB of the 1 MiB taken: the store fills within seconds at 100 ms.
            filler.write_bytes(b"\0" * (900 * 1024))
            log = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-agent-log-")) / "agent.log"
            self.addCleanup(shutil.rmtree, str(log.parent), True)
            with open(log, "w") as err_file:
                agent = s.agent(self.mnt, "--interval", "100ms", "--process-interval", "100ms", "--flush", "200ms",
                                stderr=err_file)
            self.addCleanup(agent.kill)
            # The agent meets the full disk (its warning), and goes on. Not "until no space is left":
            # SQLite grows its files by pages and a write that does not fit fails whole, so a few
            # KiB can stay free on a disk that is full for it.
            self.assertTrue(wait_for(lambda: "cannot write" in log.read_text() or agent.poll() is not None,
                                     timeout=HANG_S), log.read_text())
            self.assertIsNone(agent.poll(), f"the agent died on a full disk: {log.read_text()}")
            self.assertIn("full", log.read_text())
            filler.unlink()
            freed_at = int(time.time() * 1000)
            self.assertTrue(wait_for(lambda: self.latest(db) > freed_at + 500, timeout=HANG_S),
                            "recording did not resume after space returned")
            rc, _ = stop(agent)
            err = log.read_text()
            err_lines = err.splitlines()
            self.assertEqual(rc, 0, err)
            self.assertTrue(any("cannot write" in l and "warning" in l for l in err_lines), err)
            self.assertTrue(any("recording resumed" in l for l in err_lines), err)
            self.assertEqual(integrity(db), "ok")
        finally:
            s.close()

    def test_read_only_directory_then_writable(self):
        subprocess.run(["mount", "-o", "remount,ro", str(self.mnt)], check=True)
        s = HeldSim("a100x4-balanced")
        log = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-agent-log-")) / "agent.log"
        self.addCleanup(shutil.rmtree, str(log.parent), True)
        try:
            with open(log, "w") as err_file:
                agent = s.agent(self.mnt / "state", "--interval", "100ms", "--flush", "200ms", stderr=err_file)
            self.addCleanup(agent.kill)
            # Writable again only once the agent has found it read-only (a slow start-up under the
            # sanitizers can take longer than any fixed pause).
            self.assertTrue(wait_for(lambda: "cannot write" in log.read_text(), timeout=HANG_S), log.read_text())
            self.assertIsNone(agent.poll(), "the agent died on a read-only directory")
            self.assertIn("scheduler off", log.read_text(), "the scheduler needs a writable state directory")
            subprocess.run(["mount", "-o", "remount,rw", str(self.mnt)], check=True)
            db = self.mnt / "state" / "tarmac.db"
            # Still alive, it records once the directory is writable again.
            self.assertTrue(wait_for(lambda: db.exists() and self.latest(db) > 0 or agent.poll() is not None,
                                     timeout=HANG_S), log.read_text())
            self.assertIsNone(agent.poll(), f"the agent died on a read-only directory: {log.read_text()}")
            rc, _ = stop(agent)
            err = log.read_text()
            self.assertEqual(rc, 0, err)
            self.assertIn("cannot write", err)
            self.assertIn("recording resumed", err)
            # What was sampled while nothing could be written was kept and written afterwards.
            first = query(db, "SELECT min(ts_ms) FROM gpu_sample")[0][0]
            start = query(db, "SELECT min(ts_ms) FROM event WHERE kind = 'agent-start'")[0][0]
            self.assertLess(first - start, 500)
        finally:
            s.close()

    @staticmethod
    def latest(db):
        try:
            return query(db, "SELECT max(ts_ms) FROM gpu_sample")[0][0] or 0
        except Exception:  # noqa: BLE001 - a store being created or on a full disk
            return 0


class AgentConfiguration(unittest.TestCase):
    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-agent-config-"))

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_agent(self, config_text, *args):
        path = self.dir / "tarmac.toml"
        path.write_text(config_text)
        return path, subprocess.run([TARMAC, "--config", str(path), "agent", "--listen", "off", *args], capture_output=True, text=True,
                                    timeout=30)

    def test_check_config_prints_the_effective_settings(self):
        path, r = self.run_agent('[agent]\ninterval = "250ms"\nstate_dir = "/srv/tarmac"\n\n[retention]\nsamples = "3d"\n',
                                 "--check-config")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"configuration ok: {path}", r.stdout)
        self.assertIn("agent: every 250ms", r.stdout)
        self.assertIn("store: /srv/tarmac/tarmac.db", r.stdout)
        self.assertIn("retention: samples 3d, minutes 90d, hours 730d, events 365d", r.stdout)

    def test_the_socket_flag_wins_over_the_environment(self):
        env = dict(os.environ, TARMAC_SOCKET=str(self.dir / "from-env.sock"))
        path = self.dir / "tarmac.toml"
        path.write_text('[scheduler]\nsocket = "/srv/from-config.sock"\n')
        base = [TARMAC, "--config", str(path), "agent", "--listen", "off", "--check-config"]
        r = subprocess.run([*base, "--socket", str(self.dir / "flag.sock")], capture_output=True, text=True, timeout=30,
                           env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"socket {self.dir / 'flag.sock'},", r.stdout)
        r = subprocess.run(base, capture_output=True, text=True, timeout=30, env=env)
        self.assertIn(f"socket {self.dir / 'from-env.sock'},", r.stdout)

    def test_each_bad_value_names_its_line(self):
        cases = [
            ('[agent]\ninterval = "10ms"\n', ":2:12: agent.interval: 10ms is out of range (100ms to 1m)"),
            ('[agent]\n\nclock = "wall"\n', ":3:9: agent.clock: 'wall' is not one of \"real\", \"sim\""),
            ('[agent]\nstate_dir = "relative/dir"\n', ":2:13: agent.state_dir: 'relative/dir' is not an absolute path"),
            ('[retention]\nhours = "forever"\n', ":2:9: retention.hours: expected a duration"),
            ('[agent]\ninterval = \n', ":2:"),
        ]
        for text, message in cases:
            with self.subTest(text=text):
                path, r = self.run_agent(text, "--check-config")
                self.assertEqual(r.returncode, 2)
                self.assertIn(f"{path}{message}", r.stderr)
                self.assertEqual(r.stdout, "")

    def test_unknown_key_warns_with_its_line(self):
        path, r = self.run_agent('[agent]\ninterval = "1s"\nintervall = "2s"\n', "--check-config")
        self.assertEqual(r.returncode, 0)
        self.assertIn(f"tarmac: warning: {path}:3: unknown key 'agent.intervall' (ignored)", r.stderr)

    def test_sim_clock_outside_the_simulator_is_a_usage_error(self):
        env = dict(os.environ)
        env.pop("TARMAC_SIM_STATE", None)
        r = subprocess.run([TARMAC, "agent", "--listen", "off", "--clock", "sim", "--state-dir", str(self.dir)], capture_output=True,
                           text=True, timeout=30, env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn("TARMAC_SIM_STATE", r.stderr)


if __name__ == "__main__":
    unittest.main()
