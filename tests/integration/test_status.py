"""End-to-end tests of `tarmac status`: the real binary under the real simulator launcher."""
import json
import os
import pathlib
import re
import subprocess
import unittest

BUILD = pathlib.Path(os.environ.get("TARMAC_BUILD_DIR", "build")).resolve()
TARMAC = str(BUILD / "tarmac")
# Every agent a test starts serves the scheduler's socket unless told otherwise, and every `tarmac
# run` uses an agent that answers on it. Each test process gets a socket path of its own, so that
# modules running side by side never meet each other's agents (test_sched_agent sets its own).
os.environ.setdefault("TARMAC_SOCKET", f"/tmp/tarmac-test-{os.getpid()}.sock")
MIB = 1024 * 1024


def sim(scenario, *cmd, faults=(), extra=(), env=None, timeout=60):
    """Runs CMD under `tarmac sim --scenario SCENARIO`; returns the CompletedProcess."""
    args = [TARMAC, "sim", "--scenario", scenario]
    for f in faults:
        args += ["--fault", f]
    args += list(extra) + ["--"] + list(cmd)
    full_env = dict(os.environ)
    full_env.pop("NO_COLOR", None)
    full_env.update(env or {})
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=full_env)


def status_json(scenario, faults=(), extra=(), args=()):
    r = sim(scenario, TARMAC, "status", "--json", *args, faults=faults, extra=extra)
    if r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


class StatusOnBundledScenarios(unittest.TestCase):
    def test_balanced_values_and_processes(self):
        snap = status_json("a100x4-balanced")
        self.assertEqual(len(snap["gpus"]), 4)
        used = [38900, 38850, 39010, 38790]
        util = [96, 94, 95, 93]
        temp = [68, 67, 69, 66]
        power = [250, 248, 251, 247]
        proc_mem = [38500, 38600, 38400, 38700]
        for i, g in enumerate(snap["gpus"]):
            with self.subTest(gpu=i):
                self.assertEqual(g["index"], i)
                self.assertEqual(g["name"], "NVIDIA A100-SXM4-40GB")
                self.assertEqual(g["mem_total_bytes"], 40960 * MIB)
                self.assertEqual(g["mem_used_bytes"], used[i] * MIB)
                self.assertEqual(g["util_gpu_pct"], util[i])
                self.assertEqual(g["temp_c"], temp[i])
                self.assertEqual(g["power_mw"], power[i] * 1000)
                self.assertEqual(g["activity"], "busy")
                self.assertRegex(g["uuid"], r"^GPU-[0-9a-f]{8}-")
                self.assertEqual(len(g["processes"]), 1)
                p = g["processes"][0]
                self.assertEqual(p["used_mem_bytes"], proc_mem[i] * MIB)
                self.assertTrue(p["visible"])
                self.assertEqual(p["name"], "python")
                self.assertIsNotNone(p["user"])
                self.assertIsInstance(p["start_time_unix"], int)
        self.assertEqual([v for v in snap["verdicts"] if v["severity"] != "info"], [])

    def test_gpu0_only_names_the_idle_gpus(self):
        r = sim("a100x4-gpu0-only", TARMAC, "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("GPUs 1-3 idle while GPU 0 works: see `tarmac doctor`", r.stdout)
        self.assertNotIn("\033[", r.stdout, "piped output must carry no colour")
        lines = [l for l in r.stdout.splitlines() if re.match(r"^\s+[0-3]\s+NVIDIA", l)]
        self.assertEqual(len(lines), 4, r.stdout)
        self.assertIn("busy", lines[0])
        for line in lines[1:]:
            self.assertIn("idle", line)

    def test_holding_zombie_is_classified_holding(self):
        # The simulator's processes start with the run, so one snapshot knows they are seconds
        # old: they cannot have held memory idle for the default 10 minutes yet.
        young = status_json("holding-zombie")
        self.assertEqual([g["activity"] for g in young["gpus"]], ["busy", "busy", "busy", "starved"])
        snap = status_json("holding-zombie", args=["--holding-after", "0s"])
        self.assertEqual([g["activity"] for g in snap["gpus"]], ["busy", "busy", "busy", "holding"])
        self.assertIn("holding", [v["code"] for v in snap["verdicts"]])
        self.assertEqual(snap["gpus"][3]["processes"][0]["used_mem_bytes"], 20480 * MIB)

    def test_zombie_next_to_worker_shows_each_process_utilization(self):
        # Issue 15: the GPU is busy; per process, the worker reads 92 / 38 % and the notebook
        # kernel beside it is known idle (0, not unknown), through the newest function and, on
        # the old driver, through its fallback.
        for extra in ([], ["--driver", "old"]):
            with self.subTest(extra=extra):
                snap = status_json("zombie-next-to-worker", extra=extra)
                gpu = snap["gpus"][0]
                self.assertEqual(gpu["activity"], "busy")
                procs = {p["used_mem_bytes"] // MIB: p for p in gpu["processes"]}
                self.assertEqual((procs[30720]["sm_util_pct"], procs[30720]["mem_util_pct"]), (92, 38))
                self.assertEqual((procs[6144]["sm_util_pct"], procs[6144]["mem_util_pct"]), (0, 0))
                self.assertEqual(gpu["errors"], [])

    def test_bad_duration_is_refused(self):
        r = sim("holding-zombie", TARMAC, "status", "--holding-after", "soon")
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a duration", r.stderr)

    def test_thermal_gpu_is_a_fault_with_its_reasons(self):
        snap = status_json("a100x4-thermal")
        hot = [g for g in snap["gpus"] if g["temp_c"] is not None and g["temp_c"] >= 85]
        self.assertTrue(hot)
        self.assertEqual(hot[0]["activity"], "fault")
        self.assertTrue({"hw_thermal_slowdown", "sw_thermal_slowdown"} & set(hot[0]["clock_event_reason_names"]))

    def test_near_oom_verdict(self):
        snap = status_json("a100x4-near-oom")
        self.assertIn("near-oom", [v["code"] for v in snap["verdicts"]])


class StatusWithFaults(unittest.TestCase):
    def test_lost_gpu_and_unsupported_power_leave_the_rest_readable(self):
        faults = ["fn=nvmlDeviceGetPowerUsage,gpu=1,rc=NOT_SUPPORTED", "gpu=2,lost"]
        snap = status_json("a100x4-balanced", faults=faults)
        g = snap["gpus"]
        self.assertEqual(len(g), 4)
        self.assertIsNotNone(g[2]["lost"])
        self.assertEqual(g[2]["activity"], "fault")
        self.assertIsNone(g[1]["power_mw"])
        self.assertEqual(g[1]["util_gpu_pct"], 94)
        self.assertEqual(g[1]["temp_c"], 67)
        self.assertEqual(g[1]["errors"], [], "NOT_SUPPORTED is data, not an error")
        self.assertEqual(g[0]["power_mw"], 250000)
        self.assertEqual(g[3]["power_mw"], 247000)
        self.assertEqual(g[3]["mem_used_bytes"], 38790 * MIB)
        r = sim("a100x4-balanced", TARMAC, "status", faults=faults)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("GPU lost", r.stdout)
        self.assertIn("GPU 2: lost", r.stdout)

    def test_transient_error_is_shown_next_to_the_value(self):
        snap = status_json("a100x4-balanced", faults=["fn=nvmlDeviceGetTemperature,gpu=0,rc=UNKNOWN"])
        g0 = snap["gpus"][0]
        self.assertIsNone(g0["temp_c"])
        self.assertEqual([e["value"] for e in g0["errors"]], ["temperature"])
        self.assertIn("NVML_ERROR_UNKNOWN", g0["errors"][0]["message"])

    def test_slow_calls_delay_but_do_not_lose_values(self):
        import time
        t0 = time.monotonic()
        snap = status_json("a100x4-balanced", faults=["fn=nvmlDeviceGetTemperature,delay_ms=300"])
        elapsed = time.monotonic() - t0
        self.assertEqual([g["temp_c"] for g in snap["gpus"]], [68, 67, 69, 66])
        self.assertGreaterEqual(elapsed, 4 * 0.3, "the fault must really have slowed the calls")

    def test_old_driver_falls_back_to_older_entry_points(self):
        snap = status_json("a100x4-balanced", extra=["--driver", "old"])
        self.assertEqual([g["mem_used_bytes"] // MIB for g in snap["gpus"]], [38900, 38850, 39010, 38790])
        self.assertEqual([len(g["processes"]) for g in snap["gpus"]], [1, 1, 1, 1])


class StatusProcesses(unittest.TestCase):
    def test_killed_process_leaves_the_gpu(self):
        script = (
            "import json, os, signal, subprocess, time\n"
            f"t = {TARMAC!r}\n"
            "s = json.loads(subprocess.check_output([t, 'status', '--json']))\n"
            "pid = s['gpus'][1]['processes'][0]['pid']\n"
            "os.kill(pid, signal.SIGKILL)\n"
            "deadline = time.monotonic() + 60\n"  # a hang's bound: the simulator notices at its pace
            "while True:\n"
            "    s = json.loads(subprocess.check_output([t, 'status', '--json']))\n"
            "    if not s['gpus'][1]['processes'] or time.monotonic() > deadline:\n"
            "        break\n"
            "    time.sleep(0.05)\n"
            "print(json.dumps(s['gpus'][1]))\n"
        )
        r = sim("a100x4-balanced", "/usr/bin/python3", "-c", script)
        self.assertEqual(r.returncode, 0, r.stderr)
        g1 = json.loads(r.stdout)
        self.assertEqual(g1["processes"], [])
        self.assertEqual(g1["mem_used_bytes"], (38850 - 38600) * MIB)
        self.assertEqual(g1["util_gpu_pct"], 0)
        self.assertEqual(g1["activity"], "idle")


class StatusForeignPids(unittest.TestCase):
    """GPU processes of another container: NVML gives their host PIDs, which tarmac's /proc lacks."""

    SCENARIO = str(pathlib.Path(__file__).resolve().parent / "data" / "foreign-pid.toml")
    FOREIGN = 4200001  # above the kernel's largest PID: no local process can have it

    def test_json_shows_the_process_as_not_visible_with_its_memory(self):
        snap = status_json(self.SCENARIO)
        g0, g1, g2 = snap["gpus"]
        self.assertEqual(len(g1["processes"]), 1)
        p = g1["processes"][0]
        self.assertEqual(p["pid"], self.FOREIGN)
        self.assertFalse(p["visible"])
        self.assertEqual(p["used_mem_bytes"], 30000 * MIB)
        self.assertEqual(p["sm_util_pct"], 10)
        for key in ("user", "name", "command_line", "start_time_unix", "container"):
            self.assertIsNone(p[key], key)
        # Its memory counts: held at 10 % it makes GPU 1 starved, not idle.
        self.assertEqual(g1["mem_used_bytes"], (300 + 30000) * MIB)
        self.assertEqual(g1["activity"], "starved")
        self.assertIn("starved", [v["code"] for v in snap["verdicts"]])
        # A local and a foreign process on one GPU: both listed, each with its own visibility.
        self.assertEqual([(q["visible"], q["used_mem_bytes"] // MIB) for q in g2["processes"]],
                         [(True, 10000), (False, 20000)])
        self.assertEqual(g2["processes"][1]["pid"], self.FOREIGN + 1)
        self.assertEqual(g2["mem_used_bytes"], (300 + 10000 + 20000) * MIB)
        self.assertEqual(g2["activity"], "busy")
        self.assertTrue(g0["processes"][0]["visible"])
        self.assertEqual(g0["processes"][0]["command_line"], "python train.py --rank 0")

    def test_table_marks_the_process_as_not_visible(self):
        r = sim(self.SCENARIO, TARMAC, "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {int(m.group(2)): m.group(0) for m in re.finditer(r"^\s*(\d+)\s+(\d+)\s.*$", r.stdout, re.M)
                if int(m.group(2)) > 100}
        foreign = rows.get(self.FOREIGN)
        self.assertIsNotNone(foreign, r.stdout)
        self.assertRegex(foreign, r"^\s*1\s+4200001\s+-\s+29\.3 GiB\s+10 %\s+-\s+-\s+"
                                  r"\(PID not visible here: a process of another container or PID namespace\)$")
        self.assertIn("python train.py --rank 1", r.stdout)
        gpu1 = [l for l in r.stdout.splitlines() if re.match(r"^\s+1\s+NVIDIA", l)]
        self.assertEqual(len(gpu1), 1, r.stdout)
        self.assertIn("starved", gpu1[0])

    def test_query_compute_apps_says_not_found_as_nvidia_smi(self):
        fields = "gpu_bus_id,pid,process_name,used_gpu_memory,user,command"
        r = sim(self.SCENARIO, TARMAC, "query", f"--query-compute-apps={fields}", "--format=csv,noheader", "-i", "1,2")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 3, r.stdout)
        self.assertEqual(lines[0], "00000000:0F:00.0, 4200001, [Not Found], 30000 MiB, [Not Found], [Not Found]")
        self.assertRegex(lines[1], r"^00000000:47:00\.0, \d+, python, 10000 MiB, \S+, python train.py --rank 1$")
        self.assertEqual(lines[2], "00000000:47:00.0, 4200002, [Not Found], 20000 MiB, [Not Found], [Not Found]")
        r = sim(self.SCENARIO, TARMAC, "query", "--query-compute-apps=pid,process_name,used_memory", "--format=json",
                "-i", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), [{"pid": self.FOREIGN, "process_name": None, "used_gpu_memory": 30000}])


class StatusCudaVisibleDevices(unittest.TestCase):
    def test_says_which_gpus_cuda_would_see(self):
        env = {"CUDA_VISIBLE_DEVICES": "2,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        r = sim("a100x4-balanced", TARMAC, "status", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("CUDA_VISIBLE_DEVICES=2,0 (PCI_BUS_ID order): a CUDA program started here sees "
                      "cuda:0 = GPU 2, cuda:1 = GPU 0", r.stdout)
        r = sim("a100x4-balanced", TARMAC, "status", "--json", env=env)
        self.assertEqual(json.loads(r.stdout)["cuda_visible_devices"]["gpu_of_cuda"], [2, 0])

    def test_a_bad_entry_is_pointed_out(self):
        r = sim("a100x4-balanced", TARMAC, "status", env={"CUDA_VISIBLE_DEVICES": "0,5,1"})
        self.assertIn("sees cuda:0 = GPU 0\n", r.stdout)
        self.assertIn("entry '5' matches no GPU: CUDA ignores it and every entry after it", r.stdout)

    def test_unset_prints_nothing_about_it(self):
        env = dict(os.environ)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        r = sim("a100x4-balanced", TARMAC, "status", env=env)
        self.assertNotIn("CUDA_VISIBLE_DEVICES", r.stdout)


class StatusWithoutDriver(unittest.TestCase):
    def test_missing_library_gives_the_clear_message_and_exit_3(self):
        env = dict(os.environ, TARMAC_NVML_LIB="/nonexistent/libnvidia-ml.so.1")
        r = subprocess.run([TARMAC, "status"], capture_output=True, text=True, env=env, timeout=30)
        self.assertEqual(r.returncode, 3)
        self.assertEqual(r.stdout, "")
        self.assertIn("NVIDIA driver library was not found", r.stderr)
        self.assertIn("--gpus all", r.stderr)

    def test_bad_option_is_a_usage_error(self):
        r = subprocess.run([TARMAC, "status", "--bogus"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--bogus", r.stderr)

    def test_help_lists_the_commands(self):
        r = subprocess.run([TARMAC, "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0)
        self.assertIn("status", r.stdout)
        self.assertIn("sim", r.stdout)


class NvmlProfile(unittest.TestCase):
    def test_the_profile_times_each_call_and_leaves_the_output_alone(self):
        cmd = [TARMAC, "sim", "--scenario", "a100x4-balanced", "--", TARMAC, "--json", "status", "--direct"]
        plain = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        timed = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, TARMAC_NVML_PROFILE="1"))
        self.assertEqual((plain.returncode, timed.returncode, plain.stderr), (0, 0, ""))
        self.assertEqual(json.loads(timed.stdout)["gpus"][0]["uuid"], json.loads(plain.stdout)["gpus"][0]["uuid"])
        self.assertIn("tarmac: NVML profile (TARMAC_NVML_PROFILE):", timed.stderr)
        rows = {line.split()[0]: int(line.split()[1]) for line in timed.stderr.splitlines()[2:] if line.strip()}
        self.assertEqual(rows["nvmlInitWithFlags"], 1)
        self.assertEqual(rows["dlopen"], 1)
        self.assertEqual(rows["nvmlDeviceGetHandleByIndex_v2"], 4)  # one per GPU


if __name__ == "__main__":
    unittest.main()
