"""bench/gpu_truth.sh, the real-GPU script (issue "Ship it"), run against the simulator so that it
cannot rot between the sessions that get a GPU: NVIDIA's own nvidia-smi on the simulated H200s,
the simulator's load program as the workload. Every check of the script must hold, and the report
must have each of its sections."""
import os
import pathlib
import subprocess
import tempfile
import unittest

from test_query import NVIDIA_SMI
from test_status import BUILD, TARMAC

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "gpu_truth.sh"


class GpuTruthOnTheSimulator(unittest.TestCase):
    def test_the_script_runs_every_section_and_every_check_holds(self):
        if not NVIDIA_SMI.exists():
            self.skipTest(f"{NVIDIA_SMI} is missing (scripts/peers.sh fetches it)")
        if os.environ.get("TARMAC_COMPAT_PRELOAD"):
            self.skipTest("nvidia-smi is not instrumented: not under the sanitizer build")
        with tempfile.TemporaryDirectory(prefix="tarmac-truth-") as tmp:
            report = pathlib.Path(tmp) / "report.md"
            env = dict(os.environ, TARMAC_SIM_LOAD=str(BUILD / "sim" / "tarmac-sim-load"))
            env.pop("CUDA_VISIBLE_DEVICES", None)
            r = subprocess.run([TARMAC, "sim", "--scenario", "h200x8-mig-mixed", "--", "bash", str(SCRIPT),
                                "--tarmac", TARMAC, "--nvidia-smi", str(NVIDIA_SMI), "-o", str(report), "--quick"],
                               capture_output=True, text=True, timeout=240, env=env, cwd=tmp)
            text = report.read_text() if report.exists() else ""
            self.assertEqual(r.returncode, 0, f"{r.stderr}\n{text}")
            for n in range(1, 9):
                self.assertIn(f"\n## {n}. ", text)
            self.assertIn("## Summary: 0 check(s) failed", text)
            # The field comparison ran: most of nvidia-smi's fields answered identically.
            self.assertRegex(text, r"identical: [1-9]\d+;")
            self.assertIn("- ok: static fields identical", text)
            self.assertIn("- ok: a matmul loop on GPU 2 is busy", text)
            self.assertIn("- ok: memory held asleep on GPU 2 is holding", text)
            self.assertIn("- ok: run gives the command its GPU", text)
            self.assertIn("- note: under the simulator the holder cannot be proven (no device file): not-holding", text)
            self.assertRegex(text, r"CPU: [0-9.]+ % of one core")
            self.assertIn("- ok: status reads the agent's view", text)
            self.assertIn("- ok: doctor diagnoses the agent's window", text)
            self.assertRegex(text, r"status through the agent / nvidia-smi: [0-9.]+; status --direct / nvidia-smi")
            # What the machine said, beside its capture, for a replay to be compared with.
            for suffix in ("scenario.toml", "status.json", "topo.txt", "query-gpu.csv"):
                self.assertTrue((pathlib.Path(tmp) / f"report.{suffix}").stat().st_size > 0, suffix)


if __name__ == "__main__":
    unittest.main(verbosity=2)
