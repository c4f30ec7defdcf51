"""gpustat 1.1.1 (on NVIDIA's pynvml, both from Debian) against the simulator.

gpustat reads memory through `_v2`, processes through `_v3` (falling back to `_v2`) and drops every
process whose PID psutil cannot find, so its process list also proves that the scenario's processes
are real.
"""
import json
import sys
import unittest

import compat


class Gpustat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gpus = compat.expected_gpus()
        peers = compat.peers_dir()
        cls.cmd = [sys.executable, str(peers / "x/gpustat/usr/bin/gpustat"), "--json"]
        cls.pythonpath = compat.python_path(peers)

    def test_json_shows_every_gpu_and_its_python_process(self):
        r = compat.run_under_sim(self.cmd, PYTHONPATH=self.pythonpath)
        self.assertEqual(r.returncode, 0, compat.describe(r))
        try:
            doc = json.loads(r.stdout)
        except json.JSONDecodeError as e:
            self.fail(f"gpustat --json printed no JSON ({e}){compat.describe(r)}")
        got = doc["gpus"]
        self.assertEqual([g["index"] for g in got], [g.index for g in self.gpus], compat.describe(r))
        pids = set()
        for g, j in zip(self.gpus, got):
            with self.subTest(gpu=g.index):
                self.assertEqual(j["name"], g.name)
                self.assertEqual(j["uuid"], g.uuid)
                self.assertEqual(j["memory.used"], g.mem_used_mib)
                self.assertEqual(j["memory.total"], g.mem_total_mib)
                self.assertEqual(j["utilization.gpu"], g.util_pct)
                self.assertEqual(j["temperature.gpu"], g.temp_c)
                self.assertEqual(j["power.draw"], g.power_w)
                self.assertIsNotNone(j["enforced.power.limit"])
                self.assertGreater(j["enforced.power.limit"], g.power_w)
                procs = j["processes"]
                self.assertIsNotNone(procs, "gpustat saw no process list (function failed)")
                self.assertEqual(len(procs), 1, f"processes on GPU {g.index}: {procs}")
                p = procs[0]
                pids.add(p["pid"])
                self.assertEqual(p["command"], "python")
                self.assertEqual(p["gpu_memory_usage"], g.proc_mem_mib)
                self.assertIsInstance(p["pid"], int)
                self.assertGreater(p["pid"], 1)
        self.assertEqual(len(pids), 4, "each GPU should have its own process")


if __name__ == "__main__":
    unittest.main(verbosity=2)
