"""`tarmac agent`'s live alerts end to end (docs/alerts.md): the agent samples a held simulation
every 250 ms with every rule's `for` shortened to seconds, and a webhook receiver started here (or a
command written here) records what it announces. holding-zombie fires `holding` on GPU 3 once and
resolves it once when the kernel is killed; a100x4-thermal fires `thermal` on GPU 2 only;
a100x4-balanced fires nothing; a dead webhook neither stops sampling nor floods the log, and one that
never answers delays neither sampling nor the stop (h100x8-idle-fleet: 8 idle alerts fire at once).

No test waits a fixed time: "while N more samples are taken" is a count of rows in the agent's store
(wait_samples), and every wait has a bound only a hang reaches."""
import http.server
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import tempfile
import threading
import time
import unittest

from agent_support import HANG_S, HeldSim, free_port, gpu_pids, http_get, query, wait_for
from test_status import TARMAC

HOLDING_UUID = "GPU-5b2e0c55-9a3d-4c0e-8f1e-2d7a64c3e9b0"

# Every rule's `for` shortened so the tests run in seconds (docs/configuration.md, [alerts]).
# starvation_for stays short too: GPU 3 is `starved` for the 2 s before it becomes `holding`,
# so a starvation notice on GPU 3 may come and go first; the tests below allow it.
SHORT_FORS = """\
starvation_for = "1s"
idle_for = "1s"
holding_for = "0s"
thermal_for = "1s"
near_oom_for = "1s"
imbalance_for = "1s"
fault_for = "0s"
"""

AGENT_ARGS = ["--interval", "250ms", "--process-interval", "500ms", "--flush", "250ms"]


class Receiver:
    """A webhook receiver on 127.0.0.1: records the JSON body of every POST, in arrival order."""

    def __init__(self):
        self.notices = []
        self.raw = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = b""
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            break
                        body += self.rfile.read(size)
                        self.rfile.readline()
                else:
                    body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.raw.append((self.path, self.headers.get("Content-Type"), body))
                    try:
                        receiver.notices.append(json.loads(body))
                    except ValueError:
                        receiver.notices.append({"unparsable": body.decode("utf-8", "replace")})
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def all(self):
        with self.lock:
            return list(self.notices)

    def matching(self, rule=None, gpu=None, status=None):
        return [n for n in self.all()
                if (rule is None or n.get("alert", {}).get("rule") == rule)
                and (gpu is None or n.get("alert", {}).get("gpu") == gpu)
                and (status is None or n.get("status") == status)]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class TarPit:
    """A webhook that takes every connection and never answers: each send waits out the agent's
    answer timeout. Counts the connections it took, so a test knows how many sends have begun."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.held = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._take, daemon=True)
        self.thread.start()

    def _take(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            with self.lock:
                self.held.append(conn)

    def taken(self):
        with self.lock:
            return len(self.held)

    def close(self):
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join()
        for conn in self.held:
            conn.close()


def notice_gpus(n):
    a = n.get("alert", {})
    return set(a.get("gpus") or []) | ({a["gpu"]} if isinstance(a.get("gpu"), int) else set())


def alternates(test, notices):
    """Each alert (rule, key) is announced firing, then resolved, then firing again...: never the
    same status twice in a row (a firing alert is not repeated however long it lasts)."""
    last = {}
    for n in notices:
        key = (n["alert"]["rule"], n["alert"]["key"])
        test.assertIn(n["status"], ("firing", "resolved"), n)
        test.assertNotEqual(last.get(key, "resolved"), n["status"], f"{key} announced {n['status']} twice: {notices}")
        last[key] = n["status"]


class LiveAlerts(unittest.TestCase):
    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-alerts-live-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.state = self.dir / "store"
        self.state.mkdir()
        self.db = self.state / "tarmac.db"
        self.stderr_path = self.dir / "agent.err"

    def start(self, scenario, alerts, listen="off"):
        """A held simulation of `scenario` and an agent on it with `alerts` as its [alerts] table."""
        self.sim = HeldSim(scenario, state=str(self.dir / "sim"))
        self.addCleanup(self.sim.proc.stderr.close)  # cleanups run last first: after close()
        self.addCleanup(self.sim.proc.stdout.close)
        self.addCleanup(self.sim.close)
        config = self.dir / "tarmac.toml"
        config.write_text('[activity]\nholding_after = "2s"\n\n[alerts]\n' + alerts)
        self.stderr_file = open(self.stderr_path, "w")
        self.addCleanup(self.stderr_file.close)
        self.agent = subprocess.Popen(
            [TARMAC, "--config", str(config), "agent", "--state-dir", str(self.state), "--listen", listen, *AGENT_ARGS],
            env=self.sim.env(), stdout=subprocess.DEVNULL, stderr=self.stderr_file, text=True)
        self.addCleanup(self.kill_agent)
        self.started = time.monotonic()
        self.assertTrue(wait_for(lambda: "recording " in self.log() or self.agent.poll() is not None, HANG_S),
                        self.log())
        self.assertIsNone(self.agent.poll(), f"the agent exited {self.agent.returncode}: {self.log()}")

    def kill_agent(self):
        if self.agent.poll() is None:
            self.agent.kill()
            self.agent.wait()

    def log(self):
        return self.stderr_path.read_text()

    def stop_agent(self):
        self.assertIsNone(self.agent.poll(), f"the agent died: exit {self.agent.returncode}: {self.log()}")
        self.agent.send_signal(signal.SIGTERM)
        try:
            rc = self.agent.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            self.fail(f"the agent did not stop within {HANG_S} s of SIGTERM: {self.log()}")
        self.assertEqual(rc, 0, self.log())
        self.assertIn("stopped:", self.log())

    def samples(self):
        """GPU-samples in the store (flushed every 250 ms); 0 before its first flush."""
        try:
            return query(self.db, "SELECT count(*) FROM gpu_sample")[0][0]
        except sqlite3.OperationalError:
            return 0

    def wait_samples(self, rounds):
        """Waits until the agent has stored ROUNDS more samples of each of the 4 GPUs (time passing
        for the agent and its rules, whatever the machine's speed); returns the count reached."""
        want = self.samples() + 4 * rounds
        self.assertTrue(wait_for(lambda: self.samples() >= want or self.agent.poll() is not None, HANG_S),
                        f"fewer than {want} samples stored within {HANG_S} s; log:\n{self.log()}")
        self.assertIsNone(self.agent.poll(), f"the agent died: exit {self.agent.returncode}: {self.log()}")
        return self.samples()

    def receiver(self):
        r = Receiver()
        self.addCleanup(r.close)
        return r

    def holding_pid(self):
        """The registered process on GPU 3 (docs/simulator.md, the state directory's procs/PID)."""
        found = gpu_pids(self.sim.state, 3)
        self.assertEqual(len(found), 1, f"processes on GPU 3: {found}")
        return found[0]

    def get(self, port, path):
        status, _, body = http_get(port, path, timeout=5)
        self.assertEqual(status, 200, f"GET {path}: {body[:300]}")
        return body

    # -- 1 -----------------------------------------------------------------------------------------
    def test_holding_fires_once_and_resolves_once_when_the_kernel_is_killed(self):
        hook = self.receiver()
        port = free_port()
        self.start("holding-zombie", SHORT_FORS + f'webhook = "{hook.url}"\n', listen=f"127.0.0.1:{port}")

        # holding_after is 2 s and holding_for 0 s: the notice comes within a few seconds.
        self.assertTrue(wait_for(lambda: hook.matching("holding", 3, "firing"), HANG_S),
                        f"no holding notice for GPU 3; got {hook.all()}; log:\n{self.log()}")
        fired_after = time.monotonic() - self.started
        n = hook.matching("holding", 3, "firing")[0]
        self.assertEqual(n["status"], "firing")
        self.assertIsInstance(n["text"], str)
        self.assertTrue(n["text"].startswith("FIRING [warning] holding: GPU 3 ("), n["text"])
        self.assertIn(HOLDING_UUID, n["text"])
        self.assertIn("ipykernel_launcher", n["text"])
        self.assertIn("holds 20.0 GiB at 0 %", n["text"])
        a = n["alert"]
        self.assertEqual((a["rule"], a["severity"], a["key"], a["gpu"], a["gpus"], a["uuid"]),
                         ("holding", "warning", "gpu:3", 3, [3], HOLDING_UUID))
        self.assertIn("ipykernel_launcher", a["command"])
        self.assertIsInstance(n["ts_ms"], int)
        self.assertIsInstance(a["since_ms"], int)
        self.assertIn(a["summary"], n["text"])
        path, content_type, _ = hook.raw[0]
        self.assertEqual(path, "/hook")
        self.assertTrue(content_type.startswith("application/json"), content_type)

        # The pid named is the kernel's, the one registered on GPU 3.
        pid = self.holding_pid()
        self.assertEqual(a["pid"], pid)
        self.assertIn(f"pid {pid})", n["text"])

        # While it fires, the HTTP endpoint shows it.
        gpus = json.loads(self.get(port, "/api/v1/gpus"))
        self.assertIn(("holding", 3), [(x["rule"], x["gpu"]) for x in gpus["alerts"]], gpus["alerts"])
        self.assertRegex(self.get(port, "/metrics"),
                         r'tarmac_alert_firing\{alertname="holding",severity="warning",gpu="3"[^}]*\} 1\n')

        # 16 more sampling rounds (4 s of the agent's time): still exactly one notice.
        self.wait_samples(16)
        self.assertEqual(len(hook.matching("holding", 3, "firing")), 1, hook.all())
        self.assertEqual(hook.matching("holding", 3, "resolved"), [], hook.all())

        # Kill the kernel: GPU 3's memory is freed at once, the GPU is no longer holding.
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        self.assertTrue(wait_for(lambda: hook.matching("holding", 3, "resolved"), HANG_S),
                        f"no resolved notice; got {hook.all()}; log:\n{self.log()}")
        resolved_after = time.monotonic() - killed
        r = hook.matching("holding", 3, "resolved")[0]
        self.assertTrue(r["text"].startswith("RESOLVED [warning] holding: GPU 3 ("), r["text"])
        self.assertEqual((r["alert"]["key"], r["alert"]["gpu"]), ("gpu:3", 3))
        self.wait_samples(8)
        self.assertEqual(len(hook.matching("holding", 3, "resolved")), 1, hook.all())
        self.assertEqual(len(hook.matching("holding", 3, "firing")), 1, hook.all())
        gpus = json.loads(self.get(port, "/api/v1/gpus"))
        self.assertNotIn(("holding", 3), [(x["rule"], x["gpu"]) for x in gpus["alerts"]], gpus["alerts"])
        self.assertNotRegex(self.get(port, "/metrics"), r'tarmac_alert_firing\{alertname="holding"')

        # GPUs 0-2 train at ~95 %: nothing about them, whatever the rule.
        notices = hook.all()
        self.assertEqual([x for x in notices if notice_gpus(x) & {0, 1, 2}], [], notices)
        alternates(self, notices)
        self.stop_agent()
        print(f"\n  holding fired {fired_after:.1f}s after start, resolved {resolved_after:.1f}s after the kill; "
              f"notices: {[(x['status'], x['alert']['rule'], x['alert']['key']) for x in notices]}", end=" ")

    # -- 2 -----------------------------------------------------------------------------------------
    def test_thermal_fires_on_gpu_2_only(self):
        hook = self.receiver()
        self.start("a100x4-thermal", SHORT_FORS + f'webhook = "{hook.url}"\n')
        self.assertTrue(wait_for(lambda: hook.matching("thermal", 2, "firing"), HANG_S),
                        f"no thermal notice for GPU 2; got {hook.all()}; log:\n{self.log()}")
        n = hook.matching("thermal", 2, "firing")[0]
        self.assertTrue(n["text"].startswith("FIRING [critical] thermal: GPU 2 ("), n["text"])
        self.assertEqual((n["alert"]["severity"], n["alert"]["key"], n["alert"]["gpu"]), ("critical", "gpu:2", 2))
        self.wait_samples(12)
        notices = hook.all()
        self.assertEqual(len(hook.matching("thermal", 2, "firing")), 1, notices)
        self.assertEqual([x for x in hook.matching("thermal") if x["alert"]["gpu"] != 2], [], notices)
        # GPUs 0, 1 and 3 are healthy: no rule fires on them at all.
        self.assertEqual([x for x in notices if notice_gpus(x) & {0, 1, 3}], [], notices)
        self.assertEqual(hook.matching(status="resolved"), [], notices)
        alternates(self, notices)
        self.stop_agent()

    # -- 3 -----------------------------------------------------------------------------------------
    def test_balanced_announces_nothing(self):
        hook = self.receiver()
        port = free_port()
        self.start("a100x4-balanced", SHORT_FORS + f'webhook = "{hook.url}"\n', listen=f"127.0.0.1:{port}")
        # Every `for` is at most 1 s: 32 rounds (8 s of the agent's time) is many times long enough
        # for any to fire.
        self.assertTrue(wait_for(lambda: self.samples() >= 4 * 32 or self.agent.poll() is not None, HANG_S),
                        self.log())
        self.assertEqual(hook.all(), [], f"log:\n{self.log()}")
        self.assertEqual(json.loads(self.get(port, "/api/v1/gpus"))["alerts"], [])
        self.assertNotIn("tarmac_alert_firing{", self.get(port, "/metrics"))
        self.assertNotIn(" alert ", self.log())
        self.assertGreaterEqual(query(self.db, "SELECT count(*) FROM gpu_sample")[0][0], 4 * 20)
        self.stop_agent()
        self.assertEqual(hook.all(), [])

    # -- 4 -----------------------------------------------------------------------------------------
    def test_command_gets_the_json_on_stdin_and_the_variables(self):
        hooks = self.dir / "hooks"
        hooks.mkdir()
        script = hooks / "hook.sh"
        # One pair of files per run ($$), so that notices run close together cannot interleave.
        script.write_text('#!/bin/sh\ncat > "$1.$$.json"\nenv | grep TARMAC_ALERT_ > "$1.$$.env"\n'
                          'mv "$1.$$.json" "$1.$$.stdin"\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        prefix = hooks / "log"
        self.start("holding-zombie", SHORT_FORS + f'command = "{script} {prefix}"\n')

        def runs():
            out = []
            for f in sorted(hooks.glob("log.*.stdin")):
                env_file = f.with_suffix(".env")
                if not env_file.exists():
                    continue
                body = json.loads(f.read_text())
                env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
                out.append((body, env))
            return out

        def holding():
            return [(b, e) for b, e in runs() if b.get("alert", {}).get("rule") == "holding"]

        self.assertTrue(wait_for(lambda: holding(), HANG_S),
                        f"the command never ran for holding: {sorted(p.name for p in hooks.iterdir())}; "
                        f"log:\n{self.log()}")
        body, env = holding()[0]
        pid = self.holding_pid()
        self.assertEqual(body["status"], "firing")
        self.assertTrue(body["text"].startswith("FIRING [warning] holding: GPU 3 ("), body["text"])
        self.assertEqual((body["alert"]["gpu"], body["alert"]["pid"]), (3, pid))
        self.assertEqual(env["TARMAC_ALERT_STATUS"], "firing")
        self.assertEqual(env["TARMAC_ALERT_RULE"], "holding")
        self.assertEqual(env["TARMAC_ALERT_SEVERITY"], "warning")
        self.assertEqual(env["TARMAC_ALERT_KEY"], "gpu:3")
        self.assertEqual(env["TARMAC_ALERT_GPU"], "3")
        self.assertEqual(env["TARMAC_ALERT_UUID"], HOLDING_UUID)
        self.assertEqual(env["TARMAC_ALERT_PID"], str(pid))
        self.assertEqual(env["TARMAC_ALERT_USER"], body["alert"]["user"])
        self.assertEqual(env["TARMAC_ALERT_SINCE_MS"], str(body["alert"]["since_ms"]))
        self.assertEqual(env["TARMAC_ALERT_SUMMARY"], body["alert"]["summary"])
        self.assertEqual(env["TARMAC_ALERT_TEXT"], body["text"])
        self.wait_samples(8)
        self.assertEqual(len(holding()), 1, [b["text"] for b, _ in runs()])
        for b, e in runs():
            self.assertEqual((e["TARMAC_ALERT_RULE"], e["TARMAC_ALERT_STATUS"], e["TARMAC_ALERT_TEXT"]),
                             (b["alert"]["rule"], b["status"], b["text"]))
        self.stop_agent()

    # -- 5 -----------------------------------------------------------------------------------------
    def test_a_dead_webhook_warns_once_and_sampling_goes_on(self):
        dead = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there any more
        self.start("holding-zombie", SHORT_FORS + f'webhook = "{dead}"\n')

        def notices_logged():
            return len(re.findall(r"alert (FIRING|RESOLVED) ", self.log()))

        # starvation (GPU 3 before it is holding) fires and resolves, then holding fires: 3 notices;
        # killing the kernel resolves holding and, GPU 3 now empty, fires idle: 5.
        self.assertTrue(wait_for(lambda: "alert FIRING [warning] holding: GPU 3" in self.log(), HANG_S), self.log())
        os.kill(self.holding_pid(), signal.SIGKILL)
        self.assertTrue(wait_for(lambda: notices_logged() >= 4, HANG_S), self.log())
        # Sampling goes on after every notice failed: 4 more rounds of the 4 GPUs are stored.
        samples_before = self.samples()
        samples_after = self.wait_samples(4)
        self.assertGreaterEqual(samples_after - samples_before, 16, (samples_before, samples_after))
        origin = dead.removesuffix("/hook") + "/…"  # the path, a webhook's secret, is never logged
        warnings = [line for line in self.log().splitlines() if f"alert webhook {origin}" in line]
        self.assertEqual(len(warnings), 1, self.log())
        self.assertIn("warning:", warnings[0])
        self.assertIn("logged once until it works again", warnings[0])
        self.assertGreaterEqual(notices_logged(), 4)
        self.stop_agent()

    # -- 6 -----------------------------------------------------------------------------------------
    def test_a_webhook_that_never_answers_delays_neither_sampling_nor_the_stop(self):
        # h100x8-idle-fleet with idle_for 1 s: the 8 idle alerts fire in one sample, 8 notices queue
        # at once behind a webhook that never answers, and each send waits out the 5 s timeout. What
        # is checked is ordered by events (the sends that began, the samples stored), not by time.
        pit = TarPit()
        self.addCleanup(pit.close)
        self.start("h100x8-idle-fleet", SHORT_FORS + f'webhook = "{pit.url}"\n')
        burst = re.compile(r"alert FIRING \[info\] idle: GPU \d")
        self.assertTrue(wait_for(lambda: len(burst.findall(self.log())) >= 8 or self.agent.poll() is not None,
                                 HANG_S), self.log())
        self.assertEqual(len(burst.findall(self.log())), 8, self.log())

        # Sampling does not wait for the webhook: 2 rounds of the 8 GPUs are stored while at most 5 of
        # the 8 sends have begun (a sampler that sent itself would store none before all 8 gave up).
        samples_before = self.samples()
        grown = 0

        def grew_or_sent_five():
            nonlocal grown
            stored = self.samples()
            if pit.taken() > 5:  # read after the count: what it counted was stored before that
                return True
            grown = stored - samples_before
            return grown >= 16 or self.agent.poll() is not None

        self.assertTrue(wait_for(grew_or_sent_five, HANG_S), self.log())
        self.assertGreaterEqual(grown, 16, f"samples stored while the notices waited for their answers "
                                           f"({pit.taken()} sends begun); log:\n{self.log()}")

        # Stopping does not wait for every notice in turn (under systemd, TimeoutStopSec= 90 s by
        # default, 18 queued would get the agent SIGKILLed): what is queued gets 5 s in all. At most 6
        # sends had begun at the stop (5 counted just now, and the one that may have begun since),
        # so 2 or more were queued: the send in progress and at most one more fit in the 5 s.
        self.stop_agent()
        dropped = re.search(r"stopping: (\d+) alert notices not sent \(the sinks took too long\)", self.log())
        self.assertIsNotNone(dropped, self.log())
        self.assertGreaterEqual(int(dropped.group(1)), 1, self.log())
        self.assertLessEqual(int(dropped.group(1)) + pit.taken(), 8, "a notice both sent and dropped")

if __name__ == "__main__":
    unittest.main()
