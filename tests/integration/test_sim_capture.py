"""`tarmac sim capture` (docs/simulator.md "Capturing a machine"): a machine's GPUs written as a
scenario and replayed must read as the machine did. The machine here is itself a simulation (no
real GPU in CI): each bundled scenario is captured, the capture checked by the simulator's own
parser, replayed, and `tarmac status --json`, `tarmac topo` and NVIDIA's nvidia-smi --query-gpu must
show the same GPUs, values, classes and processes; command lines keep only their programs unless
--keep-commands."""
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest

from devtools import require_tool
from test_query import LAUNCHER, NVIDIA_SMI, nvidia_smi_cmd
from test_status import TARMAC

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "bench" / "results"

SCENARIOS = ["a100x4-balanced", "mixed-topology-8gpu", "h200x8-mig-mixed", "holding-zombie"]
# Values of each GPU that a replay must give back as they were.
GPU_KEYS = ["index", "name", "uuid", "pci_bus_id", "serial", "mem_total_bytes", "mem_used_bytes", "util_gpu_pct",
            "util_mem_pct", "temp_c", "power_mw", "power_limit_mw", "clock_sm_mhz", "clock_mem_mhz", "pstate",
            "activity", "persistence_mode", "compute_mode", "mig_mode_current", "ecc_mode_current", "numa_node",
            "temp_slowdown_c", "architecture", "cuda_capability"]
QUERY = ("name,uuid,pci.bus_id,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw,power.limit,"
         "clocks.sm,clocks.mem,pstate,persistence_mode,mig.mode.current,ecc.mode.current,vbios_version")


class SimCapture(unittest.TestCase):
    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-capture-"))
        self.addCleanup(shutil.rmtree, self.dir, True)

    def under(self, scenario, *cmd):
        env = dict(os.environ)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        r = subprocess.run([TARMAC, "sim", "--scenario", str(scenario), "--", *cmd], capture_output=True, text=True,
                           timeout=120, env=env)
        self.assertEqual(r.returncode, 0, f"{scenario}: {cmd}: {r.stderr}")
        return r.stdout

    def capture(self, scenario, *extra):
        path = self.dir / f"{scenario}.toml"
        self.under(scenario, TARMAC, "sim", "capture", "-o", str(path), *extra)
        check = subprocess.run([str(LAUNCHER), "check", str(path)], capture_output=True, text=True, timeout=60)
        self.assertEqual(check.returncode, 0, f"{path.read_text()}\n{check.stdout}{check.stderr}")
        return path

    @staticmethod
    def gpus(status_text):
        doc = json.loads(status_text)
        return [{k: g.get(k) for k in GPU_KEYS} | {"processes": sorted((p["used_mem_bytes"], p["name"]) for p in g["processes"]),
                                                  "mig": [(m["profile"], m["mem_total_bytes"]) for m in g["mig"]]}
                for g in doc["gpus"]]

    def test_a_replayed_capture_reads_as_the_machine_did(self):
        smi = NVIDIA_SMI.exists()
        for scenario in SCENARIOS:
            with self.subTest(scenario=scenario):
                path = self.capture(scenario)
                status = [TARMAC, "--json", "status", "--direct"]
                self.assertEqual(self.gpus(self.under(path, *status)), self.gpus(self.under(scenario, *status)))
                topo = [TARMAC, "topo", "-m"]
                self.assertEqual(self.under(path, *topo), self.under(scenario, *topo))
                if smi:  # NVIDIA's own client reads the replay as it read the machine
                    query = [*nvidia_smi_cmd(), f"--query-gpu={QUERY}", "--format=csv"]
                    self.assertEqual(self.under(path, *query), self.under(scenario, *query))
        if not smi:
            require_tool("nvidia-smi", str(NVIDIA_SMI), hint="scripts/peers.sh fetches it")

    def test_the_captured_h200_replays_as_the_real_machine_read(self):
        """sim/scenarios/h200x1-captured.toml was captured on a real H200 (bench/results/2026-12-04-h200/,
        what tarmac and nvidia-smi said there at the moment of capture): replayed, it must read the same,
        but for what moved between the reads (temperature, power draw, clocks: within a tolerance)."""
        truth = RESULTS / "2026-12-04-h200"
        machine = json.loads((truth / "status.json").read_text())
        replay = json.loads(self.under("h200x1-captured", TARMAC, "--json", "status", "--direct"))
        self.assertEqual(replay["driver_version"], "580.159.04")
        moving = {"temp_c": 3, "power_mw": 0.10, "clock_sm_mhz": 0.10, "clock_mem_mhz": 0.10}  # units, or a share
        static = [k for k in GPU_KEYS if k not in moving] + ["display_active", "bar1_total_bytes", "mem_reserved_bytes"]
        for ours, theirs in zip(replay["gpus"], machine["gpus"], strict=True):
            self.assertEqual({k: ours.get(k) for k in static}, {k: theirs.get(k) for k in static})
            for k, tolerance in moving.items():
                delta = tolerance if tolerance >= 1 else tolerance * theirs[k]
                self.assertAlmostEqual(ours[k], theirs[k], delta=delta, msg=k)
        self.assertEqual(self.under("h200x1-captured", TARMAC, "topo", "-m"), (truth / "topo.txt").read_text())
        if not NVIDIA_SMI.exists():
            require_tool("nvidia-smi", str(NVIDIA_SMI), hint="scripts/peers.sh fetches it")
        got = self.under("h200x1-captured", *nvidia_smi_cmd(), f"--query-gpu={QUERY}", "--format=csv").splitlines()
        want = (truth / "query-gpu.csv").read_text().splitlines()
        self.assertEqual(got[0], want[0])
        fields = QUERY.split(",")
        for ours, theirs in zip(got[1:], want[1:], strict=True):
            for field, a, b in zip(fields, ours.split(", "), theirs.split(", "), strict=True):
                if field in ("temperature.gpu", "power.draw", "clocks.sm", "clocks.mem"):
                    x, y = float(a.split()[0]), float(b.split()[0])
                    self.assertAlmostEqual(x, y, delta=max(3.0, 0.10 * y), msg=field)
                else:
                    self.assertEqual(a, b, field)

    def test_command_lines_keep_their_programs_unless_asked(self):
        text = self.capture("a100x4-balanced").read_text()
        self.assertIn('cmdline = "python [args removed]"', text)
        self.assertNotIn("--local-rank", text)
        self.assertNotIn("user =", text)
        kept = self.capture("a100x4-balanced", "--keep-commands").read_text()
        self.assertIn("--local-rank", kept)

    def test_an_unwritable_output_is_an_error_that_names_it(self):
        r = subprocess.run([TARMAC, "sim", "--scenario", "a100x4-balanced", "--", TARMAC, "sim", "capture", "-o",
                            "/nonexistent-dir/x.toml"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot write /nonexistent-dir/x.toml", r.stderr)


if __name__ == "__main__":
    unittest.main()
