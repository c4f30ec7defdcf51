"""The MIG layout of the bundled h200x8-mig-mixed as NVIDIA's own clients read it: nvidia-smi 535's
`-L`, its `--query-gpu=mig.mode.*` and its MIG devices table, and pynvml 12.550's MIG calls. The
two clients must agree with each other (UUIDs, instance ids) and with the layout docs/mig.md gives.
"""
import json
import pathlib
import re
import sys
import unittest

import compat

SCENARIO = "h200x8-mig-mixed"
# docs/mig.md: the MIG devices of each board in the driver's order, with their GPU instance ids
# and memory (MiB), as nvidia-smi mig -lgip gives them for the H200.
LAYOUT = {
    4: [("3g.71gb", 2, 71168), ("2g.35gb", 3, 33024), ("1g.18gb", 9, 16384), ("1g.18gb", 10, 16384)],
    5: [("1g.18gb", 7 + i, 16384) for i in range(7)],
    6: [("4g.71gb", 1, 71168), ("3g.71gb", 2, 71168)],
}


class Mig(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.smi = str(compat.peers_dir() / "x/nvidia-smi/usr/lib/nvidia/current/nvidia-smi")
        probe = pathlib.Path(__file__).with_name("pynvml_mig_probe.py")
        r = compat.run_under_sim([sys.executable, str(probe)], scenario=SCENARIO,
                                 PYTHONPATH=compat.python_path(compat.peers_dir()))
        cls.probe = r
        cls.doc = json.loads(r.stdout) if r.returncode == 0 else None

    def smi_run(self, *args):
        r = compat.run_under_sim([self.smi, *args], scenario=SCENARIO)
        self.assertEqual(r.returncode, 0, compat.describe(r))
        return r

    def test_nvidia_smi_lists_each_mig_device_under_its_gpu(self):
        r = self.smi_run("-L")
        listed, gpu = {}, None
        for line in r.stdout.splitlines():
            if m := re.match(r"^GPU (\d+): NVIDIA H200 \(UUID: GPU-", line):
                gpu = int(m[1])
                listed[gpu] = []
            elif m := re.match(r"^  MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-f-]{36})\)$", line):
                self.assertEqual(int(m[2]), len(listed[gpu]), line)
                listed[gpu].append((m[1], m[3]))
            else:
                self.fail(f"unexpected line {line!r}{compat.describe(r)}")
        self.assertEqual(sorted(listed), list(range(8)))
        for g in range(8):
            with self.subTest(gpu=g):
                self.assertEqual([name for name, _ in listed[g]], [p for p, _, _ in LAYOUT.get(g, [])])
        # The same UUIDs as pynvml reads, each one distinct.
        self.assertIsNotNone(self.doc, compat.describe(self.probe))
        by_pynvml = {g["index"]: [m["uuid"] for m in g["mig"]] for g in self.doc}
        for g in range(8):
            self.assertEqual([u for _, u in listed[g]], by_pynvml[g])
        uuids = [u for g in listed.values() for _, u in g]
        self.assertEqual(len(uuids), len(set(uuids)))

    def test_nvidia_smi_reads_the_mig_modes_and_no_utilization_in_mig_mode(self):
        r = self.smi_run("--query-gpu=index,mig.mode.current,mig.mode.pending,utilization.gpu",
                         "--format=csv,noheader")
        rows = [line.split(", ") for line in r.stdout.splitlines()]
        modes = {int(i): (cur, pend, util) for i, cur, pend, util in rows}
        for g in range(8):
            with self.subTest(gpu=g):
                on = g in LAYOUT
                self.assertEqual(modes[g][0], "Enabled" if on else "Disabled")
                self.assertEqual(modes[g][1], "Enabled" if on or g == 3 else "Disabled")  # GPU 3: pending
                if on:
                    self.assertEqual(modes[g][2], "[N/A]")
                else:
                    self.assertRegex(modes[g][2], r"^\d+ %$")

    def test_nvidia_smi_mig_devices_table_shows_instances_and_their_memory(self):
        r = self.smi_run()
        # |  4    2   0   0  |           52000MiB / 71168MiB  | 60      0 |  3   0    3    0    3 |
        row = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+(\d+)MiB / (\d+)MiB\s+\|\s+(\d+)\s", re.M)
        found = [tuple(int(x) for x in m.groups()) for m in row.finditer(r.stdout)]
        expected = [(g, gi, 0, i, total) for g, devs in LAYOUT.items() for i, (_, gi, total) in enumerate(devs)]
        self.assertEqual([(g, gi, ci, i, total) for g, gi, ci, i, _, total, _ in found], expected,
                         compat.describe(r))

    def test_pynvml_reads_the_layout(self):
        self.assertIsNotNone(self.doc, compat.describe(self.probe))
        for g in self.doc:
            with self.subTest(gpu=g["index"]):
                devs = LAYOUT.get(g["index"], [])
                self.assertEqual(g["current"], 1 if devs else 0)
                self.assertEqual(g["max"], 7 if devs else 0)
                self.assertEqual(g["utilization_error"], 3 if devs else 0)  # NOT_SUPPORTED in MIG mode
                self.assertEqual([(m["name"], m["gi"], m["total_mib"]) for m in g["mig"]],
                                 [(f"NVIDIA H200 MIG {p}", gi, mib) for p, gi, mib in devs])
                for m in g["mig"]:
                    self.assertEqual((m["is_mig"], m["ci"], m["parent_is_gpu"]), (1, 0, True))
                    self.assertEqual(m["slices"], int(m["name"].split()[-1][0]))
                    self.assertEqual(m["utilization_error"], 3)
                if devs:
                    self.assertEqual(g["profile_1_slice"], {"id": 19, "name": "MIG 1g.18gb", "memory": 16384,
                                                            "instances": 7, "sms": 16})
        gpu4 = self.doc[4]["mig"]
        self.assertEqual([(m["profile_id"], m["placement"]) for m in gpu4],
                         [(9, [4, 4]), (14, [0, 2]), (19, [2, 1]), (19, [3, 1])])


if __name__ == "__main__":
    unittest.main(verbosity=2)
