"""End-to-end tests of `tarmac topo` and `tarmac watch` under the simulator."""
import json
import os
import pathlib
import subprocess
import tempfile
import time
import unittest

from devtools import require_tool
from test_status import TARMAC, sim


class Topo(unittest.TestCase):
    def test_matrix_of_the_mixed_topology_box(self):
        r = sim("mixed-topology-8gpu", TARMAC, "topo", "-m")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "\t" + "".join(f"GPU{i}\t" for i in range(8)) + "CPU Affinity\tNUMA Affinity")
        rows = {l.split("\t")[0]: l.split("\t")[1:] for l in lines[1:9]}
        self.assertEqual(rows["GPU0"][:8], [" X ", "NV12", "PXB", "PXB", "SYS", "SYS", "SYS", "SYS"])
        self.assertEqual(rows["GPU6"][:8], ["SYS", "SYS", "SYS", "SYS", "NODE", "NODE", " X ", "NV12"])
        self.assertEqual(rows["GPU0"][8:], ["0-27,56-63", "0"])
        self.assertEqual(rows["GPU5"][8:], ["28-55", "1"])
        self.assertIn("  NV#  = Connection traversing a bonded set of # NVLinks", lines)
        self.assertIn("Legend:", lines)

    def test_nvswitch_box_shows_nvlink_between_every_pair(self):
        # A DGX H100: each GPU's 18 links go to NVSwitches, none to another GPU directly; nvidia-smi
        # shows NV18 between every pair, and so must tarmac.
        r = sim("h100x8-idle-fleet", TARMAC, "topo", "-m")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {l.split("\t")[0]: l.split("\t")[1:] for l in r.stdout.splitlines()[1:9]}
        for i in range(8):
            self.assertEqual(rows[f"GPU{i}"][:8], [" X " if j == i else "NV18" for j in range(8)])

    def test_json_is_symmetric_and_typed(self):
        r = sim("mixed-topology-8gpu", TARMAC, "--json", "topo")
        self.assertEqual(r.returncode, 0, r.stderr)
        t = json.loads(r.stdout)
        links = t["links"]
        self.assertEqual(len(links), 8)
        for i in range(8):
            self.assertEqual(links[i][i], "X")
            for j in range(8):
                self.assertEqual(links[i][j], links[j][i])
        self.assertEqual(t["nvlink_count"][4][5], 12)
        self.assertEqual(t["gpus"][7]["numa_node"], 1)


class Watch(unittest.TestCase):
    def test_piped_watch_appends_frames(self):
        r = sim("a100x4-gpu0-only", TARMAC, "watch", "-n", "0.2", "-c", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count("Every 0.2s: tarmac status"), 3)
        self.assertNotIn("\033[", r.stdout)

    def test_json_watch_is_ndjson(self):
        r = sim("a100x4-balanced", TARMAC, "--json", "watch", "-n", "0.1", "-c", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        frames = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual(len(frames), 3)
        self.assertEqual([g["util_gpu_pct"] for g in frames[-1]["gpus"]], [96, 94, 95, 93])

    def test_gpu_lost_mid_loop_keeps_watching(self):
        # GPU 2 falls off the bus three simulated seconds in (time enough for a start-up under a
        # sanitizer on a loaded machine): the frames before show it, the frames after mark it
        # lost, and the watch goes on for the others.
        r = sim("a100x4-balanced", TARMAC, "--json", "watch", "-n", "0.5", "-c", "10",
                faults=["gpu=2,lost_at=3"])
        self.assertEqual(r.returncode, 0, r.stderr)
        frames = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual(len(frames), 10)
        self.assertIsNone(frames[0]["gpus"][2]["lost"])
        self.assertIsNotNone(frames[-1]["gpus"][2]["lost"])
        self.assertEqual(frames[-1]["gpus"][2]["activity"], "fault")
        self.assertEqual(frames[-1]["gpus"][3]["util_gpu_pct"], 93)

    def test_bad_interval_is_refused(self):
        r = subprocess.run([TARMAC, "watch", "-n", "0"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)

    def test_terminal_watch_redraws_in_place_and_restores_the_screen(self):
        require_tool("tmux", hint="Debian: apt install tmux")
        session = f"tarmac-watch-{os.getpid()}"
        marker = "before-watch-marker"
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "40",
                        "bash --norc --noprofile"], check=True)
        raw = tempfile.NamedTemporaryFile(prefix="tarmac-watch-", suffix=".out")
        self.addCleanup(raw.close)
        try:
            # Everything the pane's program writes, to count the frames drawn.
            subprocess.run(["tmux", "pipe-pane", "-o", "-t", session, f"cat >> {raw.name}"], check=True)

            def pane():
                return subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                      capture_output=True, text=True).stdout

            def wait_for(ready, timeout=120):  # only a hang reaches the bound
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    if ready():
                        return True
                    time.sleep(0.1)
                return False

            def frames():
                return pathlib.Path(raw.name).read_bytes().count(b"Every 0.3s: tarmac status")

            cmd = f"echo {marker}; {TARMAC} sim --scenario a100x4-gpu0-only -- {TARMAC} watch -n 0.3"
            subprocess.run(["tmux", "send-keys", "-t", session, cmd, "Enter"], check=True)
            self.assertTrue(wait_for(lambda: "GPUs 1-3 idle while GPU 0 works" in pane()), pane())
            first = frames()
            self.assertTrue(wait_for(lambda: frames() >= first + 3), f"no redraws: {frames()} frames")  # a few
            screen = pane()
            self.assertEqual(screen.count("Every 0.3s: tarmac status"), 1, "redrawn in place, not appended")
            self.assertNotIn(marker, screen, "the watch runs on the alternate screen")
            subprocess.run(["tmux", "send-keys", "-t", session, "C-c"], check=True)
            self.assertTrue(wait_for(lambda: marker in pane()), "Ctrl-C must restore the screen: " + pane())
            self.assertNotIn("Every 0.3s", pane())
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


if __name__ == "__main__":
    unittest.main()
