"""nvtop 3.0.1 (Debian's nvtop) against the simulator, in a detached tmux pane whose screen is read
with `capture-pane`.

nvtop needs every NVML symbol it looks up (else it prints "No GPU to monitor." and exits 0), uses
the unversioned v1 process and memory functions, and asserts on impossible values, so a screen
with the four GPUs and their processes says that the simulator's v1 ABI is right.
"""
import os
import re
import shlex
import subprocess
import tempfile
import time
import unittest

import compat

WIDTH, HEIGHT = 200, 50
SETTLE_S = 120  # the bound of the wait for the screen to show everything: only a hang reaches it


def complete(screen, gpus) -> bool:
    """Whether SCREEN shows every device with the values the tests check, and every process."""
    if len(re.findall(r"Device \d+ \[", screen)) < len(gpus):
        return False
    if len(re.findall(r"^\s*\d+\s.*\bpython\b", screen, re.M)) < len(gpus):
        return False
    return all(re.search(rf"TEMP\s+{g.temp_c}°C", screen) and re.search(rf"POW\s+{g.power_w}\s*/", screen)
               and re.search(rf"GPU\[[|\s]*{g.util_pct}%\]", screen) and f"{g.proc_mem_mib}MiB" in screen
               for g in gpus)


class Nvtop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        compat.require_tool("tmux", hint="Debian: apt install tmux")
        cls.gpus = compat.expected_gpus()
        cls.nvtop = str(compat.peers_dir() / "x/nvtop/usr/bin/nvtop")
        cls.home = tempfile.TemporaryDirectory(prefix="tarmac-compat-nvtop-")
        cls.addClassCleanup(cls.home.cleanup)
        cls.socket = f"tarmac-compat-{os.getpid()}"
        env = compat.client_env(HOME=cls.home.name, XDG_CONFIG_HOME=cls.home.name,
                                TERM="tmux-256color")
        # The pane keeps its last screen and reports the exit status if nvtop quits early.
        inner = (f"{shlex.join(compat.sim_command([cls.nvtop]))}; "
                 "echo \"[nvtop exited with status $?]\"; sleep 600")
        subprocess.run(["tmux", "-L", cls.socket, "-f", "/dev/null", "new-session", "-d",
                        "-x", str(WIDTH), "-y", str(HEIGHT), "sh", "-c", inner],
                       env=env, check=True, stdin=subprocess.DEVNULL)
        # Runs even when setUpClass fails: ending the server hangs up nvtop and the simulator.
        cls.addClassCleanup(subprocess.run, ["tmux", "-L", cls.socket, "kill-server"],
                            stderr=subprocess.DEVNULL)
        cls.screen = cls.wait_for_screen()

    @classmethod
    def capture(cls) -> str:
        r = subprocess.run(["tmux", "-L", cls.socket, "capture-pane", "-p", "-J"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return r.stdout

    @classmethod
    def wait_for_screen(cls) -> str:
        """The first screen that shows all four devices with their values and four python processes
        (or the last one seen when that does not happen in SETTLE_S seconds, or when nvtop exits):
        nvtop draws the panels before it has every value."""
        deadline = time.monotonic() + SETTLE_S
        screen = ""
        while time.monotonic() < deadline:
            screen = cls.capture()
            if complete(screen, cls.gpus) or "[nvtop exited" in screen:
                return screen
            time.sleep(0.2)
        return screen

    def msg(self) -> str:
        return "\n--- nvtop screen ---\n" + self.screen

    def test_nvtop_runs(self):
        self.assertNotIn("No GPU to monitor", self.screen, self.msg())
        self.assertNotIn("[nvtop exited", self.screen, self.msg())

    def test_shows_each_gpu_with_name_memory_temperature_power(self):
        panels = self.device_panels()
        self.assertEqual(sorted(panels), [g.index for g in self.gpus], self.msg())
        for g in self.gpus:
            with self.subTest(gpu=g.index):
                panel = panels[g.index]
                # Device 0 [NVIDIA A100-SXM4-40GB] PCIe GEN 4@16x RX: 1.192 GiB/s TX: 205.1 MiB/s
                header = re.search(r"Device \d+ \[([^\]]+)\]", panel)
                self.assertEqual(header.group(1), g.name, self.msg())
                # GPU 1410MHz MEM 1215MHz TEMP  68°C FAN N/A% POW 250 / 400 W
                self.assertRegex(panel, rf"TEMP\s+{g.temp_c}°C", self.msg())
                self.assertRegex(panel, rf"POW\s+{g.power_w}\s*/\s*\d+\s*W", self.msg())
                # GPU[|||||||||||||   96%] MEM[|||||||||||||||37.988Gi/40.000Gi]
                self.assertRegex(panel, rf"GPU\[[|\s]*{g.util_pct}%\]", self.msg())
                mem = re.search(r"MEM\[[|\s]*([\d.]+)Gi/([\d.]+)Gi\]", panel)
                self.assertIsNotNone(mem, self.msg())
                self.assertAlmostEqual(float(mem.group(1)), g.mem_used_mib / 1024, delta=0.001,
                                       msg=self.msg())
                self.assertAlmostEqual(float(mem.group(2)), g.mem_total_mib / 1024, delta=0.001,
                                       msg=self.msg())

    def test_shows_the_python_process_of_each_gpu(self):
        # PID USER DEV TYPE GPU GPU MEM CPU HOST MEM Command
        rows = re.findall(r"^\s*(\d+)\s+\S+\s+(\d+)\s+(\w+)\s+\d+%\s+(\d+)MiB\s.*?\s(python\b.*?)\s*$",
                          self.screen, re.M)
        by_gpu = {int(dev): (int(pid), kind, int(mib)) for pid, dev, kind, mib, _ in rows}
        self.assertEqual(sorted(by_gpu), [g.index for g in self.gpus], self.msg())
        for g in self.gpus:
            with self.subTest(gpu=g.index):
                pid, kind, mib = by_gpu[g.index]
                self.assertEqual(kind, "Compute", self.msg())
                self.assertEqual(mib, g.proc_mem_mib, self.msg())
        self.assertEqual(len({v[0] for v in by_gpu.values()}), 4, self.msg())

    def device_panels(self) -> dict[int, str]:
        """Each device's panel: its header line and the two lines under it, cut at the columns
        where the next panel on the same rows begins (nvtop puts panels side by side)."""
        lines = self.screen.splitlines()
        panels = {}
        for i, line in enumerate(lines):
            heads = list(re.finditer(r"Device (\d+) \[", line))
            for k, m in enumerate(heads):
                start = max(m.start() - 1, 0)
                end = heads[k + 1].start() - 1 if k + 1 < len(heads) else None
                panels[int(m.group(1))] = "\n".join(l[start:end] for l in lines[i:i + 3])
        return panels


if __name__ == "__main__":
    unittest.main(verbosity=2)
