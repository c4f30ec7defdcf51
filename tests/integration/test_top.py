"""End-to-end tests of `tarmac top` under the simulator, in detached tmux panes whose screens are read
with `capture-pane` (docs/top.md). Every wait is for something on the screen or in the simulator's
registry; HANG_S bounds it only against a hang."""
import itertools
import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import tempfile
import time
import unittest

from agent_support import HANG_S, HeldSim, LiveAgent, end_process
from devtools import require_tool
from test_sched_agent import AgentQueueTest
from test_status import BUILD, TARMAC, sim

LOAD = str(BUILD / "sim" / "tarmac-sim-load")
SIM_LAUNCHER = str(BUILD / "sim" / "tarmac-sim")
MARKER = "before-top-marker"
_panes = itertools.count()


class Pane:
    """COMMAND in a tmux server of its own, WIDTH x HEIGHT, with ENV. After COMMAND the pane prints
    "[exit N]" on the normal screen and stays, so a test reads what was left behind."""

    def __init__(self, test, command, env, width=200, height=50):
        require_tool("tmux", hint="Debian: apt install tmux")
        self.socket = f"tarmac-top-{os.getpid()}-{next(_panes)}"
        # The shell survives a Ctrl-C meant for the program (a trap, unlike an ignore, is not inherited).
        inner = f"trap : INT; echo {MARKER}; {command}; echo \"[exit $?]\"; sleep 600"
        subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", "new-session", "-d", "-x", str(width),
                        "-y", str(height), "sh", "-c", inner], env=env, check=True, stdin=subprocess.DEVNULL)
        test.addCleanup(subprocess.run, ["tmux", "-L", self.socket, "kill-server"], stderr=subprocess.DEVNULL)
        self.test = test

    def tmux(self, *args):
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True).stdout

    def screen(self, escapes=False):
        return self.tmux("capture-pane", "-p", *(["-e"] if escapes else []))

    def keys(self, *keys):
        self.tmux("send-keys", *keys)

    def wait(self, predicate, what):
        """The first screen for which PREDICATE holds; fails showing the last one."""
        deadline = time.monotonic() + HANG_S
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            if "[exit " in screen and MARKER in screen and "[exit" not in what:
                break
            time.sleep(0.05)
        self.test.fail(f"never saw {what}:\n{screen}")

    def wait_text(self, text):
        return self.wait(lambda s: text in s, repr(text))

    def top_pid(self):
        """The pid of the program the pane's shell runs (tarmac top)."""
        shell = int(self.tmux("display", "-p", "#{pane_pid}").strip())
        deadline = time.monotonic() + HANG_S
        while time.monotonic() < deadline:
            children = pathlib.Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
            if children:
                return int(children[0])
            time.sleep(0.05)
        self.test.fail("the pane's shell started nothing")


def rows(screen):
    """The process table's rows: (gpu, pid, rest of the line)."""
    return [(m.group(1), int(m.group(2)), m.group(3))
            for m in re.finditer(r"^\s*(\d+|-)\s+(\d+)\s+(.*)$", screen, re.M)]


def start_load(held, *args, name, gpu, env=None):
    extra = {"CUDA_VISIBLE_DEVICES": str(gpu)}
    extra.update(env or {})
    return subprocess.Popen([LOAD, "--name", name, *args], env=held.env(extra), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def registered(held, pid):
    return (pathlib.Path(held.state) / "procs" / str(pid)).exists()


class TopOnce(unittest.TestCase):
    def test_once_prints_one_frame(self):
        r = sim("a100x4-gpu0-only", TARMAC, "top", "--once", env={"COLUMNS": "160"})
        self.assertEqual(r.returncode, 0, r.stderr)
        for i in range(4):
            self.assertIn(f"GPU {i} NVIDIA A100-SXM4-40GB", r.stdout)
        self.assertIn("GPUs 1-3 idle while GPU 0 works", r.stdout)
        self.assertRegex(r.stdout, r"(?m)^\s*0\s+\d+\s+\S+.*python train\.py")
        self.assertNotIn("\033", r.stdout, "no escapes into a pipe")

    def test_once_json_has_hosts_processes_and_verdicts(self):
        r = sim("a100x4-gpu0-only", TARMAC, "--json", "top", "--once")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(len(j["hosts"]), 1)
        self.assertEqual([g["activity"] for g in j["hosts"][0]["gpus"]], ["busy", "idle", "idle", "idle"])
        self.assertEqual(len(j["processes"]), 1)
        self.assertEqual(j["processes"][0]["gpu"], 0)
        self.assertIn("python", j["processes"][0]["command"])
        self.assertIn("single-gpu-active", [v["code"] for v in j["verdicts"]])

    def leasing_job(self, scenario, lease_prefix, *run_flags):
        """A held simulation of `scenario` and a `tarmac run RUN_FLAGS -- sleep` holding a lease in a lock
        directory of its own (a file named lease_prefix...lease): (env, job)."""
        held = HeldSim(scenario)
        self.addCleanup(held.close)
        locks = tempfile.mkdtemp(prefix="tarmac-top-locks-")
        os.chmod(locks, 0o755)
        env = held.env({"TARMAC_LOCK_DIR": locks, "COLUMNS": "160"})
        job = subprocess.Popen([TARMAC, "run", *run_flags, "--", "sleep", "600"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.addCleanup(end_process, job)
        deadline = time.monotonic() + HANG_S
        while not any(n.startswith(lease_prefix) and n.endswith(".lease") for n in os.listdir(locks)):
            self.assertLess(time.monotonic(), deadline, "no lease written")
            self.assertIsNone(job.poll(), "tarmac run ended")
            time.sleep(0.05)
        return env, job

    def test_a_leased_gpu_names_its_job_and_is_reserved_idle(self):
        env, job = self.leasing_job("a100x4-gpu0-only", "", "-n", "1")
        r = subprocess.run([TARMAC, "top", "--once"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"GPU [1-3] NVIDIA A100-SXM4-40GB\s+reserved-idle .* job \S+ \S+", r.stdout)
        # `tarmac run` without an agent: its job is no agent job `tarmac cancel` takes, so none is offered.
        self.assertRegex(r.stdout, r"GPU [1-3] is reserved by job \S+ \S+ and unused: `tarmac jobs` lists the leases")
        # status too (a look of its own, no agent here): the class, the lease, the verdict.
        r = subprocess.run([TARMAC, "--json", "status"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        leased = [g for g in json.loads(r.stdout)["gpus"] if g["lease"]]
        self.assertEqual(len(leased), 1, r.stdout)
        self.assertEqual(leased[0]["activity"], "reserved-idle")
        self.assertRegex(leased[0]["lease"], r"^job \S+ \S+$")
        r = subprocess.run([TARMAC, "status"], env=env, capture_output=True, text=True, timeout=60)
        self.assertIn(f"GPU {leased[0]['index']} is reserved by {leased[0]['lease']} and unused: "
                      "`tarmac jobs` lists the leases", r.stdout)
        # Once the job ends, the GPU is idle again and no one is named.
        end_process(job)
        r = subprocess.run([TARMAC, "--json", "status"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual([g["lease"] for g in json.loads(r.stdout)["gpus"]], [None] * 4)

    def test_a_leased_mig_device_is_reserved_idle_in_status_watch_and_top(self):
        env, _ = self.leasing_job("h200x8-mig-mixed", "gpu-MIG-", "--mig", "1g.18gb")
        r = subprocess.run([TARMAC, "--json", "status"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        slices = [(g["index"], m) for g in doc["gpus"] for m in g["mig"] if m["lease"]]
        self.assertEqual(len(slices), 1, r.stdout)
        gpu, mig = slices[0]
        self.assertEqual((mig["profile"], mig["activity"], mig["processes"]), ("1g.18gb", "reserved-idle", []))
        self.assertRegex(mig["lease"], r"^job \S+ \S+$")
        self.assertIsNone(next(g for g in doc["gpus"] if g["index"] == gpu)["lease"])  # the slice's, not the GPU's
        name = f"MIG {gpu}:{mig['index']}"
        self.assertIn({"severity": "warning", "code": "reserved-idle",
                       "text": f"{name} is reserved by {mig['lease']} and unused: `tarmac jobs` lists the leases"},
                      doc["verdicts"])
        r = subprocess.run([TARMAC, "status"], env=env, capture_output=True, text=True, timeout=60)
        self.assertRegex(r.stdout, rf"\n\s*{gpu}:{mig['index']}\s+MIG 1g\.18gb .* reserved-idle")
        self.assertIn(f"{name} is reserved by {mig['lease']} and unused", r.stdout)
        verdict = {"severity": "warning", "code": "reserved-idle",
                   "text": f"{name} is reserved by {mig['lease']} and unused: `tarmac jobs` lists the leases"}

        def slice_of(gpus):
            return next(m for g in gpus if g["index"] == gpu for m in g["mig"] if m["index"] == mig["index"])

        # Each `watch --json` frame is status --json's object: the slice's lease, class and verdict.
        r = subprocess.run([TARMAC, "--json", "watch", "-n", "0.1", "-c", "2"], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        frames = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual(len(frames), 2, r.stdout)
        for frame in frames:
            self.assertEqual((slice_of(frame["gpus"])["lease"], slice_of(frame["gpus"])["activity"]),
                             (mig["lease"], "reserved-idle"))
            self.assertIn(verdict, frame["verdicts"])
        # top: the MIG device's line under its GPU says reserved-idle, and the verdict names the lease.
        r = subprocess.run([TARMAC, "top", "--once"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(any(f"MIG {mig['index']} 1g.18gb" in line and "reserved-idle" in line
                            for line in r.stdout.splitlines()), r.stdout)
        self.assertIn(f"{name} is reserved by {mig['lease']} and unused", r.stdout)
        r = subprocess.run([TARMAC, "--json", "top", "--once"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(slice_of(doc["hosts"][0]["gpus"])["lease"], mig["lease"])
        self.assertEqual(slice_of(doc["hosts"][0]["gpus"])["activity"], "reserved-idle")
        self.assertIn(verdict, doc["verdicts"])

    def test_a_full_screen_needs_a_terminal(self):
        r = subprocess.run([TARMAC, "top"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--once", r.stderr)
        bad = subprocess.run([TARMAC, "top", "--once", "--sort", "bogus"], capture_output=True, text=True, timeout=60)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--sort bogus", bad.stderr)

    def test_a_dumb_terminal_is_refused_with_a_pointer_to_watch(self):
        held = HeldSim("a100x4-gpu0-only")
        self.addCleanup(held.close)
        pane = Pane(self, f"TERM=dumb {shlex.quote(TARMAC)} top", held.env(), 100, 20)
        screen = pane.wait_text("[exit 2]")
        self.assertIn("TERM=dumb", screen)
        self.assertIn("tarmac watch", screen)


class TopScreen(unittest.TestCase):
    """One held simulation of a100x4-gpu0-only with three more processes (alpha, beta, gamma on GPUs
    1-3), shared by the tests that only read it."""

    @classmethod
    def setUpClass(cls):
        cls.held = HeldSim("a100x4-gpu0-only")
        cls.loads = []
        for gpu, (name, mem) in enumerate([("alpha", "1GiB"), ("beta", "2GiB"), ("gamma", "3GiB")], start=1):
            cls.loads.append(start_load(cls.held, "--mem", mem, "--util", "20", name=name, gpu=gpu))
        deadline = time.monotonic() + HANG_S
        while not all(registered(cls.held, p.pid) for p in cls.loads):
            if time.monotonic() > deadline:
                raise AssertionError("the load programs did not register")
            time.sleep(0.02)

    @classmethod
    def tearDownClass(cls):
        for p in cls.loads:
            end_process(p)
        cls.held.close()

    def top(self, *args, width=200, height=50, env=None):
        return Pane(self, shlex.join([TARMAC, "top", *args]), self.held.env(env), width, height)

    def test_first_frame_shows_the_gpus_the_verdict_and_the_processes(self):
        pane = self.top()
        screen = pane.wait(lambda s: "gamma" in s and "GPUs" in s, "the first full frame")
        for i in range(4):
            self.assertIn(f"GPU {i} NVIDIA A100-SXM4-40GB", screen)
        self.assertRegex(screen, r"GPU 0 NVIDIA A100-SXM4-40GB\s+busy")
        table = rows(screen)
        self.assertEqual(table[0][0], "0", screen)  # the most memory first: the python on GPU 0
        self.assertIn("python train.py", table[0][2])
        self.assertEqual([r[0] for r in table], ["0", "3", "2", "1"], screen)

    def test_sort_and_filter_keys_change_the_rows(self):
        pane = self.top()
        pane.wait_text("gamma")
        pane.keys("M")  # memory again: ascending
        screen = pane.wait(lambda s: [r[0] for r in rows(s)] == ["1", "2", "3", "0"], "ascending memory")
        self.assertIn("GPU-MEM\u25b2", screen)
        pane.keys("N")  # by pid
        screen = pane.wait(lambda s: "PID\u25b2" in s, "sorted by pid")
        pids = [r[1] for r in rows(screen)]
        self.assertEqual(pids, sorted(pids), screen)
        pane.keys("/", "b", "e", "t", "a", "Enter")
        screen = pane.wait(lambda s: len(rows(s)) == 1, "one row for /beta")
        self.assertIn("beta", rows(screen)[0][2])
        self.assertIn("[/beta]", screen)
        pane.keys("Escape")
        pane.wait(lambda s: len(rows(s)) == 4, "every row back after Esc")
        pane.keys("g", "g")  # GPU 0, then GPU 1
        screen = pane.wait(lambda s: "[GPU 1]" in s and len(rows(s)) == 1, "the GPU 1 filter")
        self.assertIn("alpha", rows(screen)[0][2])

    def test_help_and_detail_screens(self):
        pane = self.top()
        pane.wait_text("gamma")
        pane.keys("h")
        pane.wait_text("tarmac top: keys")
        pane.keys("x")  # any key closes it
        pane.wait(lambda s: "gamma" in s and "tarmac top: keys" not in s, "the main screen again")
        pane.keys("/", "g", "a", "m", "m", "a", "Enter")
        pane.wait(lambda s: len(rows(s)) == 1, "one row for /gamma")
        pane.keys("Enter")
        screen = pane.wait_text("Environment:")
        self.assertIn("CUDA_VISIBLE_DEVICES=3", screen)
        self.assertIn("--name gamma", screen)
        self.assertRegex(screen, r"Process \d+ \(gamma\) on GPU 3")

    def test_doctor_runs_on_the_selected_process_and_shows_its_findings(self):
        pane = self.top()
        screen = pane.wait_text("gamma")
        python = rows(screen)[0][1]
        pane.keys("d")
        pane.wait_text(f"tarmac doctor is watching PID {python}")
        screen = pane.wait_text("any key: back")
        self.assertIn(f"tarmac doctor --pid {python} (python)", screen)
        self.assertIn(f"job: PID {python}", screen)
        pane.keys("Escape")
        pane.wait(lambda s: "gamma" in s and "any key: back" not in s, "the main screen again")

    def test_ascii_and_no_color_frames_have_no_box_drawing_or_colours(self):
        plain = self.top("--ascii", env={"NO_COLOR": "1"})
        plain.wait_text("gamma")
        plain.keys("t")
        plain.wait_text("[tree]")
        screen = plain.screen(escapes=True)
        self.assertFalse(any(ord(c) > 127 for c in screen), screen)
        colour = r"\x1b\[(?:[0-9;]*;)?(?:3[0-7]|9[0-7]|38)[;m]"  # a foreground colour (39 is the default)
        self.assertIsNone(re.search(colour, screen), repr(screen))
        # The same screen in colour does have them: the check above can fail.
        coloured = self.top()
        coloured.wait_text("gamma")
        self.assertRegex(coloured.screen(escapes=True), colour)
        self.assertTrue(any(ord(c) > 127 for c in coloured.screen()))

    def test_resizing_redraws_at_the_new_size(self):
        pane = self.top(width=200, height=50)
        pane.wait(lambda s: "gamma" in s and "util " in s, "the full layout")
        pane.tmux("resize-window", "-x", "80", "-y", "24")
        screen = pane.wait(lambda s: len(s.splitlines()[0]) <= 80 and " 0 A100-SXM4-40GB" in s, "the compact layout")
        self.assertNotIn("util ", screen, "no leftovers of the full layout")
        lines = screen.splitlines()
        self.assertLessEqual(len(lines), 24)
        self.assertTrue(all(len(l) <= 80 for l in lines), screen)
        self.assertIn("COMMAND", screen)

    def test_quitting_restores_the_screen(self):
        for how in ("q", "C-c", "TERM", "HUP"):
            with self.subTest(how=how):
                pane = self.top()
                pane.wait_text("gamma")
                self.assertEqual(pane.tmux("display", "-p", "#{alternate_on}").strip(), "1")
                if how in ("TERM", "HUP"):
                    os.kill(pane.top_pid(), getattr(signal, "SIG" + how))
                else:
                    pane.keys(how)
                screen = pane.wait_text("[exit 0]")
                self.assertIn(MARKER, screen, "the normal screen is back")
                self.assertNotIn("gamma", screen)
                self.assertEqual(pane.tmux("display", "-p", "#{alternate_on}").strip(), "0")
                self.assertEqual(pane.tmux("display", "-p", "#{cursor_flag}").strip(), "1", "the cursor is shown")


class TopActions(unittest.TestCase):
    def setUp(self):
        self.held = HeldSim("a100x4-gpu0-only")
        self.addCleanup(self.held.close)

    def holder(self):
        p = start_load(self.held, "--mem", "2GiB", "--util", "0", name="holder", gpu=2)
        self.addCleanup(end_process, p)
        deadline = time.monotonic() + HANG_S
        while not registered(self.held, p.pid):
            self.assertLess(time.monotonic(), deadline, "the holder did not register")
            time.sleep(0.02)
        return p

    def test_killing_a_holder_through_the_dialog_ends_it(self):
        p = self.holder()
        pane = Pane(self, shlex.join([TARMAC, "top"]), self.held.env())
        pane.wait_text("holder")
        pane.keys("/", "h", "o", "l", "d", "e", "r", "Enter")
        pane.wait(lambda s: len(rows(s)) == 1, "the holder alone")
        pane.keys("k")
        screen = pane.wait_text("Send a signal to PID")
        self.assertIn(f"PID {p.pid} (holder)", screen)
        pane.keys("Enter")
        pane.wait_text(f"SIGTERM sent to PID {p.pid} (holder)")
        self.assertEqual(p.wait(timeout=HANG_S), -signal.SIGTERM)
        deadline = time.monotonic() + HANG_S
        while registered(self.held, p.pid):
            self.assertLess(time.monotonic(), deadline, "still in the simulator's registry")
            time.sleep(0.05)
        pane.wait(lambda s: "no process matches" in s, "the row gone")

    def test_readonly_refuses_every_signal(self):
        p = self.holder()
        pane = Pane(self, shlex.join([TARMAC, "top", "--readonly"]), self.held.env())
        pane.wait_text("holder")
        pane.keys("k")
        pane.wait_text("read-only (--readonly): no signals")
        self.assertNotIn("Send a signal", pane.screen())
        self.assertIsNone(p.poll())
        self.assertTrue(registered(self.held, p.pid))

    def test_a_lost_gpu_is_shown_and_the_rest_keeps_updating(self):
        pane = Pane(self, shlex.join([TARMAC, "top", "-n", "0.2"]), self.held.env())
        pane.wait_text("GPU 3 NVIDIA")
        subprocess.run([SIM_LAUNCHER, "fault", "--state", self.held.state, "gpu=2,lost"], check=True,
                       capture_output=True)
        screen = pane.wait(lambda s: re.search(r"GPU 2 .*lost", s) is not None, "GPU 2 lost")
        self.assertRegex(screen, r"GPU 0 NVIDIA A100-SXM4-40GB\s+busy")
        # Still updating: the clock in the title moves on.
        clock = re.search(r"\d\d:\d\d:\d\d", screen).group(0)
        pane.wait(lambda s: re.search(r"\d\d:\d\d:\d\d", s).group(0) != clock, "the next frame")

    def test_a_driver_call_that_hangs_does_not_freeze_the_screen(self):
        pane = Pane(self, shlex.join([TARMAC, "top", "-n", "0.2"]), self.held.env())
        pane.wait_text("GPU 3 NVIDIA")
        subprocess.run([SIM_LAUNCHER, "fault", "--state", self.held.state,
                        "function=nvmlDeviceGetPowerUsage,delay_ms=600000"], check=True, capture_output=True)
        pane.wait_text("NVML has not answered for")
        pane.keys("h")  # keys are still answered
        pane.wait_text("tarmac top: keys")
        pane.keys("Escape")
        pane.wait(lambda s: "tarmac top: keys" not in s, "the help closed")
        pane.keys("q")
        pane.wait_text("[exit 0]")  # and quitting does not wait for the driver


class TopHosts(unittest.TestCase):
    def test_two_agents_side_by_side_then_one_stops(self):
        a = LiveAgent("a100x4-gpu0-only")
        self.addCleanup(a.close)
        b = LiveAgent("a100x4-balanced")
        self.addCleanup(b.close)
        ha, hb = f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"
        env = dict(os.environ)
        env.pop("TARMAC_NVML_LIB", None)
        pane = Pane(self, shlex.join([TARMAC, "top", "--host", ha, "--host", hb]), env, 220, 60)
        screen = pane.wait(lambda s: f"{ha} GPU 3" in s and f"{hb} GPU 3" in s, "both hosts' GPUs")
        self.assertIn("2 hosts", screen)
        self.assertRegex(screen, r"(?m)^" + re.escape(ha) + r"\s+0\s+\d+\s", "a process row of the first host")
        b.stop()
        screen = pane.wait(lambda s: re.search(re.escape(hb) + r": .*\(for \d+s; its data is \d+s old\)", s) is not None,
                           "the stopped host marked")
        self.assertIn(f"{ha} GPU 0", screen)
        clock = re.search(r"\d\d:\d\d:\d\d", screen).group(0)
        pane.wait(lambda s: re.search(r"\d\d:\d\d:\d\d", s).group(0) != clock, "the view goes on")


class TopCancel(AgentQueueTest):
    def test_c_cancels_the_job_a_process_runs_in_after_a_confirmation(self):
        job = self.submit(LOAD, "--name", "worker", "--mem", "1GiB", "--util", "10")
        self.wait_state(job, ("running",))
        # A process that names the job in its environment without being in it.
        forger = start_load(self.sim, "--mem", "1GiB", "--util", "0", name="forger", gpu=3,
                            env={"TARMAC_JOB_ID": str(job)})
        self.addCleanup(end_process, forger)
        pane = Pane(self, shlex.join([TARMAC, "top"]), self.env())
        pane.wait(lambda s: "worker" in s and "forger" in s, "both processes")
        pane.keys("/", "f", "o", "r", "g", "e", "r", "Enter")
        screen = pane.wait(lambda s: len(rows(s)) == 1, "the forger alone")
        self.assertNotIn(f"job {job}", rows(screen)[0][2], "its TARMAC_JOB_ID makes it no job's")
        pane.keys("c")
        pane.wait_text(f"PID {forger.pid} runs in no tarmac job")
        pane.keys("Escape")  # the filters cleared: "/" starts from the one in effect
        pane.wait(lambda s: len(rows(s)) > 1, "every row back")
        pane.keys("/", "w", "o", "r", "k", "e", "r", "Enter")
        screen = pane.wait(lambda s: len(rows(s)) == 1 and "worker" in s, "the worker alone")
        self.assertIn(f"job {job}", rows(screen)[0][2], "WHERE names its tarmac job")
        pane.keys("c")
        pane.wait_text(f"Cancel tarmac job {job} of ")
        self.assertEqual(self.job(job)["state"], "running", "nothing before the confirmation")
        pane.keys("Enter")
        pane.wait(lambda s: f"tarmac cancel {job}:" in s, "the answer of tarmac cancel")
        self.wait_state(job, ("cancelled", "done", "failed", "killed"))
        self.assertIsNone(forger.poll())


class TopTree(unittest.TestCase):
    def test_the_tree_groups_a_torchrun_launcher_with_its_ranks(self):
        held = HeldSim("a100x4-balanced")
        self.addCleanup(held.close)
        folder = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-top-tree-"))
        # A script named torchrun: its process is named so, as the real launcher's is.
        launcher = folder / "torchrun"
        launcher.write_text("#!/bin/sh\n" + "".join(
            f"CUDA_VISIBLE_DEVICES={i} {shlex.quote(LOAD)} --name python --mem 1GiB --util 40 &\n" for i in range(4))
            + "wait\n")
        launcher.chmod(0o755)
        job = subprocess.Popen([str(launcher)], env=held.env(), start_new_session=True)

        def end_job():
            try:
                os.killpg(job.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            job.wait()
        self.addCleanup(end_job)
        pane = Pane(self, shlex.join([TARMAC, "top", "--tree"]), held.env(), 200, 60)
        screen = pane.wait(lambda s: len(re.findall(r"[\u251c\u2514]\u2500 \S*tarmac-sim-load", s)) >= 4, "four ranks")
        lines = screen.splitlines()
        head = next(i for i, l in enumerate(lines) if re.search(r"^\s*-\s+" + str(job.pid) + r"\s", l))
        self.assertIn("torchrun", lines[head])
        self.assertEqual([bool(re.search(r"[\u251c\u2514]\u2500 ", l)) for l in lines[head + 1:head + 5]], [True] * 4,
                         screen)
        self.assertIn("\u2514\u2500", lines[head + 4])


if __name__ == "__main__":
    unittest.main()
