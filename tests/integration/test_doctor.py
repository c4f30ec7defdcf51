"""End-to-end tests of `tarmac doctor`: every finding code on its bundled scenario, through the
real simulator launcher, with the exit code its severity calls for."""
import json
import os
import pathlib
import signal
import subprocess
import unittest

from agent_support import HANG_S, SIM_LIB, CountedCalls, HeldSim, end_process, gpu_pids, wait_for
from devtools import require_tool
from test_status import BUILD, TARMAC, sim

LOAD = BUILD / "sim" / "tarmac-sim-load"
QUICK = ("--window", "1s", "--interval", "250ms")
SEVERITY_EXIT = {"info": 0, "warning": 1, "critical": 2}


def clean_env(**extra):
    """The test's environment without the variables doctor inspects, plus `extra`."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("NCCL_") or k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING",
                                          "NVIDIA_VISIBLE_DEVICES"):
            del env[k]
    env.update(extra)
    return env


def doctor(scenario, *args, env=None, window=QUICK, timeout=90):
    """Runs `tarmac doctor --json` under SCENARIO; returns (exit code, report)."""
    r = sim(scenario, TARMAC, "doctor", "--json", *window, *args, env=clean_env(**(env or {})), timeout=timeout)
    if not r.stdout.strip():
        raise AssertionError(f"no output, exit {r.returncode}: {r.stderr}")
    return r.returncode, json.loads(r.stdout)


def kill_if_alive(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def finding(report, code):
    found = [f for f in report["findings"] if f["code"] == code]
    return found[0] if found else None


class DoctorFindsEachCode(unittest.TestCase):
    def assert_finding(self, scenario, code, gpus, severity, *args, env=None, window=QUICK):
        rc, report = doctor(scenario, *args, env=env, window=window)
        f = finding(report, code)
        self.assertIsNotNone(f, f"{code} not reported on {scenario}: {[x['code'] for x in report['findings']]}")
        self.assertEqual(f["severity"], severity)
        self.assertEqual(f["gpus"], gpus)
        for item in f["evidence"]:
            self.assertIn(item["gpu"], gpus)
        self.assertTrue(f["summary"] and f["causes"] and f["fixes"])
        worst = max(SEVERITY_EXIT[x["severity"]] for x in report["findings"])
        self.assertEqual(rc, worst)
        self.assertEqual(report["exit_code"], rc)
        return f, report

    def test_healthy_balanced_job(self):
        rc, report = doctor("a100x4-balanced")
        self.assertEqual(rc, 0, report["findings"])
        self.assertEqual([f for f in report["findings"] if f["severity"] != "info"], [])
        self.assertEqual(report["samples"], 5)
        self.assertEqual([g["processes"] for g in report["gpus"]], [1, 1, 1, 1])
        self.assertEqual([g["activity"] for g in report["gpus"]], ["busy"] * 4)

    def test_single_gpu_active(self):
        f, _ = self.assert_finding("a100x4-gpu0-only", "single-gpu-active", [0, 1, 2, 3], "warning")
        self.assertEqual(f["evidence"][0]["gpu"], 0)
        self.assertEqual(f["evidence"][0]["util_gpu_pct"], 98)
        self.assertTrue(any("torchrun --nproc_per_node=4" in x for x in f["fixes"]))

    def test_starved(self):
        f, _ = self.assert_finding("a100x4-dataloader-stall", "starved", [0, 1, 2, 3], "warning")
        self.assertEqual(f["evidence"][0]["util_gpu_pct"], 5)
        self.assertTrue(any("0 data-loader workers" in x for x in f["facts"]))

    def test_thermal(self):
        f, _ = self.assert_finding("a100x4-thermal", "thermal", [2], "critical")
        self.assertEqual(f["evidence"][0]["temp_max_c"], 87)
        self.assertIn("hw_thermal_slowdown", f["evidence"][0]["clock_events"])

    def test_near_oom(self):
        f, _ = self.assert_finding("a100x4-near-oom", "near-oom", [1], "warning")
        self.assertGreater(f["evidence"][0]["mem_used_pct"], 98)

    def test_holding(self):
        self.assert_finding("holding-zombie", "holding", [3], "warning")

    def test_holding_process_next_to_a_worker(self):
        # GPU 0 is busy (92 %), so only the notebook kernel's own utilization (0 %, known: the
        # driver kept no sample of it) shows it holding 6 GiB (issue 15).
        f, _ = self.assert_finding("zombie-next-to-worker", "holding", [0], "warning")
        self.assertEqual(f["evidence"][0]["idle_holders"], 1)
        kernel = [x for x in f["facts"] if "ipykernel_launcher" in x]
        self.assertEqual(len(kernel), 1, f["facts"])
        self.assertIn("6.0 GiB", kernel[0])
        self.assertNotIn("train.py", " ".join(f["facts"]).replace(kernel[0], ""), "the worker is not holding")

    def test_memory_imbalance(self):
        self.assert_finding("a100x4-memory-imbalance", "memory-imbalance", [0, 1, 2, 3], "warning")

    def test_process_count(self):
        f, _ = self.assert_finding("a100x4-ranks-collide", "process-count", [0, 1, 2], "warning")
        self.assertEqual(f["evidence"][0]["job_processes"], 2)

    def test_pcie_only_topology(self):
        f, _ = self.assert_finding("l40s-x4-pcie", "pcie-only-topology", [0, 1, 2, 3], "warning")
        self.assertTrue(any("SYS" in x for x in f["facts"]))

    def test_gpu_fault(self):
        f, _ = self.assert_finding("a100x4-gpu-fault", "gpu-fault", [1, 2], "critical")
        by_gpu = {e["gpu"]: e for e in f["evidence"]}
        self.assertIn("lost", by_gpu[2])
        self.assertEqual(by_gpu[1]["ecc_uncorrected_volatile"], 1)

    def test_device_order(self):
        f, _ = self.assert_finding("mixed-gpus-workstation", "device-order", [0, 1], "warning")
        self.assertTrue(any("cuda:0 = GPU 1" in x for x in f["facts"]))
        _, report = doctor("mixed-gpus-workstation", env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        self.assertIsNone(finding(report, "device-order"))

    def test_visible_devices_restricted(self):
        f, report = self.assert_finding("a100x4-balanced", "visible-devices-restricted", [2, 3], "info",
                                        env={"CUDA_VISIBLE_DEVICES": "0,1"})
        self.assertEqual(report["environment"]["cuda_visible_devices"], "0,1")
        f, _ = self.assert_finding("a100x4-balanced", "visible-devices-restricted", [1, 2, 3], "warning",
                                   env={"CUDA_VISIBLE_DEVICES": "0,9,1"})
        self.assertTrue(any("'9'" in x for x in f["facts"]))

    def test_no_gpus_visible_when_cuda_visible_devices_hides_all(self):
        self.assert_finding("a100x4-balanced", "no-gpus-visible", [], "critical", env={"CUDA_VISIBLE_DEVICES": ""})

    def test_no_gpus_visible_without_a_driver_exits_3(self):
        r = sim("no-driver-container", TARMAC, "doctor", "--json", *QUICK, env=clean_env())
        self.assertEqual(r.returncode, 3, r.stderr)
        report = json.loads(r.stdout)
        self.assertEqual([f["code"] for f in report["findings"]], ["no-gpus-visible"])
        self.assertEqual(report["exit_code"], 3)
        r = sim("a100x4-balanced", TARMAC, "--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "doctor", *QUICK)
        self.assertEqual(r.returncode, 3)
        self.assertIn("no-gpus-visible", r.stdout)
        self.assertIn("docker run --gpus all", r.stdout)

    def test_nccl_p2p_disabled_on_nvlink(self):
        self.assert_finding("a100x4-balanced", "nccl-p2p-disabled", [0, 1, 2, 3], "warning",
                            env={"NCCL_P2P_DISABLE": "1"})
        _, report = doctor("l40s-x4-pcie", env={"NCCL_P2P_DISABLE": "1"})
        self.assertIsNone(finding(report, "nccl-p2p-disabled"))
        self.assertEqual(report["environment"]["nccl"], {"NCCL_P2P_DISABLE": "1"})

    def test_cuda_launch_blocking(self):
        self.assert_finding("a100x4-balanced", "cuda-launch-blocking", [], "warning",
                            env={"CUDA_LAUNCH_BLOCKING": "1"})


class DoctorOverTheWindow(unittest.TestCase):
    WINDOW = ("--window", "6s", "--interval", "500ms")

    def test_a_stall_that_starts_partway_is_caught(self):
        rc, report = doctor("a100x4-stall-midway", window=self.WINDOW)
        f = finding(report, "starved")
        self.assertIsNotNone(f, report["findings"])
        self.assertEqual(f["gpus"], [0, 1, 2, 3])
        self.assertEqual(rc, 1)
        self.assertEqual(report["samples"], 13)

    def test_a_brief_spike_is_not(self):
        rc, report = doctor("a100x4-thermal-spike", window=self.WINDOW)
        self.assertIsNone(finding(report, "thermal"), report["findings"])
        self.assertEqual(rc, 0, report["findings"])

    def test_window_zero_is_one_snapshot(self):
        rc, report = doctor("a100x4-gpu0-only", window=("--window", "0"))
        self.assertEqual(report["samples"], 1)
        self.assertIsNotNone(finding(report, "single-gpu-active"))
        self.assertEqual(rc, 1)


class DoctorOnOneJob(unittest.TestCase):
    def setUp(self):
        require_tool("tarmac-sim-load", str(LOAD), hint="the simulator's load program: build the target tarmac-sim-load")

    def run_job(self, doctor_args, cuda=("0", "0")):
        """A shell starts one load program per entry of `cuda` (its CUDA_VISIBLE_DEVICES) on the
        idle fleet, then runs doctor on its own PID: the shell is the job's launcher."""
        loads = " ".join(f"CUDA_VISIBLE_DEVICES={c} {LOAD} --mem 4GiB --util 80 --seconds 30 & pids=\"$pids $!\";"
                         for c in cuda)
        # Doctor starts once every load is registered with the simulator (its procs/PID file).
        registered = 'for p in $pids; do until [ -s "$TARMAC_SIM_STATE/procs/$p" ]; do sleep 0.05; done; done;'
        script = (f"pids=; {loads} {registered} {TARMAC} doctor --json --window 1s --interval 250ms --pid $$ "
                  f"{doctor_args}; rc=$?; kill $pids; wait; exit $rc")
        r = sim("h100x8-idle-fleet", "/bin/sh", "-c", script, env=clean_env())
        return r.returncode, json.loads(r.stdout)

    def test_pid_scope_finds_two_ranks_on_one_gpu(self):
        rc, report = self.run_job("--expect-gpus 2")
        self.assertEqual(report["job"]["gpus"], [0])
        self.assertEqual(len(report["job"]["pids"]), 3)  # the shell and its two loads
        f = finding(report, "process-count")
        self.assertIsNotNone(f, report["findings"])
        self.assertEqual(f["evidence"][0]["job_processes"], 2)
        self.assertIsNotNone(finding(report, "single-gpu-active"))
        self.assertEqual(rc, 1)

    def test_pid_scope_one_rank_per_gpu_is_healthy(self):
        rc, report = self.run_job("--expect-gpus 2", cuda=("0", "1"))
        self.assertEqual(report["job"]["gpus"], [0, 1])
        self.assertEqual([f["code"] for f in report["findings"] if f["severity"] != "info"], [])
        self.assertEqual(rc, 0)

    def test_workers_started_after_doctor_are_part_of_the_job(self):
        # A launcher starts its workers late: doctor looks for the job's processes at every sample.
        # The steps are ordered by events, not by pauses: the worker starts once doctor's first
        # sample has begun (the simulator counts doctor's reads of GPU 0), and doctor is held at its
        # read of GPU 7 in that sample until the worker is registered, so its later samples all
        # come after it, however slow the machine.
        sim = HeldSim("h100x8-idle-fleet")
        self.addCleanup(sim.proc.stderr.close)  # cleanups run last first: after close()
        self.addCleanup(sim.proc.stdout.close)
        self.addCleanup(sim.close)
        first_gpu = CountedCalls(sim, "nvmlDeviceGetUtilizationRates", gpu=0)
        last_gpu = CountedCalls(sim, "nvmlDeviceGetUtilizationRates", gpu=7)
        with last_gpu.hold():
            launcher = subprocess.Popen(
                ["/bin/sh", "-c", f"read go; CUDA_VISIBLE_DEVICES=3 {LOAD} --mem 2GiB --util 70 --seconds 600 & "
                                  "echo $!; wait"],
                env=sim.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.addCleanup(launcher.stdout.close)
            self.addCleanup(end_process, launcher)
            doctor = subprocess.Popen([TARMAC, "doctor", "--json", "--window", "1s", "--interval", "250ms",
                                       "--pid", str(launcher.pid)],
                                      env=clean_env(TARMAC_NVML_LIB=SIM_LIB, TARMAC_SIM_STATE=sim.state), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
            self.addCleanup(end_process, doctor)
            self.assertTrue(wait_for(lambda: first_gpu.count() >= 1 or doctor.poll() is not None),
                            "doctor never sampled")
            self.assertIsNone(doctor.poll(), "doctor ended inside its first sample")
            launcher.stdin.write("go\n")
            launcher.stdin.close()
            worker = int(launcher.stdout.readline())
            self.addCleanup(kill_if_alive, worker)
            self.assertTrue(wait_for(lambda: worker in gpu_pids(sim.state, 3) or launcher.poll() is not None),
                            "the worker never registered on GPU 3")
        out, err = doctor.communicate(timeout=HANG_S)
        report = json.loads(out)
        # The late worker, started after doctor's first sample, is in the job: its GPU is.
        self.assertEqual(report["job"]["gpus"], [3], err)
        self.assertIn(worker, report["job"]["pids"])
        self.assertEqual(report["job"]["pids"][0], report["job"]["pid"])

    def test_unknown_pid_is_a_usage_error(self):
        r = sim("a100x4-balanced", TARMAC, "doctor", "--pid", "4194303", *QUICK)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no such process", r.stderr)


class DoctorHumanOutput(unittest.TestCase):
    def test_gpu0_only_names_the_launch_mistake_and_fixes(self):
        r = sim("a100x4-gpu0-only", TARMAC, "doctor", *QUICK, env=clean_env())
        self.assertEqual(r.returncode, 1, r.stderr)
        out = r.stdout
        self.assertIn("WARNING", out)
        self.assertIn("single-gpu-active  Only GPU 0 works; GPUs 1-3 sit empty", out)
        self.assertIn("`python train.py`", out)
        self.assertIn("torchrun --nproc_per_node=4 train.py", out)
        self.assertIn("accelerate launch --multi_gpu", out)
        self.assertIn("deepspeed --num_gpus", out)
        self.assertIn("0 critical, 1 warning, 0 info: exit 1", out)
        self.assertNotIn("\033[", out)  # piped: no colour

    def test_healthy_gpus_in_one_line(self):
        r = sim("holding-zombie", TARMAC, "doctor", *QUICK, env=clean_env())
        self.assertIn("healthy: GPUs 0-2 (utilization 94-96 %", r.stdout)

    def test_bad_window_is_a_usage_error(self):
        r = sim("a100x4-balanced", TARMAC, "doctor", "--window", "soon")
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a duration", r.stderr)

    def test_thresholds_come_from_the_configuration(self):
        config = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"tarmac-doctor-{os.getpid()}.toml"
        config.write_text("[doctor]\nnear_oom_pct = 70\n")
        try:
            r = sim("a100x4-balanced", TARMAC, "--config", str(config), "doctor", "--json", *QUICK, env=clean_env())
            report = json.loads(r.stdout)
            self.assertEqual(finding(report, "near-oom")["gpus"], [0, 1, 2, 3])
            config.write_text("[doctor]\nnear_oom_pct = 7000\n")
            r = sim("a100x4-balanced", TARMAC, "--config", str(config), "doctor", *QUICK, env=clean_env())
            self.assertEqual(r.returncode, 2)
            self.assertIn(f"{config}:2:16: doctor.near_oom_pct: 7000 is out of range", r.stderr)
        finally:
            config.unlink()


if __name__ == "__main__":
    unittest.main()
