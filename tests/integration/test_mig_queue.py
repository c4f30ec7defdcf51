"""MIG devices through the agent's queue (docs/mig.md, docs/scheduler.md): `tarmac run --mig` and
`tarmac reserve --mig` on the bundled h200x8-mig-mixed with an agent. A job is given one MIG device
by its MIG-UUID in CUDA_VISIBLE_DEVICES, and the simulator's own registry shows its load on that MIG
device; two jobs never share one; an agentless `pick --mig` sees the agent's MIG leases; a MIG lease
is used by a process on its MIG device and reclaimed when nothing runs there; a job on its own MIG
device is not called a job outside its GPUs."""
import json
import pathlib
import subprocess
import unittest

from agent_support import HANG_S, end_process, query, wait_for
from test_sched import LOAD
from test_sched_agent import SLOW, AgentQueueTest, make_executable

SCENARIO = "h200x8-mig-mixed"


def sim_mig_devices(state):
    """{pid: (gpu, MIG device index)} of the simulator's registered processes placed on a MIG device."""
    out = {}
    for f in (pathlib.Path(state) / "procs").glob("*"):
        try:
            fields = dict(line.split("=", 1) for line in f.read_text().splitlines() if "=" in line)
        except OSError:
            continue
        if "mig_device" in fields and fields.get("gpus", "").isdigit():
            out[int(fields["pid"])] = (int(fields["gpus"]), int(fields["mig_device"]))
    return out


class MigQueueTest(AgentQueueTest):
    scenario = SCENARIO

    def setUp(self):
        super().setUp()
        r = self.tarmac("--json", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.gpus = json.loads(r.stdout)["gpus"]

    def count(self, sql, *args):
        try:
            return query(self.db, sql, *args)[0][0]
        except Exception:  # noqa: BLE001 - the store may not be there yet
            return 0

    def mig_uuid(self, gpu, k):
        return self.gpus[gpu]["mig"][k]["uuid"]

    def env_script(self, name):
        """A job that writes its CUDA_VISIBLE_DEVICES to a file, then becomes a load of 1 GiB."""
        out = self.tmp / f"{name}.env"
        path = make_executable(self.tmp / f"{name}.sh",
                               f'#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES" > {out}.tmp && mv {out}.tmp {out}\n'
                               f'exec {LOAD} --mem 1024 --util 40 --seconds 600\n')
        return path, out


class RunMig(MigQueueTest):
    config = 'backfill_idle = "1s"\n'
    def test_each_job_gets_its_own_mig_device_by_uuid(self):
        first_sh, first_env = self.env_script("first")
        second_sh, second_env = self.env_script("second")
        first = self.submit(first_sh, flags=("--mig", "1g.18gb"))
        second = self.submit(second_sh, flags=("--mig", "1g.18gb"))
        jobs = self.wait_jobs([first, second], lambda j: j["state"] == "running", HANG_S, "the MIG jobs did not start")
        # GPU 4's MIG device 3 and GPU 5's MIG device 2 are the free 1g.18gb ones (test_mig.py).
        given = {jobs[first]["uuids"][0], jobs[second]["uuids"][0]}
        self.assertEqual(given, {self.mig_uuid(4, 3), self.mig_uuid(5, 2)})
        for job_id, env in ((first, first_env), (second, second_env)):
            job = jobs[job_id]
            self.assertEqual(job["mig"], "1g.18gb")
            self.assertEqual(len(job["gpus"]), 1)
            self.assertTrue(wait_for(env.exists, 20 * SLOW), str(env))
            self.assertEqual(env.read_text().strip(), job["uuids"][0])  # CUDA's name for a MIG device
        # The simulator placed each load on the MIG device its job was given.
        want = {(4, 3), (5, 2)}
        self.assertTrue(wait_for(lambda: set(sim_mig_devices(self.sim.state).values()) >= want, 20 * SLOW),
                        sim_mig_devices(self.sim.state))
        # An agentless pick sees the agent's leases of those MIG devices: it takes another one.
        r = self.tarmac("pick", "--mig", "1g.18gb")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn(r.stdout.strip(), given)
        # `tarmac jobs` says what was given.
        r = self.tarmac("jobs")
        self.assertIn("4 (MIG)", r.stdout)
        # The agent has watched the jobs run on their MIG devices for two seconds of its own samples:
        # using its own MIG device is not using a GPU it was not given.
        started = max(j["started_unix_ms"] for j in jobs.values())
        self.assertTrue(wait_for(lambda: self.last_sample_ms(4) >= started + 2000, HANG_S))
        self.assertEqual([e for e in self.events() if e[2] == "job_outside"], [])
        self.assertEqual([self.job(i)["outside"] for i in (first, second)], [[], []])
        for job_id in (first, second):
            self.assertEqual(self.tarmac("cancel", str(job_id)).returncode, 0)
        self.wait_ended([first, second], 60)

    def test_a_profile_with_no_free_device_waits_and_says_for_what(self):
        job = self.submit("true", flags=("--mig", "7g.141gb"))
        held = self.wait_held(job, "free MIG device of profile 7g.141gb")
        self.assertEqual(held["gpus"], [])
        # It holds no backfill off: backfill runs on whole idle GPUs, never on a MIG device.
        backfill = self.submit("sleep", "60", flags=("--backfill",))
        self.assertEqual(self.wait_state(backfill, "running", timeout=60)["kind"], "job")
        self.assertEqual(self.job(job)["state"], "queued")
        for j in (job, backfill):
            self.assertEqual(self.tarmac("cancel", str(j)).returncode, 0)

    def test_bad_mig_requests_are_refused_and_nothing_is_queued(self):
        before = set(self.jobs())
        for args in (["--mig", "1g.18gb", "-n", "2"], ["--mig", "1g.18gb", "--backfill"],
                     ["--mig", "1g.18gb", "--max-util", "10"], ["--mig", "x;rm"]):
            with self.subTest(args=args):
                r = self.tarmac("run", "--detach", *args, "--", "true")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("--", r.stderr)
        r = self.tarmac("reserve", "--mig", "1g.18gb", "-n", "3", "--for", "1m")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(set(self.jobs()), before)


class ReserveMig(MigQueueTest):
    config = 'lease_idle_limit = "2s"\nlease_idle_grace = "2s"\n'
    agent_config = 'slow_interval = "500ms"\n'  # GPM per GPU instance, read on the slow cadence

    def reserve_mig(self):
        r = self.tarmac("reserve", "--mig", "any", "--for", "10m")
        self.assertEqual(r.returncode, 0, f"{r.stderr}\n{self.agent_log()}")
        exports = [line for line in r.stdout.splitlines() if line.startswith("export ")]
        self.assertEqual(len(exports), 1, r.stdout)
        exported = dict(word.split("=", 1) for word in exports[0].split()[1:])
        # A MIG device by its UUID, and no PCI ordering (which orders GPUs, not MIG devices).
        self.assertTrue(exported["CUDA_VISIBLE_DEVICES"].startswith("MIG-"), exports[0])
        self.assertNotIn("CUDA_DEVICE_ORDER", exported)
        return int(exported["TARMAC_JOB_ID"]), exported

    def test_a_used_mig_lease_is_kept_and_an_unused_one_reclaimed(self):
        idle, idle_env = self.reserve_mig()
        used, used_env = self.reserve_mig()
        # The smallest free ones first: the two free 1g.18gb devices.
        self.assertEqual({idle_env["CUDA_VISIBLE_DEVICES"], used_env["CUDA_VISIBLE_DEVICES"]},
                         {self.mig_uuid(4, 3), self.mig_uuid(5, 2)})
        load = subprocess.Popen([LOAD, "--mem", "1024", "--util", "60"], env=self.env(used_env),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(end_process, load)
        self.assertTrue(wait_for(lambda: load.pid in sim_mig_devices(self.sim.state), 10 * SLOW))
        # The recorder classes the used MIG device from its GPU instance's GPM (an H200's), not
        # from process presence alone.
        gpu, k = sim_mig_devices(self.sim.state)[load.pid]
        gi = self.gpus[gpu]["mig"][k]["gpu_instance_id"]
        measured = "SELECT count(*) FROM mig_activity WHERE gpu = ? AND gpu_instance = ? AND source = 'gpm' AND class = 'busy'"
        self.assertTrue(wait_for(lambda: self.count(measured, gpu, gi) > 0, HANG_S),
                        f"no GPM-measured busy span of GPU {gpu} GI {gi}\n{self.agent_log()}")
        self.assertEqual(self.wait_state(idle, "reclaimed", timeout=30)["kind"], "lease")
        # Until then the agent classed the unused MIG device reserved-idle, as it classes a whole GPU
        # leased and unused: its class spans in the store say so.
        gpu, unused = next((g["index"], m) for g in self.gpus for m in g["mig"]
                           if m["uuid"] == idle_env["CUDA_VISIBLE_DEVICES"])
        reserved = "SELECT count(*) FROM mig_activity WHERE gpu = ? AND gpu_instance = ? AND class = 'reserved-idle'"
        self.assertTrue(wait_for(lambda: self.count(reserved, gpu, unused["gpu_instance_id"]) > 0, HANG_S),
                        f"no reserved-idle span of GPU {gpu} GI {unused['gpu_instance_id']}\n{self.agent_log()}")
        # The used lease's MIG device has been sampled busy past the idle one's reclaiming.
        reclaimed_at = self.job(idle)["ended_unix_ms"]
        gpu = self.job(used)["gpus"][0]
        self.assertTrue(wait_for(lambda: self.last_sample_ms(gpu) >= reclaimed_at + 1000, HANG_S))
        self.assertIsNone(load.poll())
        self.assertEqual(self.job(used)["state"], "active", "a MIG lease in use is never reclaimed")
        self.assertEqual(self.tarmac("release", str(used)).returncode, 0)
        self.assertEqual(self.wait_state(used, "released")["uuids"], [used_env["CUDA_VISIBLE_DEVICES"]])


if __name__ == "__main__":
    unittest.main(verbosity=2)
