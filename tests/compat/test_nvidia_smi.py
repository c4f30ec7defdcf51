"""NVIDIA's own nvidia-smi 535 (Debian's nvidia-smi package) against the simulator.

nvidia-smi is the strictest client: it asks for an internal export table, an event set and the
device index before it prints anything, and formats every value itself. Its process list goes
through the internal table, so it is not checked here.
"""
import re
import unittest

import compat

QUERY = "index,name,uuid,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw"
HEADER = ("index, name, uuid, memory.used [MiB], memory.total [MiB], utilization.gpu [%], "
          "temperature.gpu, power.draw [W]")


class NvidiaSmi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gpus = compat.expected_gpus()
        cls.smi = str(compat.peers_dir() / "x/nvidia-smi/usr/lib/nvidia/current/nvidia-smi")

    def test_query_gpu_csv_shows_each_gpu_as_nvidia_smi_formats_it(self):
        r = compat.run_under_sim([self.smi, f"--query-gpu={QUERY}", "--format=csv"])
        self.assertEqual(r.returncode, 0, compat.describe(r))
        lines = r.stdout.splitlines()
        expected = [HEADER] + [
            f"{g.index}, {g.name}, {g.uuid}, {g.mem_used_mib} MiB, {g.mem_total_mib} MiB, "
            f"{g.util_pct} %, {g.temp_c}, {g.power_w:.2f} W" for g in self.gpus]
        self.assertEqual(lines, expected, compat.describe(r))

    def test_query_gpu_csv_noheader_nounits(self):
        r = compat.run_under_sim([self.smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"])
        self.assertEqual(r.returncode, 0, compat.describe(r))
        expected = [f"{g.index}, {g.name}, {g.uuid}, {g.mem_used_mib}, {g.mem_total_mib}, "
                    f"{g.util_pct}, {g.temp_c}, {g.power_w:.2f}" for g in self.gpus]
        self.assertEqual(r.stdout.splitlines(), expected, compat.describe(r))

    def test_default_table_shows_the_four_gpus(self):
        r = compat.run_under_sim([self.smi])
        self.assertEqual(r.returncode, 0, compat.describe(r))
        out = r.stdout
        self.assertRegex(out, r"NVIDIA-SMI 535\.\d+", compat.describe(r))
        # Each GPU is two table rows:
        # |   0  NVIDIA A100-SXM4-40GB          On  | 00000000:07:00.0 Off |                    0 |
        # | N/A   68C    P0             250W / 400W |  38900MiB / 40960MiB |     96%      Default |
        row = re.compile(
            r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?:On|Off)\s+\|\s+(?P<bus>[0-9A-Fa-f:.]+)\s.*\n"
            r"^\|\s+\S+\s+(?P<temp>\d+)C\s+\S+\s+(?P<power>\d+)W\s*/\s*\S+\s+\|"
            r"\s+(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s+\|\s+(?P<util>\d+)%", re.M)
        found = [m.groupdict() for m in row.finditer(out)]
        self.assertEqual([int(f["index"]) for f in found], [g.index for g in self.gpus],
                         compat.describe(r))
        for g, f in zip(self.gpus, found):
            with self.subTest(gpu=g.index):
                self.assertEqual(f["name"], g.name)
                self.assertEqual(int(f["temp"]), g.temp_c)
                self.assertEqual(int(f["power"]), g.power_w)
                self.assertEqual(int(f["used"]), g.mem_used_mib)
                self.assertEqual(int(f["total"]), g.mem_total_mib)
                self.assertEqual(int(f["util"]), g.util_pct)
                if g.pci_bus_id:
                    self.assertEqual(f["bus"].lower()[-7:], g.pci_bus_id.lower()[-7:])


if __name__ == "__main__":
    unittest.main(verbosity=2)
