"""End-to-end tests of `tarmac query --query-compute-apps`: the real binary under the simulator.

nvidia-smi 535 cannot list processes under the simulator (it reads them through its internal
export table, which the simulator only stubs: every cell is "[Uninitialized]"), so the values are
checked against the scenario and against golden/apps.*.txt, written once with
TARMAC_REGEN_GOLDEN=1 and checked by eye (PIDs, which change on every run, are replaced by <pid>).
What nvidia-smi does answer there, the unknown-field error, is compared with it byte for byte.
"""
import getpass
import json
import os
import pathlib
import re
import sys
import textwrap
import unittest

import test_query as base

GOLDEN = base.GOLDEN
FIELDS_NVIDIA = "gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,process_name,used_gpu_memory"
LOAD = base.BUILD / "sim" / "tarmac-sim-load"


def query(scenario, *args, timeout=60):
    return base.under_sim(scenario, base.TARMAC, "query", *args, timeout=timeout)


def rows(r):
    return [line.split(", ") for line in r.stdout.splitlines()]


class ComputeApps(unittest.TestCase):

    def setUp(self):
        base.need_simulator(self)

    def ok(self, scenario, *args):
        r = query(scenario, *args)
        self.assertEqual(r.returncode, 0, base.describe(r))
        return r

    def test_balanced_one_row_per_process_in_gpu_order(self):
        r = self.ok("a100x4-balanced", "--query-compute-apps=pid,process_name,used_gpu_memory,user,command",
                    "--format=csv")
        lines = rows(r)
        self.assertEqual(r.stdout.splitlines()[0], "pid, process_name, used_gpu_memory [MiB], user, command")
        self.assertEqual([row[2] for row in lines[1:]], ["38500 MiB", "38600 MiB", "38400 MiB", "38700 MiB"])
        for rank, row in enumerate(lines[1:]):
            self.assertRegex(row[0], r"^[1-9]\d*$")
            self.assertEqual(row[1], "python")
            self.assertEqual(row[3], getpass.getuser())
            self.assertEqual(row[4], f"python train.py --config configs/resnet50.yaml --local-rank {rank}")
        self.assertEqual(len({row[0] for row in lines[1:]}), 4, "four different pids")

    def test_nvidia_smi_fields_and_aliases_golden(self):
        for fmt in base.FORMATS:
            with self.subTest(format=fmt):
                r = self.ok("a100x4-balanced", f"--query-compute-apps={FIELDS_NVIDIA}", f"--format={fmt}")
                text = re.sub(r"(?m)(^(?:[^,\n]*, ){4})\d+,", r"\1<pid>,", r.stdout)
                path = GOLDEN / f"apps.a100x4-balanced.{fmt.replace(',', '-')}.txt"
                if base.REGEN:
                    path.write_text(text)
                self.assertEqual(text, path.read_text(), base.describe(r))
        aliases = self.ok("a100x4-balanced", "--query-compute-apps=name,used_memory", "--format=csv")
        self.assertEqual(aliases.stdout.splitlines()[:2], ["process_name, used_gpu_memory [MiB]", "python, 38500 MiB"])

    def test_timestamp(self):
        r = self.ok("a100x4-balanced", "--query-compute-apps=timestamp,pid", "--format=csv,noheader")
        for row in rows(r):
            self.assertRegex(row[0], base.TIMESTAMP)

    def test_holding_zombie(self):
        r = self.ok("holding-zombie", "--query-compute-apps=used_memory,sm_util,job,container,command",
                    "--format=csv,noheader")
        lines = rows(r)
        self.assertEqual([row[0] for row in lines], ["38500 MiB", "38500 MiB", "38500 MiB", "20480 MiB"])
        # The idle notebook kernel holding GPU 3: NVML keeps no utilization sample for a process
        # that ran nothing, and the read succeeded, so it is known idle: 0, not unknown (issue 15).
        self.assertEqual([row[1] for row in lines], ["96 %", "95 %", "94 %", "0 %"])
        self.assertIn("ipykernel_launcher", lines[3][4])
        for row in lines:  # simulated processes run on this host, outside Slurm and containers
            self.assertEqual(row[2:4], ["[N/A]", "[N/A]"], base.describe(r))

    def test_ids_select_gpus(self):
        r = self.ok("a100x4-balanced", "--query-compute-apps=gpu_bus_id,used_memory", "--format=csv,noheader",
                    "-i", "1,3")
        lines = rows(r)
        self.assertEqual(len(lines), 2, base.describe(r))
        self.assertEqual(lines[0], ["00000000:0F:00.0", "38600 MiB"])
        self.assertEqual(lines[1][1], "38700 MiB")
        bad = query("a100x4-balanced", "--query-compute-apps=pid", "--format=csv", "-i", "9")
        self.assertEqual((bad.returncode, bad.stdout), (6, "No devices were found\n"))

    def test_lost_gpu_leaves_out_its_processes(self):
        # NVML cannot list the processes of a lost GPU; the others are listed and the query succeeds.
        r = base.under_sim("a100x4-balanced", base.TARMAC, "query", "--query-compute-apps=gpu_bus_id,used_memory",
                           "--format=csv,noheader", faults=["gpu=2,lost"])
        self.assertEqual(r.returncode, 0, base.describe(r))
        self.assertEqual([row[1] for row in rows(r)], ["38500 MiB", "38600 MiB", "38700 MiB"], base.describe(r))
        self.assertNotIn("00000000:47:00.0", r.stdout)

    def test_json_and_ndjson_are_typed(self):
        r = self.ok("a100x4-balanced", "--query-compute-apps=pid,process_name,used_gpu_memory,job,sm_util",
                    "--format=json")
        apps = json.loads(r.stdout)
        self.assertEqual([a["used_gpu_memory"] for a in apps], [38500, 38600, 38400, 38700])
        self.assertTrue(all(isinstance(a["pid"], int) and a["job"] is None for a in apps))
        self.assertTrue(all(isinstance(a["sm_util"], int) for a in apps), r.stdout)
        n = self.ok("a100x4-balanced", "--query-compute-apps=pid,used_memory", "--format=ndjson")
        self.assertEqual([json.loads(line)["used_gpu_memory"] for line in n.stdout.splitlines()],
                         [38500, 38600, 38400, 38700])

    def test_unknown_field_as_nvidia_smi(self):
        for fields in ["foo", "pid,foo", "memory.used", "uuid", "PID"]:
            with self.subTest(fields=fields):
                r = query("a100x4-balanced", f"--query-compute-apps={fields}", "--format=csv")
                name = fields.split(",")[-1]
                self.assertEqual((r.returncode, r.stdout), (2, f'Field "{name}" is not a valid field to query.\n\n'))
                if base.NVIDIA_SMI.exists():
                    theirs = base.under_sim("a100x4-balanced", *base.nvidia_smi_cmd(),
                                            f"--query-compute-apps={fields}", "--format=csv")
                    self.assertEqual((r.returncode, r.stdout), (theirs.returncode, theirs.stdout))

    def test_nvidia_smi_header_matches(self):
        base.need_nvidia_smi(self)
        args = [f"--query-compute-apps={FIELDS_NVIDIA},name,used_memory", "--format=csv"]
        theirs = base.under_sim("a100x4-balanced", *base.nvidia_smi_cmd(), *args)
        ours = query("a100x4-balanced", *args)
        self.assertEqual(ours.stdout.splitlines()[0], theirs.stdout.splitlines()[0])
        self.assertEqual(len(ours.stdout.splitlines()), len(theirs.stdout.splitlines()))

    def test_load_program_started_in_the_simulation(self):
        if not LOAD.exists():
            self.fail(f"load program missing: {LOAD} (build the tarmac-sim-load target)")
        driver = textwrap.dedent(f"""
            import json, os, subprocess, sys, time
            load = subprocess.Popen([{str(LOAD)!r}, "--mem", "1024", "--util", "50", "--seconds", "600"],
                                    env=dict(os.environ, CUDA_VISIBLE_DEVICES="2"))
            args = [{base.TARMAC!r}, "query", "--query-compute-apps=pid,gpu_bus_id,used_memory",
                    "--format=csv,noheader", "-i", "2"]
            deadline = time.monotonic() + 120  # a hang's bound; the load runs until killed below
            while True:
                r = subprocess.run(args, capture_output=True, text=True)
                if f"{{load.pid}}, " in r.stdout or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            load.kill()
            load.wait()
            print(json.dumps({{"pid": load.pid, "rc": r.returncode, "out": r.stdout}}))
        """)
        r = base.under_sim("a100x4-gpu0-only", sys.executable, "-c", driver)
        self.assertEqual(r.returncode, 0, base.describe(r))
        seen = json.loads(r.stdout.splitlines()[-1])
        bus = rows(self.ok("a100x4-gpu0-only", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", "2"))[0][0]
        self.assertEqual((seen["rc"], seen["out"]), (0, f"{seen['pid']}, {bus}, 1024 MiB\n"), base.describe(r))


if __name__ == "__main__":
    unittest.main()
