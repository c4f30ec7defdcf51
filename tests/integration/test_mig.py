"""MIG end to end (docs/mig.md): on the bundled h200x8-mig-mixed, `tarmac status --json` lists each
MIG device under its GPU with the processes the scenario puts on it; a load started with
CUDA_VISIBLE_DEVICES=MIG-<uuid> appears on that MIG device, with its memory there and nowhere
else; `tarmac pick` never hands out a GPU in MIG mode; `tarmac doctor` names the three MIG launch
mistakes with the exit code of a critical finding."""
import json
import os
import subprocess
import tempfile
import unittest

from devtools import demoted, second_user

from test_doctor import doctor, finding
from test_status import BUILD, TARMAC, sim

SCENARIO = "h200x8-mig-mixed"
LOAD = BUILD / "sim" / "tarmac-sim-load"
MIB = 1024 * 1024


def status(*, script=None):
    """`tarmac status --json` under the scenario (after `script`'s background load, when given)."""
    if script is None:
        r = sim(SCENARIO, TARMAC, "--json", "status")
    else:
        r = sim(SCENARIO, "/bin/sh", "-c", script)
    if r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


class Mig(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Leases of this test's own: another test's (or a user's) held MIG devices are not ours.
        cls.locks = tempfile.TemporaryDirectory(prefix="tarmac-mig-locks-")
        os.environ["TARMAC_LOCK_DIR"] = cls.locks.name
        cls.doc = status()

    @classmethod
    def tearDownClass(cls):
        os.environ.pop("TARMAC_LOCK_DIR", None)
        cls.locks.cleanup()

    def test_status_lists_each_mig_device_with_its_processes_and_no_made_up_utilization(self):
        gpus = self.doc["gpus"]
        self.assertEqual([len(g["mig"]) for g in gpus], [0, 0, 0, 0, 4, 7, 2, 0])
        board = gpus[4]
        self.assertTrue(board["mig_mode_current"])
        self.assertIsNone(board["util_gpu_pct"])  # MIG mode: NVML gives none, none is shown
        self.assertEqual([m["profile"] for m in board["mig"]], ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"])
        self.assertEqual([m["gpu_instance_id"] for m in board["mig"]], [2, 3, 9, 10])
        self.assertEqual([m["slices"] for m in board["mig"]], [3, 2, 1, 1])
        by_pid = {p["pid"]: p for p in board["processes"]}
        for k, m in enumerate(board["mig"]):
            with self.subTest(mig=k):
                self.assertTrue(m["uuid"].startswith("MIG-"))
                self.assertEqual(m["mem_total_bytes"] // MIB, [71168, 33024, 16384, 16384][k])
                self.assertEqual(len(m["processes"]), 0 if k == 3 else 1)
                for pid in m["processes"]:
                    self.assertEqual(by_pid[pid]["mig"], k)
                    self.assertEqual(by_pid[pid]["gpu_instance_id"], m["gpu_instance_id"])
                    self.assertEqual(m["mem_used_bytes"], by_pid[pid]["used_mem_bytes"])
                # No GPM in a one-shot status: activity from processes, said so.
                self.assertEqual(m["activity_source"], "processes")
                self.assertEqual(m["activity"], "idle" if k == 3 else "busy")
        # The Jupyter kernel holding 30 GiB on the 2g slice is there, on that slice.
        kernel = [p for p in board["processes"] if "ipykernel" in (p["command_line"] or "")]
        self.assertEqual([p["mig"] for p in kernel], [1])

    def test_an_unprivileged_user_sees_the_processes_of_each_mig_device(self):
        # NVML lists a MIG board's processes through the board only to root: tarmac asks each MIG
        # device, as NVML documents, so that a user's status (and pick --mig) sees them too.
        user = second_user(self)
        r = subprocess.run([TARMAC, "sim", "--scenario", SCENARIO, "--", TARMAC, "--json", "status"],
                           capture_output=True, text=True, timeout=60, preexec_fn=demoted(user),
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "LANG": "C.UTF-8"})
        self.assertEqual(r.returncode, 0, r.stderr)
        board = json.loads(r.stdout)["gpus"][4]
        self.assertEqual([len(m["processes"]) for m in board["mig"]], [1, 1, 1, 0])
        self.assertEqual(sorted(p["mig"] for p in board["processes"]), [0, 1, 2])
        self.assertEqual(board["errors"], [])

    def test_a_load_on_a_mig_uuid_runs_on_that_mig_device(self):
        target = self.doc["gpus"][5]["mig"][4]
        # Waits for the load's memory to show (an event, not a time), then reads the status.
        script = (f"CUDA_VISIBLE_DEVICES={target['uuid']} {LOAD} --mem 2048 --util 50 & L=$!; "
                  f"until {TARMAC} --json status | grep -q '\"used_mem_bytes\": {2048 * MIB},'; do sleep 0.05; done; "
                  f"{TARMAC} --json status; kill $L")
        doc = status(script=script)
        board = doc["gpus"][5]
        self.assertEqual(board["mig"][4]["mem_used_bytes"], 2048 * MIB)
        self.assertEqual(board["mig"][4]["activity"], "busy")
        self.assertEqual([m["mem_used_bytes"] for k, m in enumerate(board["mig"]) if k not in (0, 1, 4)],
                         [0, 0, 0, 0])
        loads = [p for p in board["processes"] if p["used_mem_bytes"] == 2048 * MIB]
        self.assertEqual(len(loads), 1)
        self.assertEqual((loads[0]["mig"], loads[0]["gpu_instance_id"]), (4, board["mig"][4]["gpu_instance_id"]))
        # Only there: no other GPU lists it.
        for g in doc["gpus"]:
            if g["index"] != 5:
                self.assertNotIn(loads[0]["pid"], [p["pid"] for p in g["processes"]])

    def test_cuda_refuses_a_load_on_a_gpu_in_mig_mode_named_whole(self):
        r = sim(SCENARIO, str(LOAD), "--mem", "10", env={"CUDA_VISIBLE_DEVICES": self.doc["gpus"][4]["uuid"]})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no CUDA-capable device", r.stderr)

    def test_pick_never_hands_out_a_gpu_in_mig_mode(self):
        r = sim(SCENARIO, TARMAC, "--json", "pick", "-n", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(sorted(int(x) for x in doc["cuda_visible_devices"].split(",")), [2, 3, 7])
        self.assertEqual({e["index"]: e["reason"] for e in doc["excluded"] if e["reason"] == "mig"},
                         {4: "mig", 5: "mig", 6: "mig"})
        r = sim(SCENARIO, TARMAC, "pick", "-n", "4")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("GPU 5: mig: in MIG mode (7 MIG devices)", r.stderr)

    def test_pick_mig_gives_the_smallest_free_mig_device_by_its_uuid(self):
        gpu4, gpu5 = self.doc["gpus"][4], self.doc["gpus"][5]
        r = sim(SCENARIO, TARMAC, "pick", "--mig", "1g.18gb", "--format", "env")
        self.assertEqual(r.returncode, 0, r.stderr)
        # GPU 4's MIG device 3 is the first free 1g.18gb (GPU 4's 1g.18gb 2 runs llama-server).
        self.assertEqual(r.stdout, f"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={gpu4['mig'][3]['uuid']}\n")
        r = sim(SCENARIO, TARMAC, "--json", "pick", "--mig", "any", "--min-free", "20GiB")
        self.assertEqual(r.returncode, 1, r.stdout)  # every bigger one is in use
        doc = json.loads(r.stdout)
        reasons = {(e["index"], e.get("mig")): e["reason"] for e in doc["excluded"]}
        self.assertEqual(reasons[(4, 1)], "process")
        self.assertEqual(reasons[(5, 2)], "memory")
        self.assertEqual(reasons[(0, None)], "mig")
        # Held by its MIG UUID: the next pick takes another.
        first = sim(SCENARIO, TARMAC, "pick", "--mig", "1g.18gb", "--hold", "1m").stdout.strip()
        second = sim(SCENARIO, TARMAC, "pick", "--mig", "1g.18gb", "--hold", "1m").stdout.strip()
        self.assertEqual(first, gpu4["mig"][3]["uuid"])
        self.assertEqual(second, gpu5["mig"][2]["uuid"])
        self.assertTrue(os.path.exists(os.path.join(self.locks.name, f"gpu-{first}.lease")))
        for args in (["--mig", "1g.18gb", "-n", "2"], ["--mig", "1g.18gb", "--max-util", "10"], ["--mig", "x"]):
            r = sim(SCENARIO, TARMAC, "pick", *args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
        self.assertEqual(len(gpu5["mig"]), 7)

    def test_run_mig_without_an_agent_gives_the_command_its_mig_device(self):
        gpu4 = self.doc["gpus"][4]
        with tempfile.TemporaryDirectory(prefix="tarmac-mig-run-") as locks:  # no other test's holds
            env = {"TARMAC_LOCK_DIR": locks}
            r = sim(SCENARIO, TARMAC, "run", "--mig", "1g.18gb", "--", "sh", "-c", 'echo "cvd=$CUDA_VISIBLE_DEVICES"',
                    env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.strip(), f"cvd={gpu4['mig'][3]['uuid']}")
            # The run's lease of the MIG device ended with it.
            self.assertEqual([f for f in os.listdir(locks) if f.endswith(".lease")], [])
            r = sim(SCENARIO, TARMAC, "run", "--mig", "2g.35gb", "--wait", "0s", "--", "true", env=env)
            self.assertEqual(r.returncode, 1, r.stderr)  # the one 2g.35gb runs the Jupyter kernel
            self.assertIn("no free MIG device of profile 2g.35gb", r.stderr)

    def test_query_compute_apps_lists_the_processes_of_mig_devices_under_their_gpu(self):
        r = sim(SCENARIO, TARMAC, "query", "--query-compute-apps=gpu_uuid,pid,used_gpu_memory", "--format=csv,noheader")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [line.split(", ") for line in r.stdout.splitlines()]
        on_4 = [row for row in rows if row[0] == self.doc["gpus"][4]["uuid"]]
        # One row per process, under its GPU's UUID, with the memory it holds on its MIG device.
        self.assertEqual(sorted(row[2] for row in on_4), ["30720 MiB", "52000 MiB", "9000 MiB"])
        self.assertEqual(len(rows), 9)

    def test_top_shows_each_mig_device_under_its_gpu(self):
        r = sim(SCENARIO, TARMAC, "top", "--once")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("13 MIG devices", lines[0])
        mig = [line for line in lines if "MIG " in line and "g." in line]
        self.assertEqual(len(mig), 13, r.stdout)
        self.assertTrue(any("MIG 3 1g.18gb" in line and "idle" in line for line in mig), r.stdout)
        # Without GPM a MIG device with processes is "in use", never a made-up busy or 0 %.
        self.assertTrue(any("MIG 1 2g.35gb" in line and "in use" in line for line in mig), r.stdout)
        kernel = [line for line in lines if "ipykernel" in line]
        self.assertEqual(len(kernel), 1, r.stdout)
        self.assertIn("4:1", kernel[0])

    def test_doctor_names_each_mig_launch_mistake(self):
        board = self.doc["gpus"][4]
        cases = [(board["uuid"], "mig-parent-gpu", [4]),
                 (f"{board['mig'][0]['uuid']},{board['mig'][1]['uuid']}", "mig-multi-gpu-job", []),
                 ("MIG-00000000-0000-5000-8000-000000000000", "mig-device-missing", [])]
        for cvd, code, gpus in cases:
            with self.subTest(code=code):
                rc, report = doctor(SCENARIO, env={"CUDA_VISIBLE_DEVICES": cvd})
                f = finding(report, code)
                self.assertIsNotNone(f, [x["code"] for x in report["findings"]])
                self.assertEqual((f["severity"], f["gpus"], rc), ("critical", gpus, 2))
                self.assertTrue(f["causes"] and f["fixes"])
                # Not also called a whole-GPU problem, nor starvation of a board that has no utilization.
                self.assertIsNone(finding(report, "no-gpus-visible"))
                self.assertIsNone(finding(report, "starved"))
        # One MIG device and a job that expects two: a multi-GPU job on MIG.
        rc, report = doctor(SCENARIO, "--expect-gpus", "2", env={"CUDA_VISIBLE_DEVICES": board["mig"][3]["uuid"]})
        self.assertIsNotNone(finding(report, "mig-multi-gpu-job"), [x["code"] for x in report["findings"]])
        # A MIG device alone is a correct launch: no MIG finding.
        rc, report = doctor(SCENARIO, env={"CUDA_VISIBLE_DEVICES": board["mig"][3]["uuid"]})
        self.assertEqual([x["code"] for x in report["findings"] if x["code"].startswith("mig-")], [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
