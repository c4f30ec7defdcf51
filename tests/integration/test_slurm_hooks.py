"""End-to-end tests of `tarmac slurm prolog` and `epilog` (docs/slurm.md) on the simulator, run as
slurmd runs them: as root, with the job in SLURM_JOB_ID, SLURM_JOB_UID, SLURM_JOB_USER and
SLURM_JOB_GPUS. The job's processes are tarmac-sim-load programs with SLURM_JOB_ID in their
environment (how tarmac finds a process's job outside a Slurm cgroup), run as the second user.
What they check: an unfit GPU (lost, ECC fault, memory of no job) fails the prolog with one line
that names it; a fit one is mapped in dcgm-exporter's format, leased so that agentless `tarmac
pick` skips it, and labelled hpc_job on exactly its GPUs in the agent's /metrics; the epilog ends
the job user's leftovers and nothing of another user or job, takes the mapping and the leases back,
and fails naming a GPU that stays occupied; both take well under a second on eight GPUs.

The same hooks under a real slurmd (Debian's slurm-wlm): test_slurm_real.py."""
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
import unittest

from agent_support import HeldSim, LiveAgent, end_process, gpu_pids, wait_for
from devtools import demoted, second_user
from test_status import BUILD, TARMAC

LOAD = BUILD / "sim" / "tarmac-sim-load"


def lock_held(path):
    """Whether another process holds an exclusive flock of PATH."""
    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


class Hooks(unittest.TestCase):
    SCENARIO = "a100x4-gpu0-only"  # GPU 0 busy with a process of no job, GPUs 1-3 idle

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("slurmd runs its Prolog and Epilog as root")
        self.user = second_user(self)
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-slurm-"))
        os.chmod(self.dir, 0o755)
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.map = self.dir / "hpc-jobs"
        self.locks = self.dir / "locks"
        self.config = self.dir / "tarmac.toml"
        self.config.write_text(f'[slurm]\njob_map_dir = "{self.map}"\nepilog_grace = "1s"\n'
                               f'[scheduler]\nlock_dir = "{self.locks}"\n')
        os.chmod(self.config, 0o644)
        self.sim = HeldSim(self.SCENARIO)
        # The second user's loads register themselves in the simulation's state.
        state = pathlib.Path(self.sim.state)
        state.chmod(0o755)
        for d in state.rglob("*"):
            if d.is_dir():
                d.chmod(0o1777)
        self.addCleanup(self.close_sim)
        self.loads = []

    def close_sim(self):
        for p in self.loads:
            end_process(p)
        self.sim.close()
        self.sim.proc.stdout.close()
        self.sim.proc.stderr.close()

    def hook(self, which, job="77", gpus="1,2", uid=None, extra=()):
        uid = self.user.pw_uid if uid is None else uid
        env = self.sim.env({"SLURM_JOB_ID": job, "SLURM_JOB_UID": str(uid), "SLURM_JOB_USER": self.user.pw_name,
                            "SLURM_JOB_GPUS": gpus})
        started = time.monotonic()
        r = subprocess.run([str(TARMAC), "--config", str(self.config), *extra, "slurm", which], env=env,
                           capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout, r.stderr, time.monotonic() - started

    def load(self, gpu, job=None, user=None, *args):
        extra = {"CUDA_VISIBLE_DEVICES": str(gpu), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        if job:
            extra["SLURM_JOB_ID"] = job
        p = subprocess.Popen([str(LOAD), "--mem", "2GiB", "--util", "0", *args], env=self.sim.env(extra),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=demoted(user) if user else None)
        self.loads.append(p)
        listed = wait_for(lambda: p.pid in gpu_pids(self.sim.state, gpu) or p.poll() is not None, timeout=30)
        self.assertTrue(listed and p.poll() is None, f"load on GPU {gpu} never listed (exit {p.poll()})")
        return p

    def mapped(self):
        if not self.map.exists():
            return {}
        return {int(f.name): f.read_text().split() for f in self.map.iterdir() if not f.name.startswith(".")}

    def leases(self):
        if not self.locks.exists():
            return []
        return [f.read_text().split() for f in self.locks.glob("gpu-*.lease")]

    def test_a_gpu_held_by_no_job_fails_the_prolog_and_changes_nothing(self):
        rc, out, err, _ = self.hook("prolog", gpus="0,1")
        self.assertEqual(rc, 1, out + err)
        self.assertRegex(err.strip(), r"^tarmac prolog: GPU 0: [0-9.]+ GiB held by pid \d+ \(\w+, python\) of no Slurm job$")
        self.assertEqual(self.mapped(), {})
        self.assertEqual(self.leases(), [])

    def test_prolog_maps_and_leases_then_the_epilog_takes_them_back(self):
        rc, out, err, took = self.hook("prolog")
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.mapped(), {1: ["77"], 2: ["77"]})
        self.assertEqual(sorted(l[3] for l in self.leases()), ["slurm-77", "slurm-77"])
        self.assertTrue(all(l[4] == self.user.pw_name for l in self.leases()))
        # Agentless pick skips the job's GPUs: of 1-3 only GPU 3 is free.
        pick = subprocess.run([str(TARMAC), "--config", str(self.config), "pick", "-n", "2"], env=self.sim.env(),
                              capture_output=True, text=True, timeout=60)
        self.assertNotEqual(pick.returncode, 0, pick.stdout)
        one = subprocess.run([str(TARMAC), "--config", str(self.config), "pick", "-n", "1"], env=self.sim.env(),
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(one.returncode, 0, one.stderr)
        self.assertEqual(one.stdout.strip(), "3")

        rc, out, err, took = self.hook("epilog")
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(self.mapped(), {})
        self.assertEqual(self.leases(), [])

    def test_epilog_ends_the_jobs_leftovers_and_nothing_else(self):
        self.assertEqual(self.hook("prolog", gpus="1,2,3")[0], 0)
        self.assertEqual(self.hook("prolog", job="78", gpus="3")[0], 0)  # the user's next job shares GPU 3
        mine = self.load(1, job="77", user=self.user)
        escaped = self.load(2, job=None, user=self.user)   # left the job's cgroup: no job, the user's
        other_job = self.load(3, job="78", user=self.user)
        fake = self.load(3, job="555", user=self.user)  # claims a job no prolog mapped: no job
        rc, out, err, took = self.hook("epilog", gpus="1,2,3")
        self.assertEqual(rc, 0, out + err)
        self.assertTrue(wait_for(lambda: mine.poll() is not None and escaped.poll() is not None and
                                 fake.poll() is not None))
        self.assertIn(f"pid {mine.pid} ({self.user.pw_name}, tarmac-sim-load): ended after SIGTERM", out)
        self.assertIsNone(other_job.poll(), "another job's process is left alone")
        self.assertNotIn(str(other_job.pid), out)
        self.assertNotIn(mine.pid, gpu_pids(self.sim.state, 1))

    def test_a_claim_no_prolog_mapped_is_not_believed(self):
        # SLURM_JOB_ID is the user's to set: a squatter cannot pass for a job sharing the GPU.
        squatter = self.load(1, job="555", user=self.user)
        rc, out, err, _ = self.hook("prolog", gpus="1")
        self.assertEqual(rc, 1, out + err)
        self.assertIn(f"held by pid {squatter.pid} ({self.user.pw_name}, tarmac-sim-load), which claims Slurm job "
                      "555 that no prolog mapped", err)

    def test_after_a_failed_prolog_the_epilog_ends_nothing_of_no_job(self):
        squatter = self.load(1, user=self.user)  # the user's, outside Slurm
        self.assertEqual(self.hook("prolog", gpus="1")[0], 1)
        rc, out, err, _ = self.hook("epilog", gpus="1")
        self.assertEqual(rc, 1, out + err)  # the GPU stays occupied: the node stays drained
        self.assertIsNone(squatter.poll(), "not the job's leftover: the job never ran")

    def test_leases_are_a_courtesy_that_users_cannot_turn_into_a_drain(self):
        self.locks.mkdir(mode=0o1777)
        os.chmod(self.locks, 0o1777)
        uuid = json.loads(subprocess.run([str(TARMAC), "--json", "status"], env=self.sim.env(), capture_output=True,
                                         text=True, timeout=60).stdout)["gpus"][1]["uuid"]
        # A user's own lease file naming a Slurm job, for ever: neither believed nor a reason to fail.
        forged = self.locks / f"gpu-{uuid}.lease"
        subprocess.run(["sh", "-c", f"echo '0 0 9999999999999 slurm-1 {self.user.pw_name}' > {forged}"],
                       preexec_fn=demoted(self.user), check=True)
        rc, out, err, _ = self.hook("prolog", gpus="1")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("outside Slurm: it is job 77's now", out)
        self.assertEqual(forged.read_text().split()[3], "slurm-77")
        self.assertEqual(self.hook("epilog", gpus="1")[0], 0)
        # The lease directory's lock held by a user: the prolog goes on without leases, quickly.
        (self.locks / ".lock").touch()
        holder = subprocess.Popen(["flock", str(self.locks / ".lock"), "sleep", "60"], preexec_fn=demoted(self.user))
        self.addCleanup(end_process, holder)
        self.assertTrue(wait_for(lambda: lock_held(self.locks / ".lock")), "flock(1) never took the lock")
        rc, out, err, took = self.hook("prolog", gpus="1")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("no leases:", out)
        self.assertEqual(self.mapped(), {1: ["77"]})
        self.assertLess(took, 30)

    def test_the_mapping_lock_is_roots_alone(self):
        self.assertEqual(self.hook("prolog", gpus="1")[0], 0)
        lock = pathlib.Path(str(self.map) + ".lock")
        self.assertEqual(os.stat(lock).st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(self.map).st_mode & 0o777, 0o755)
        # A mapping directory reached through a link is refused, not followed.
        link = self.dir / "linked"
        link.symlink_to(self.map)
        self.config.write_text(f'[slurm]\njob_map_dir = "{link}"\n[scheduler]\nlock_dir = "{self.locks}"\n')
        rc, out, err, _ = self.hook("prolog", job="80", gpus="2")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("a link, or not a directory", err)

    def test_a_shared_gpus_lease_passes_to_the_job_still_on_it(self):
        self.assertEqual(self.hook("prolog", gpus="2")[0], 0)
        self.assertEqual(self.hook("prolog", job="78", gpus="2")[0], 0)
        self.assertEqual([l[3] for l in self.leases()], ["slurm-77"])
        self.assertEqual(self.hook("epilog", gpus="2")[0], 0)
        self.assertEqual(self.mapped(), {2: ["78"]})
        self.assertEqual([l[3] for l in self.leases()], ["slurm-78"])

    def test_a_stubborn_leftover_is_killed(self):
        self.assertEqual(self.hook("prolog", gpus="1")[0], 0)
        stubborn = self.load(1, "77", self.user, "--ignore-sigterm")
        rc, out, err, took = self.hook("epilog", gpus="1")
        self.assertEqual(rc, 0, out + err)
        self.assertIn(f"pid {stubborn.pid} ({self.user.pw_name}, tarmac-sim-load): killed after 1000 ms", out)

    def test_a_gpu_that_stays_occupied_fails_the_epilog_with_its_reason(self):
        self.assertEqual(self.hook("prolog", gpus="1")[0], 0)
        roots = self.load(1)  # root's, of no job: not the job user's to end
        rc, out, err, _ = self.hook("epilog", gpus="1")
        self.assertEqual(rc, 1, out + err)
        self.assertIn(f"tarmac epilog: GPU 1 stays occupied: 2.0 GiB held by pid {roots.pid} (root, tarmac-sim-load)",
                      err)
        self.assertIsNone(roots.poll())
        self.assertEqual(self.mapped(), {}, "the mapping goes: the job is over")

    def test_environment_errors_exit_2_and_a_job_without_gpus_is_fine(self):
        env = self.sim.env({"SLURM_JOB_UID": "0"})
        env.pop("SLURM_JOB_ID", None)
        r = subprocess.run([str(TARMAC), "slurm", "prolog"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("SLURM_JOB_ID", r.stderr)
        rc, out, err, _ = self.hook("prolog", gpus="")
        self.assertEqual(rc, 0, err)
        self.assertIn("no GPUs", out)
        rc, out, err, _ = self.hook("prolog", gpus="9")
        self.assertEqual(rc, 1)
        self.assertIn("GPU 9 of job 77 is not on this node", err)

    def test_a_link_named_tarmac_slurm_prolog_is_the_prolog(self):
        # slurm.conf's Prolog= takes a program without arguments.
        for hook in ("prolog", "epilog"):
            link = self.dir / f"tarmac-slurm-{hook}"
            link.symlink_to(TARMAC)
            env = self.sim.env({"SLURM_JOB_ID": "77", "SLURM_JOB_UID": str(self.user.pw_uid), "SLURM_JOB_GPUS": "1",
                                "SLURM_JOB_USER": self.user.pw_name})
            r = subprocess.run([str(link), "--config", str(self.config)], env=env, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.mapped(), {1: ["77"]} if hook == "prolog" else {})

    def test_metrics_carry_hpc_job_on_exactly_the_jobs_gpus(self):
        self.assertEqual(self.hook("prolog", gpus="1,2")[0], 0)
        agent = LiveAgent(self.SCENARIO, config=self.config.read_text())
        self.addCleanup(agent.close)

        def labelled():
            text = agent.metrics()
            util = [l for l in text.splitlines() if l.startswith("DCGM_FI_DEV_GPU_UTIL{")]
            return {l.split('gpu="')[1].split('"')[0]: l.split('hpc_job="')[1].split('"')[0] if "hpc_job" in l else None
                    for l in util}, text
        found, text = labelled()
        self.assertEqual(found, {"0": None, "1": "77", "2": "77", "3": None})
        info = sorted(l.split('gpu="')[1][0] for l in text.splitlines() if l.startswith("tarmac_gpu_job_info{"))
        self.assertEqual(info, ["1", "2"])
        # A second job on GPU 2: one series per job, as dcgm-exporter's mapping gives.
        self.assertEqual(self.hook("prolog", job="78", gpus="2")[0], 0)
        self.assertTrue(wait_for(lambda: sum(1 for l in agent.metrics().splitlines()
                                             if l.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="2"')) == 2))


class EightGpus(unittest.TestCase):
    def test_prolog_and_epilog_take_well_under_a_second(self):
        if os.geteuid() != 0:
            self.skipTest("slurmd runs its Prolog and Epilog as root")
        d = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-slurm8-"))
        self.addCleanup(shutil.rmtree, d, True)
        cfg = d / "tarmac.toml"
        cfg.write_text(f'[slurm]\njob_map_dir = "{d / "map"}"\n[scheduler]\nlock_dir = "{d / "locks"}"\n')
        sim = HeldSim("h100x8-idle-fleet")
        self.addCleanup(sim.proc.stderr.close)
        self.addCleanup(sim.proc.stdout.close)
        self.addCleanup(sim.close)
        env = sim.env({"SLURM_JOB_ID": "5", "SLURM_JOB_UID": "0", "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"})
        times = {}
        for hook in ("prolog", "epilog"):
            started = time.monotonic()
            r = subprocess.run([str(TARMAC), "--config", str(cfg), "slurm", hook], env=env, capture_output=True,
                               text=True, timeout=60)
            times[hook] = time.monotonic() - started
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        print(f"\n8 GPUs: prolog {times['prolog'] * 1000:.0f} ms, epilog {times['epilog'] * 1000:.0f} ms")
        # Generous for a loaded 2-core CI machine under ASan; on a quiet dev build each is ~30 ms.
        self.assertLess(times["prolog"], 5)
        self.assertLess(times["epilog"], 5)


if __name__ == "__main__":
    unittest.main()
