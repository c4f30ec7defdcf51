"""`tarmac doctor` through the agent (docs/doctor.md "Through the agent"): with an agent on the
machine, doctor diagnoses the agent's samples of the last window at once instead of sampling for
it, and finds what sampling finds, the topology included (the agent reads it once). `--direct`, an
`--interval` finer than the agent's, or a `--pid` job too young for the agent's process list
sample here instead; a bad answer is named on stderr."""
import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from agent_support import CountedCalls, HeldSim, end_process, wait_for
from test_doctor import clean_env
from test_status import TARMAC

AGENT_INTERVAL = ("--interval", "200ms", "--process-interval", "500ms")

# Each scenario with the finding doctor must make of it, whoever samples.
SCENARIOS = [
    ("a100x4-dataloader-stall", {}, "starved"),
    ("l40s-x4-pcie", {}, "pcie-only-topology"),  # from the topology the agent read at its start
    ("a100x4-balanced", {"NCCL_P2P_DISABLE": "1"}, "nccl-p2p-disabled"),  # NVLink, in that topology
    ("holding-zombie", {}, "holding"),
]


def ask(path, request):
    """One request to the agent's socket; its answer, parsed."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


def findings(report):
    return sorted((f["code"], f["severity"], tuple(f["gpus"])) for f in report["findings"])


class DoctorThroughTheAgent(unittest.TestCase):
    def machine(self, scenario, agent_args=AGENT_INTERVAL, watched=True):
        """A held simulation of SCENARIO with an agent on it that has watched for a second; returns
        (environment for doctor, the agent's socket)."""
        d = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-doctor-agent-"))
        self.addCleanup(shutil.rmtree, d, True)
        sim = self.sim = HeldSim(scenario, state=str(d / "sim"))
        self.addCleanup(sim.proc.stderr.close)  # cleanups run last first: after close()
        self.addCleanup(sim.proc.stdout.close)
        self.addCleanup(sim.close)
        sock = str(d / "agent.sock")
        err = open(d / "agent.stderr", "w+")
        self.addCleanup(err.close)
        agent = subprocess.Popen([TARMAC, "agent", "--listen", "off", "--state-dir", str(d / "state"), *agent_args],
                                 env=sim.env({"TARMAC_SOCKET": sock}), stdout=subprocess.DEVNULL, stderr=err)
        self.addCleanup(end_process, agent)

        def watched_a_second():
            if agent.poll() is not None or not os.path.exists(sock):
                return agent.poll() is not None
            try:
                samples = ask(sock, {"op": "window", "ms": 1000 if watched else 30_000}).get("samples") or []
            except (OSError, ValueError):
                return False
            if not watched:
                return len(samples) >= 2  # two samples, however far apart
            return len(samples) > 1 and samples[-1]["timestamp_unix_ms"] - samples[0]["timestamp_unix_ms"] >= 800
        if not wait_for(watched_a_second) or agent.poll() is not None:
            err.seek(0)
            raise AssertionError(f"the agent never watched a second: {err.read()[-2000:]}")
        env = clean_env(TARMAC_NVML_LIB=sim.env()["TARMAC_NVML_LIB"], TARMAC_SIM_STATE=sim.state, TARMAC_SOCKET=sock)
        return env, sock

    def doctor(self, env, *args, extra=None):
        r = subprocess.run([TARMAC, "--json", "doctor", *args], env={**env, **(extra or {})}, capture_output=True,
                           text=True, timeout=120)
        self.assertTrue(r.stdout.strip(), f"exit {r.returncode}: {r.stderr}")
        return r, json.loads(r.stdout)

    def test_the_agents_window_finds_what_sampling_finds_at_once(self):
        for scenario, extra, code in SCENARIOS:
            with self.subTest(scenario=scenario):
                env, _ = self.machine(scenario)
                through, report = self.doctor(env, "--window", "1s", extra=extra)
                self.assertEqual(through.stderr, "")
                self.assertEqual(report["source"], "agent")
                self.assertGreaterEqual(report["samples"], 2)
                direct, direct_report = self.doctor(env, "--window", "1s", "--interval", "250ms", "--direct", extra=extra)
                self.assertEqual(direct_report["source"], "nvml")
                self.assertIn(code, [f["code"] for f in report["findings"]], report["findings"])
                self.assertEqual(findings(report), findings(direct_report))
                self.assertEqual((through.returncode, report["exit_code"]), (direct.returncode, direct_report["exit_code"]))
                # Nothing sampled here: the driver's library is not even loaded (the loader's own log).
                def loads_nvml(*args):
                    r = subprocess.run([TARMAC, "doctor", "--window", "1s", *args],
                                       env={**env, **extra, "LD_DEBUG": "files"}, capture_output=True, text=True,
                                       timeout=120)
                    return r, "libnvidia-ml.so" in r.stderr
                text, loaded = loads_nvml()
                self.assertFalse(loaded)
                self.assertRegex(text.stdout.splitlines()[0], r"the agent's last 1s \(\d+ samples\)$")
                self.assertTrue(loads_nvml("--direct")[1])

    def test_when_doctor_samples_here_instead(self):
        # Processes listed every 30 s: a job started less than 31 s ago may not be in the list.
        env, sock = self.machine("holding-zombie", ("--interval", "200ms", "--process-interval", "30s"))
        # Finer than the agent's 200 ms: the agent's samples are too coarse.
        _, report = self.doctor(env, "--window", "1s", "--interval", "100ms")
        self.assertEqual(report["source"], "nvml")
        # A job younger than the window and the agent's process interval: maybe not in its list yet.
        young = subprocess.Popen(["sleep", "600"])
        self.addCleanup(end_process, young)
        _, report = self.doctor(env, "--window", "1s", "--pid", str(young.pid))
        self.assertEqual(report["source"], "nvml")
        # (When a job is old enough: tests/unit/cli/doctor_test.cpp, DoctorWindow.)
        # An agent sampling every 2 s cannot stand for a window of 1 s: at least two samples are.
        slow_env, _ = self.machine("holding-zombie", ("--interval", "2s"), watched=False)
        _, report = self.doctor(slow_env, "--window", "1s")
        self.assertEqual(report["source"], "nvml")
        # --window 0: the agent's last sample.
        _, report = self.doctor(env, "--window", "0")
        self.assertEqual((report["source"], report["samples"]), ("agent", 1))
        # The request's bounds.
        for ms in (-1, 30001, "1000", None):
            answer = ask(sock, {"op": "window", "ms": ms})
            self.assertEqual((answer["ok"], answer["code"]), (False, "invalid"), ms)
        self.assertIn("topology", ask(sock, {"op": "window", "ms": 0})["samples"][0])

    def test_a_stuck_agents_answers_grow_old(self):
        # The agent's sampling held inside a driver call (its socket still answers, from memory):
        # the age its answers state keeps growing, however often they are asked for (they are
        # made once per sample, and at least once a second), so the clients' staleness checks fire.
        env, sock = self.machine("holding-zombie")
        held = CountedCalls(self.sim, "nvmlDeviceGetUtilizationRates", gpu=0)
        with held.hold():
            for op in ({"op": "status"}, {"op": "window", "ms": 1000}):
                def age():
                    answer = ask(sock, op)
                    return answer["view"]["age_ms"] if "view" in answer else answer["samples"][-1]["age_ms"]
                with self.subTest(op=op["op"]):
                    self.assertTrue(wait_for(lambda: age() > 1500, step=0.02), "the stated age stood still")

    def test_a_bad_agent_is_named_and_doctor_samples_here(self):
        d = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-doctor-fake-"))
        self.addCleanup(shutil.rmtree, d, True)
        sim = HeldSim("holding-zombie", state=str(d / "sim"))
        self.addCleanup(sim.proc.stderr.close)
        self.addCleanup(sim.proc.stdout.close)
        self.addCleanup(sim.close)
        path = str(d / "fake.sock")
        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
        server.listen(1)
        self.addCleanup(server.close)
        nvml = f"{os.path.realpath(sim.env()['TARMAC_NVML_LIB'])}\n{sim.state}"
        now = int(time.time() * 1000)
        stale = [{"v": 1, "timestamp_unix_ms": now - 10_500 + 250 * k, "age_ms": 10_000 - 250 * k,
                  "devices": [{"id": {"index": 0, "name": "OLD"}}]} for k in range(3)]
        answers = [({"samples": 7}, "the agent's window is not a bounded list of samples"),
                   ({"samples": stale}, "the agent's last sample is 9.5s old"),
                   ({"samples": stale[::-1]}, "not in time order")]

        def serve():
            for answer, _ in answers:
                conn, _ = server.accept()
                with conn:
                    conn.recv(65536)
                    body = {"ok": True, "nvml": nvml, "interval_ms": 200, "process_interval_ms": 500, **answer}
                    conn.sendall(json.dumps(body).encode() + b"\n")
        threading.Thread(target=serve, daemon=True).start()
        env = clean_env(TARMAC_NVML_LIB=sim.env()["TARMAC_NVML_LIB"], TARMAC_SIM_STATE=sim.state, TARMAC_SOCKET=path)
        for _, named in answers:
            with self.subTest(named=named):
                r, report = self.doctor(env, "--window", "500ms")
                self.assertEqual(report["source"], "nvml")
                self.assertIn(f"tarmac: warning: ", r.stderr)
                self.assertIn(named, r.stderr)
                self.assertIn("sampling the GPUs here", r.stderr)
                self.assertIn("holding", [f["code"] for f in report["findings"]])
                self.assertEqual(len(report["gpus"]), 4)  # not the agent's one "OLD" GPU


if __name__ == "__main__":
    unittest.main()
