"""NVIDIA's Python binding pynvml 12.550 (Debian's python3-pynvml) against the simulator: device
count, names, UUIDs, memory through the versioned `_v2` struct and the plain v1 one, and the
running processes through `_v3` (24-byte records) and the unversioned v1 function (16-byte
records) with the count=0 / INSUFFICIENT_SIZE handshake, and per-process utilization through
nvmlDeviceGetProcessUtilization and nvmlDeviceGetProcessesUtilizationInfo."""
import json
import pathlib
import sys
import unittest

import compat

NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_MEMORY_V2 = 40 | (2 << 24)


class Pynvml(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gpus = compat.expected_gpus()
        probe = pathlib.Path(__file__).with_name("pynvml_probe.py")
        r = compat.run_under_sim([sys.executable, str(probe)],
                                 PYTHONPATH=compat.python_path(compat.peers_dir()))
        cls.result = r
        try:
            cls.doc = json.loads(r.stdout) if r.returncode == 0 else None
        except json.JSONDecodeError:
            cls.doc = None

    def setUp(self):
        self.assertIsNotNone(self.doc, compat.describe(self.result))

    def test_count_names_uuids(self):
        self.assertEqual(self.doc["count"], 4)
        for g, j in zip(self.gpus, self.doc["gpus"]):
            with self.subTest(gpu=g.index):
                self.assertEqual(j["index"], g.index)
                self.assertEqual(j["name"], g.name)
                self.assertEqual(j["uuid"], g.uuid)
                self.assertEqual(j["utilization"], g.util_pct)
                self.assertEqual(j["temperature"], g.temp_c)
                self.assertEqual(j["power_mw"], g.power_w * 1000)

    def test_memory_v2(self):
        for g, j in zip(self.gpus, self.doc["gpus"]):
            with self.subTest(gpu=g.index):
                m = j["memory_v2"]
                self.assertEqual(m["version"], NVML_MEMORY_V2)
                self.assertEqual(m["total"], g.mem_total_mib * compat.MIB)
                self.assertEqual(m["used"], g.mem_used_mib * compat.MIB)
                self.assertEqual(m["reserved"] + m["free"] + m["used"], m["total"])
                self.assertEqual(j["memory_v2_bad_version"], NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
                                 "a struct version other than nvmlMemory_v2 must be rejected")

    def test_memory_v1(self):
        for g, j in zip(self.gpus, self.doc["gpus"]):
            with self.subTest(gpu=g.index):
                m = j["memory_v1"]
                self.assertEqual(m["total"], g.mem_total_mib * compat.MIB)
                self.assertEqual(m["free"] + m["used"], m["total"])
                # v1 "used" counts the driver's reservation too: at least what v2 calls used.
                self.assertGreaterEqual(m["used"], g.mem_used_mib * compat.MIB)
                self.assertEqual(m["free"], j["memory_v2"]["free"])

    def test_running_processes_v3(self):
        for g, j in zip(self.gpus, self.doc["gpus"]):
            with self.subTest(gpu=g.index):
                procs = j["processes_v3"]
                self.assertEqual(len(procs), 1, procs)
                self.assertGreater(procs[0]["pid"], 1)
                self.assertEqual(procs[0]["used"], g.proc_mem_mib * compat.MIB)

    def test_running_processes_v1_with_size_handshake(self):
        for g, j in zip(self.gpus, self.doc["gpus"]):
            with self.subTest(gpu=g.index):
                self.assertEqual(j["sizeof_v1_record"], 16)
                v1 = j["processes_v1"]
                self.assertEqual(v1["first_return"], NVML_ERROR_INSUFFICIENT_SIZE,
                                 "count=0 with no buffer must answer INSUFFICIENT_SIZE")
                self.assertEqual(v1["needed"], 1)
                self.assertEqual(v1["second_return"], 0)
                self.assertEqual(v1["records"], j["processes_v3"])

    def test_process_utilization_reads_the_scenarios_values(self):
        # a100x4-balanced gives each GPU's one process the GPU's utilization (docs/simulator.md).
        mem_util = [41, 40, 42, 39]
        for g, j in zip(self.gpus, self.doc["gpus"]):
            with self.subTest(gpu=g.index):
                pid = j["processes_v3"][0]["pid"]
                want = [{"pid": pid, "sm": g.util_pct, "mem": mem_util[g.index]}]
                self.assertEqual(j["process_utilization"]["legacy"], want,
                                 "nvmlDeviceGetProcessUtilization through pynvml")
                self.assertEqual(j["process_utilization"]["info"], want,
                                 "nvmlDeviceGetProcessesUtilizationInfo through pynvml")


if __name__ == "__main__":
    unittest.main(verbosity=2)
