"""tarmac's Slurm hooks under a real Slurm: Debian 12's slurmctld and slurmd (22.05) with munge, and
the contrib gpu/nvml plugin (slurm-wlm-nvml-plugin, unpacked by scripts/peers.sh), all on this
machine, against the simulator (docs/slurm.md).

slurmd runs under the simulator's libnvidia-ml.so.1 (LD_LIBRARY_PATH), with gres.conf's
`AutoDetect=nvml`: the GPUs it finds are the scenario's. Slurm stats each GPU's device file
(/dev/nvidiaN, a character device) before it hands the GPU out, and this machine has none, so
slurmd runs in a mount namespace of its own whose /dev is an overlay holding device nodes of
NVIDIA's major number (nothing outside it sees them; no driver answers them). The scenario's CPU
affinity is this machine's CPUs, as a real driver's always is (slurmd drops a GPU whose affinity
names CPUs it does not have).

The jobs are the second user's, submitted with sbatch and srun, running the simulator's load
program; slurm.conf's Prolog and Epilog are links named tarmac-slurm-prolog and -epilog (through
a two-line wrapper that points them at the simulation and the test's configuration, since slurmd
gives its scripts an environment of its own). What they check: slurmd detects the scenario's
GPUs; a job's processes carry its job id in `tarmac status`; the agent's /metrics has hpc_job on
exactly the job's GPUs while it runs, and on none after; a holder the job leaves behind is ended
by the epilog; a GPU held by a process of no job makes the prolog fail, Slurm drain the node and
requeue the job, and the prolog's line is in slurmd's log."""
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
import unittest

from agent_support import HANG_S, LiveAgent, end_process, free_port, gpu_pids, query, samples_taken, wait_for
from devtools import demoted, require_tool, second_user
from test_status import BUILD, TARMAC

LOAD = BUILD / "sim" / "tarmac-sim-load"
SIM_LIB_DIR = BUILD / "sim"
SCENARIO = pathlib.Path(__file__).resolve().parents[2] / "sim" / "scenarios" / "a100x4-gpu0-only.toml"
PEERS = pathlib.Path(os.environ.get("TARMAC_PEERS", pathlib.Path.home() / ".cache" / "tarmac-peers"))
NVML_PLUGIN_DIR = PEERS / "x" / "slurm-wlm-nvml-plugin" / "usr" / "lib" / "x86_64-linux-gnu" / "slurm-wlm"
SLURM_PLUGIN_DIR = pathlib.Path("/usr/lib/x86_64-linux-gnu/slurm-wlm")
NODE = "tnode"

# slurmd in a private mount namespace whose /dev has nvidia0..N-1 and nvidiactl: an overlay of the
# real /dev (its submounts bound back in), so nothing outside the namespace changes.
DEV_OVERLAY = """#!/bin/sh
set -e
d=$1; n=$2; shift 2
mount --rbind /dev "$d/old"
mount -t overlay overlay -o "lowerdir=/dev,upperdir=$d/upper,workdir=$d/work" /dev
for s in pts shm mqueue; do
  if [ -d "$d/old/$s" ] && [ -d "/dev/$s" ]; then mount --rbind "$d/old/$s" "/dev/$s"; fi
done
i=0
while [ "$i" -lt "$n" ]; do mknod -m 666 "/dev/nvidia$i" c 195 "$i"; i=$((i + 1)); done
mknod -m 666 /dev/nvidiactl c 195 255
exec "$@"
"""


def idle_scenario(path):
    """The bundled a100x4 scenario without its load and processes (every GPU idle), with each
    GPU's CPU affinity this machine's CPUs."""
    text = SCENARIO.read_text().split("[[timeline]]")[0]
    text = text.replace('name = "a100x4-gpu0-only"', 'name = "slurm-a100x4"', 1)
    text = re.sub(r'(?m)^cpus = .*$', f'cpus = "0-{os.cpu_count() - 1}"', text)
    path.write_text(text)


class Cluster:
    """munged, slurmctld and slurmd on this machine, in DIR, on free ports; the agent on the same
    simulation. Everything is stopped by close(), which also ends any load left on the GPUs."""

    def __init__(self, user):
        self.procs = []
        self.names = []
        self.env = None
        self.agent = None
        self.user = user
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-slurmreal-"))
        try:
            self.start_all()
        except BaseException:
            self.close()
            raise

    def start_all(self):
        self.dir.chmod(0o755)
        d = self.dir
        self.map = d / "hpc-jobs"
        self.config = d / "tarmac.toml"
        self.config.write_text(f'[slurm]\njob_map_dir = "{self.map}"\nepilog_grace = "1s"\n'
                               f'[scheduler]\nlock_dir = "{d / "locks"}"\n')
        self.config.chmod(0o644)
        idle_scenario(d / "scenario.toml")
        self.agent = LiveAgent(str(d / "scenario.toml"), config=self.config.read_text())
        self.sim = self.agent.sim
        # The second user's loads register themselves in the simulation's state.
        state = pathlib.Path(self.sim.state)
        self.agent.dir.chmod(0o755)
        state.chmod(0o755)
        for sub in state.rglob("*"):
            if sub.is_dir():
                sub.chmod(0o1777)

        # munge: its key private, its socket in a folder everyone may enter but nobody else write.
        (d / "munge").mkdir(mode=0o700)
        (d / "sock").mkdir(mode=0o755)
        key = d / "munge" / "key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.socket = d / "sock" / "munge"
        self.start("munged", [require_tool("munged", "/usr/sbin/munged", "Debian: munge"), "-F", "--force",
                              f"--socket={self.socket}", f"--key-file={key}", f"--pid-file={d}/munge/pid",
                              f"--log-file={d}/munge/log", f"--seed-file={d}/munge/seed"])
        if not wait_for(self.socket.exists, timeout=HANG_S):
            raise AssertionError(f"munged did not start: {self.log('munged')}")

        # The hooks: links with the names slurm.conf's Prolog= and Epilog= take, behind a wrapper
        # that gives them the simulation (slurmd runs its scripts with an environment of its own).
        for hook in ("prolog", "epilog"):
            (d / f"tarmac-slurm-{hook}").symlink_to(TARMAC)
            wrapper = d / hook
            wrapper.write_text(f"#!/bin/sh\nexport TARMAC_NVML_LIB={SIM_LIB_DIR / 'libnvidia-ml.so.1'} "
                               f"TARMAC_SIM_STATE={self.sim.state}\n"
                               f"exec {d}/tarmac-slurm-{hook} --config {self.config}\n")
            wrapper.chmod(0o755)
        # The contrib plugin, where the second user's sbatch can read it (PluginDir must be readable
        # to every Slurm command, and the peers' cache is in root's home).
        (d / "plugins").mkdir(mode=0o755)
        shutil.copy2(NVML_PLUGIN_DIR / "gpu_nvml.so", d / "plugins" / "gpu_nvml.so")
        (d / "state").mkdir()
        (d / "spool").mkdir()
        self.jobs = d / "jobs"  # the jobs' output, and what they leave for the tests to see
        self.jobs.mkdir()
        self.jobs.chmod(0o1777)
        host = socket.gethostname().split(".")[0]
        ports = sorted({free_port() for _ in range(2)})
        if len(ports) < 2:
            ports = [free_port(), free_port()]
        self.conf = d / "slurm.conf"
        self.conf.write_text(f"""ClusterName=tarmactest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
SlurmdDebug=debug2
PluginDir={SLURM_PLUGIN_DIR}:{d}/plugins
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
GresTypes=gpu
PrologFlags=Alloc
Prolog={d}/prolog
Epilog={d}/epilog
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} Gres=gpu:4 State=UNKNOWN
PartitionName=gpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
""")
        (d / "gres.conf").write_text("AutoDetect=nvml\n")
        for f in ("slurm.conf", "gres.conf"):
            (d / f).chmod(0o644)
        self.env = self.sim.env({"SLURM_CONF": str(self.conf), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        self.start("slurmctld", [require_tool("slurmctld", "/usr/sbin/slurmctld", "Debian: slurmctld"), "-D", "-i"])
        for sub in ("old", "upper", "work"):
            (d / "dev" / sub).mkdir(parents=True)
        (d / "dev-overlay.sh").write_text(DEV_OVERLAY)
        slurmd_env = dict(self.env, LD_LIBRARY_PATH=str(SIM_LIB_DIR))
        # Under a sanitizer build the simulator library is instrumented and Slurm is not: the
        # sanitizer runtime is preloaded into slurmd (and so into slurmstepd), as into nvidia-smi.
        if os.environ.get("TARMAC_COMPAT_PRELOAD"):
            slurmd_env.update(LD_PRELOAD=os.environ["TARMAC_COMPAT_PRELOAD"],
                              ASAN_OPTIONS="detect_leaks=0:abort_on_error=0")
        self.start("slurmd", ["unshare", "--mount", "--propagation", "private", "sh", str(d / "dev-overlay.sh"),
                              str(d / "dev"), "4", require_tool("slurmd", "/usr/sbin/slurmd", "Debian: slurmd"),
                              "-D", "-N", NODE], env=slurmd_env)
        if not wait_for(lambda: self.node_state() in ("IDLE", "MIXED", "ALLOCATED") or
                        any(p.poll() is not None for p in self.procs), timeout=HANG_S):
            raise AssertionError(f"the node never came up: {self.scontrol('show', 'node', NODE)}\n"
                                 f"{self.log('slurmd')[-3000:]}")
        dead = [name for name, p in zip(self.names, self.procs) if p.poll() is not None]
        if dead:
            raise AssertionError(f"{', '.join(dead)} exited: " + "\n".join(self.log(n)[-2000:] for n in dead))

    def start(self, name, argv, env=None):
        out = open(self.dir / f"{name}.out", "w")
        self.procs.append(subprocess.Popen(argv, env=env or self.env, stdout=out,
                                           stderr=subprocess.STDOUT, cwd=self.dir))
        self.names = self.names + [name]
        out.close()

    def log(self, name):
        """The daemon's log file, else what it printed."""
        for f in (self.dir / f"{name}.log", self.dir / f"{name}.out"):
            if f.exists():
                return f.read_text(errors="replace")
        return ""

    def slurm(self, *argv, user=None, check=True):
        r = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=HANG_S, cwd="/tmp",
                           preexec_fn=demoted(user) if user else None)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: exit {r.returncode}: {r.stdout}{r.stderr}")
        return r

    def scontrol(self, *argv):
        return self.slurm("scontrol", *argv, check=False).stdout

    def node(self):
        """`scontrol show node` as a dict of its Key=Value fields."""
        text = self.scontrol("show", "node", NODE)
        fields = {}
        for m in re.finditer(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)", text, re.M):
            fields.setdefault(m.group(1), m.group(2).strip())
        return fields

    def node_state(self):
        return self.node().get("State", "").split("+")[0]

    def job(self, job_id):
        """The job's fields from `scontrol show job -d`, or {} once Slurm has forgotten it."""
        text = self.scontrol("show", "job", "-d", str(job_id))
        return {m.group(1): m.group(2) for m in re.finditer(r"(\w+)=(\S*)", text)}

    def submit(self, script, gres="gpu:2"):
        """sbatch as the second user; the job id."""
        r = self.slurm("sbatch", "--parsable", f"--gres={gres}", f"--output={self.jobs}/%j.out", "--chdir=/tmp",
                       "--wrap", script, user=self.user)
        return int(r.stdout.strip().split(";")[0])

    def output(self, job_id):
        f = self.jobs / f"{job_id}.out"
        return f.read_text(errors="replace") if f.exists() else ""

    def job_gpus(self, job_id):
        """The GPU indices Slurm gave the job (`GRES=gpu:2(IDX:1-2)`)."""
        m = re.search(r"IDX:([\d,\-]+)", self.scontrol("show", "job", "-d", str(job_id)))
        if not m:
            return None
        found = []
        for part in m.group(1).split(","):
            lo, _, hi = part.partition("-")
            found += range(int(lo), int(hi or lo) + 1)
        return found

    def close(self):
        if any(p.poll() is None for p in self.procs) and self.env is not None:
            # The jobs end (and their epilogs run) before the daemons stop.
            self.slurm("scancel", "--user", self.user.pw_name, check=False)
            wait_for(lambda: not self.slurm("squeue", "-h", check=False).stdout.strip(), timeout=30)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            end_process(p, timeout=15)
        # A job step's slurmstepd can outlive slurmd: whatever still runs with this cluster's
        # SLURM_CONF in its environment (Slurm's daemons pass it on) is this test's, and goes.
        if self.env is not None:
            mark = f"SLURM_CONF={self.conf}".encode() if hasattr(self, "conf") else None
            for pid in (int(p.name) for p in pathlib.Path("/proc").iterdir() if p.name.isdigit()):
                try:
                    if mark and mark in pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                        os.kill(pid, signal.SIGKILL)
                except (OSError, ProcessLookupError):
                    pass
        # Whatever the jobs left (the test failed before the epilog ran): the simulation's own pids.
        for gpu in range(4 if self.agent is not None else 0):
            for pid in gpu_pids(self.sim.state, gpu):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.agent is not None:
            self.agent.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def activity(metrics, gpu):
    """The GPU's class now, from tarmac_gpu_activity."""
    for line in metrics.splitlines():
        if line.startswith("tarmac_gpu_activity{") and f'gpu="{gpu}"' in line and line.endswith(" 1"):
            return re.search(r'class="([^"]+)"', line).group(1)
    return None


def hpc_jobs(metrics):
    """{gpu: hpc_job or None} from the DCGM_FI_DEV_GPU_UTIL series of /metrics."""
    found = {}
    for line in metrics.splitlines():
        if line.startswith("DCGM_FI_DEV_GPU_UTIL{"):
            gpu = int(re.search(r'gpu="(\d+)"', line).group(1))
            job = re.search(r'hpc_job="([^"]*)"', line)
            found.setdefault(gpu, set()).add(job.group(1) if job else None)
    return found


class Skipper:
    """What second_user() calls skipTest on, outside a test method."""

    def skipTest(self, reason):
        raise unittest.SkipTest(reason)


class RealSlurm(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("slurmd runs as root, and so do its Prolog and Epilog")
        for tool in ("sbatch", "srun", "scontrol", "scancel", "unshare"):
            require_tool(tool, hint="Debian: slurm-client, util-linux")
        if not (NVML_PLUGIN_DIR / "gpu_nvml.so").exists():
            require_tool("gpu_nvml.so", str(NVML_PLUGIN_DIR / "gpu_nvml.so"), "scripts/peers.sh fetches it")
        probe = subprocess.run(["unshare", "--mount", "sh", "-c",
                                "mount -t tmpfs none /mnt && mknod /mnt/x c 195 0"], capture_output=True, text=True)
        if probe.returncode != 0:
            raise unittest.SkipTest(f"no private mount namespace with device nodes here: {probe.stderr.strip()}")
        cls.cluster = Cluster(second_user(Skipper()))

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def setUp(self):
        self.c = self.cluster
        # Each test starts on an idle node: what an earlier test left is cancelled, a drain resumed.
        self.c.slurm("scancel", "--user", self.c.user.pw_name, check=False)
        if self.c.node().get("State", "").find("DRAIN") >= 0:
            self.c.scontrol("update", f"nodename={NODE}", "state=resume")
        self.assertTrue(wait_for(lambda: self.c.node().get("State") == "IDLE"), self.c.node())

    def wait_ended(self, job_id):
        """Waits until Slurm has run the job's epilog: the node is idle again, the job is done."""
        ok = wait_for(lambda: self.c.job(job_id).get("JobState", "COMPLETED") in ("COMPLETED", "CANCELLED", "FAILED")
                      and self.c.node_state() == "IDLE" and "COMPLETING" not in self.c.node().get("State", ""))
        self.assertTrue(ok, f"job {job_id}: {self.c.job(job_id)}; node: {self.c.node()}")

    def jobs_report(self, job_id):
        """The job's row of `tarmac report --by job --json` on the agent's store, once it is final:
        the job has left the mapping, and the store has samples taken after that (a flush writes
        everything pending, so the job's last sample is in by then)."""
        def mapped():
            return any(str(job_id) in f.read_text().split() for f in self.c.map.iterdir() if f.name.isdigit())
        self.assertTrue(wait_for(lambda: not mapped()))
        left_ms = time.time() * 1000
        db = self.c.agent.dir / "state" / "tarmac.db"
        found = {}

        def flushed():
            try:
                newest = query(str(db), "SELECT max(ts_ms) FROM gpu_sample")[0][0]
            except sqlite3.Error:
                return False
            return newest is not None and newest > left_ms
        self.assertTrue(wait_for(flushed))
        r = self.c.sim.run("report", "--by", "job", "--json", "--db", str(db), "--since", "1d")
        self.assertEqual(r.returncode, 0, r.stderr)
        found["rows"] = [j for j in json.loads(r.stdout)["jobs"] if j["job"] == str(job_id)]
        self.assertEqual(len(found["rows"]), 1, found)
        return found["rows"][0]

    def let_the_agent_record(self):
        """Waits for two more snapshots of the agent's (four GPU-samples each): the jobs the mapping
        holds now are then in at least two of its samples, a span of some length."""
        start = samples_taken(self.c.agent.port)
        self.assertTrue(wait_for(lambda: samples_taken(self.c.agent.port) >= start + 8))

    def test_1_slurmd_detects_the_scenarios_gpus_through_nvml(self):
        node = self.c.node()
        self.assertRegex(node.get("Gres", ""), r"^gpu:4(\(|$)", node)
        log = self.c.log("slurmd")
        self.assertIn("4 GPU system device(s) detected", log)
        for i, uuid in enumerate(re.findall(r'uuid = "(GPU-[^"]+)"', (self.c.dir / "scenario.toml").read_text())):
            self.assertIn(f"UUID: {uuid}", log)
            self.assertIn(f"Device File (minor number): /dev/nvidia{i}", log)

    def test_2_a_jobs_processes_and_metrics_carry_its_id_and_the_epilog_cleans_up(self):
        # The job's batch script starts two loads: one in its step (Slurm ends it at the job's end),
        # one that leaves the job's process tree (setsid) and outlives the job: the epilog's work.
        ready = self.c.jobs / "ready"
        script = (f"setsid -f {LOAD} --mem 2GiB --util 0 --name leftover; "
                  f"{LOAD} --mem 1GiB --util 60 --name trainer & "
                  f"while [ $({TARMAC} query --query-compute-apps=pid --format=csv,noheader | wc -l) -lt 4 ]; "
                  f"do sleep 0.1; done; touch {ready}; wait")
        job = self.c.submit(script)
        self.assertTrue(wait_for(ready.exists), f"the job's loads never showed: {self.c.job(job)} {self.c.output(job)}")
        gpus = self.c.job_gpus(job)
        self.assertEqual(len(gpus), 2, self.c.job(job))
        # The prolog's mapping, in dcgm-exporter's format.
        self.assertEqual({int(f.name): f.read_text().split() for f in self.c.map.iterdir() if f.name.isdigit()},
                         {g: [str(job)] for g in gpus})
        self.assertEqual((self.c.map / f".job-{job}").read_text(), f"user={self.c.user.pw_name}\npartition=gpu\n")
        # Now, as NVML has it (the agent's view lists processes at its process interval).
        status = json.loads(self.c.sim.run("status", "--json", "--direct").stdout)
        procs = {(g["index"], p["pid"]): p for g in status["gpus"] for p in g["processes"]}
        self.assertEqual({gpu for gpu, _ in procs}, set(gpus), procs)
        self.assertEqual({p["slurm_job_id"] for p in procs.values()}, {str(job)}, procs)
        self.assertEqual({p["name"] for p in procs.values()}, {"leftover", "trainer"})
        self.assertTrue(wait_for(lambda: hpc_jobs(self.c.agent.metrics()) ==
                                 {g: ({str(job)} if g in gpus else {None}) for g in range(4)}),
                        hpc_jobs(self.c.agent.metrics()))
        leftover = {pid for (_, pid), p in procs.items() if p["name"] == "leftover"}
        self.let_the_agent_record()

        self.c.slurm("scancel", str(job))
        self.wait_ended(job)
        self.assertTrue(wait_for(lambda: all(not gpu_pids(self.c.sim.state, g) for g in range(4))),
                        [gpu_pids(self.c.sim.state, g) for g in range(4)])
        self.assertEqual([f.name for f in self.c.map.iterdir() if f.name.isdigit() or f.name.startswith(".job-")], [])
        log = self.c.log("slurmd")
        for pid in leftover:
            self.assertRegex(log, rf"epilog success rc:0 output:[^\[]*pid {pid} \({self.c.user.pw_name}, [\w-]+\): ended",
                             "the epilog ended the holder that escaped the job")
        self.assertTrue(wait_for(lambda: hpc_jobs(self.c.agent.metrics()) == {g: {None} for g in range(4)}))
        self.assertEqual(self.c.node_state(), "IDLE")
        # The per-job report: the user and partition the prolog recorded, the job's GPUs, busy.
        row = self.jobs_report(job)
        self.assertEqual((row["user"], row["partition"], row["gpus"]), (self.c.user.pw_name, "gpu", sorted(gpus)), row)
        self.assertGreater(row["hours"]["busy"], 0, row)

    def test_3_a_gpu_held_by_no_job_drains_the_node_with_the_prologs_reason(self):
        squatter = subprocess.Popen([str(LOAD), "--mem", "3GiB", "--util", "0", "--name", "squatter"],
                                    env=self.c.sim.env({"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(end_process, squatter)
        self.assertTrue(wait_for(lambda: squatter.pid in gpu_pids(self.c.sim.state, 0)))
        job = self.c.submit("true", gres="gpu:4")
        self.assertTrue(wait_for(lambda: "DRAIN" in self.c.node().get("State", "")), self.c.node())
        node = self.c.node()
        self.assertTrue(node.get("Reason", "").startswith("Prolog error"), node)
        line = re.search(r"prolog failed: rc:1 output:(.*)", self.c.log("slurmd"))
        self.assertIsNotNone(line, self.c.log("slurmd")[-3000:])
        self.assertRegex(line.group(1), rf"^tarmac prolog: GPU 0: 3.0 GiB held by pid {squatter.pid} "
                         r"\(root, [\w-]+\) of no Slurm job$")
        # Slurm requeues the job, held until someone releases it.
        self.assertTrue(wait_for(lambda: (self.c.job(job).get("JobState"), self.c.job(job).get("Reason")) ==
                                 ("PENDING", "launch_failed_requeued_held")), self.c.job(job))
        self.assertIsNone(squatter.poll(), "a prolog never ends anything")
        self.assertEqual([f.name for f in self.c.map.iterdir() if f.name.isdigit()] if self.c.map.exists() else [], [])
        self.c.slurm("scancel", str(job))
        end_process(squatter)

    def test_4_a_gpu_that_stays_occupied_after_the_job_drains_the_node_with_the_epilogs_reason(self):
        ready = self.c.jobs / "ready4"
        job = self.c.submit(f"touch {ready}; sleep 600", gres="gpu:1")
        self.assertTrue(wait_for(ready.exists), self.c.job(job))
        gpu = self.c.job_gpus(job)[0]
        # Root's process of no job takes memory on the job's GPU while the job runs: not the job's
        # to end, and the next job must not get the GPU.
        squatter = subprocess.Popen([str(LOAD), "--mem", "2GiB", "--util", "0"],
                                    env=self.c.sim.env({"CUDA_VISIBLE_DEVICES": str(gpu),
                                                        "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(end_process, squatter)
        self.assertTrue(wait_for(lambda: squatter.pid in gpu_pids(self.c.sim.state, gpu)))
        self.c.slurm("scancel", str(job))
        self.assertTrue(wait_for(lambda: "DRAIN" in self.c.node().get("State", "")), self.c.node())
        self.assertTrue(self.c.node().get("Reason", "").startswith("Epilog error"), self.c.node())
        lines = re.findall(r"epilog failed: rc:1 output:(.*)", self.c.log("slurmd"))
        self.assertTrue(lines, self.c.log("slurmd")[-3000:])
        self.assertRegex(lines[-1], rf"^tarmac epilog: GPU {gpu} stays occupied: 2.0 GiB held by pid "
                         rf"{squatter.pid} \(root, [\w-]+\)")
        self.assertIsNone(squatter.poll(), "root's process of no job is not the job's leftover")
        end_process(squatter)

    def test_5_a_job_that_runs_nothing_on_its_gpu_is_reported_as_holding_it_idle(self):
        idle = self.c.submit("sleep 600", gres="gpu:1")
        busy = self.c.submit(f"{LOAD} --mem 1GiB --util 80", gres="gpu:1")
        self.assertTrue(wait_for(lambda: self.c.job_gpus(idle) and self.c.job_gpus(busy)))
        gpu = self.c.job_gpus(idle)[0]
        # The agent sees the GPU given to a job and unused: reserved-idle, as a lease makes it.
        self.assertTrue(wait_for(lambda: activity(self.c.agent.metrics(), gpu) == "reserved-idle"),
                        self.c.agent.metrics()[-2000:])
        self.assertTrue(wait_for(lambda: activity(self.c.agent.metrics(), self.c.job_gpus(busy)[0]) == "busy"))
        self.let_the_agent_record()
        self.c.slurm("scancel", str(idle), str(busy))
        self.wait_ended(idle)
        self.wait_ended(busy)
        row = self.jobs_report(idle)
        self.assertGreater(row["hours"]["reserved-idle"], 0, row)
        self.assertEqual(row["hours"]["busy"], 0, row)
        self.assertAlmostEqual(row["held_idle_gpu_hours"], row["hours"]["reserved-idle"] + row["hours"]["idle"] +
                               row["hours"]["holding"])
        r = self.c.sim.run("report", "--by", "job", "--db", str(self.c.agent.dir / "state" / "tarmac.db"),
                           "--since", "1d")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [l.split() for l in r.stdout.splitlines() if l.strip().split(" ")[0].isdigit()]
        order = [l[0] for l in lines]
        self.assertLess(order.index(str(idle)), order.index(str(busy)), r.stdout)  # most held idle first
        self.assertIn(self.c.user.pw_name, r.stdout)

    def test_6_idle_job_action_cancels_an_idle_batch_job_and_spares_an_interactive_one(self):
        # An agent of its own (on the same simulation) with the policy on and short bounds.
        d = self.c.dir / "idle-agent"
        d.mkdir()
        cfg = d / "tarmac.toml"
        cfg.write_text(f'[slurm]\njob_map_dir = "{self.c.map}"\nidle_job_action = "cancel"\n'
                       f'idle_job_warn_after = "2s"\nidle_job_cancel_after = "4s"\n'
                       f'[scheduler]\nlock_dir = "{self.c.dir / "locks"}"\nsocket = "{d / "sched.sock"}"\n')
        log = open(d / "agent.log", "w+")
        self.addCleanup(log.close)
        agent = subprocess.Popen([str(TARMAC), "--config", str(cfg), "agent", "--state-dir", str(d / "state"),
                                  "--listen", "off", "--interval", "500ms", "--process-interval", "1s"],
                                 env=self.c.env, stdout=subprocess.DEVNULL, stderr=log)
        self.addCleanup(end_process, agent)

        def agent_log():
            log.seek(0)
            return log.read()
        self.assertTrue(wait_for(lambda: "recording" in agent_log() or agent.poll() is not None), agent_log())
        # An interactive job (srun without a batch script: BatchFlag=0) that runs nothing on its GPU.
        interactive = subprocess.Popen(["srun", "--gres=gpu:1", "--chdir=/tmp", "sleep", "600"], env=self.c.env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       preexec_fn=demoted(self.c.user))
        self.addCleanup(end_process, interactive)
        batch = self.c.submit("sleep 600", gres="gpu:1")
        self.assertTrue(wait_for(lambda: self.c.job(batch).get("JobState") == "CANCELLED"),
                        f"{self.c.job(batch)}\n{agent_log()[-3000:]}")
        text = agent_log()
        self.assertRegex(text, rf"FIRING \[warning\] slurm_idle_job: .*Slurm job {batch} \({self.c.user.pw_name}, gpu\) "
                               r"has held GPUs \d idle for")
        self.assertRegex(text, rf"cancelled Slurm job {batch} \({self.c.user.pw_name}, gpu\): it held GPUs \d idle")
        jobs = [line for line in self.c.slurm("squeue", "-h", "-o", "%i %u", check=False).stdout.splitlines()]
        interactive_id = next((j.split()[0] for j in jobs if j.split()[0] != str(batch)), None)
        self.assertIsNotNone(interactive_id, jobs)
        self.assertTrue(wait_for(lambda: f"Slurm job {interactive_id} ({self.c.user.pw_name}, gpu) held GPUs"
                                 in agent_log() and "not cancelled: it is interactive" in agent_log()),
                        agent_log()[-3000:])
        self.assertIsNone(interactive.poll(), "the interactive job runs on")
        self.assertEqual(self.c.job(interactive_id).get("JobState"), "RUNNING")
        self.c.slurm("scancel", interactive_id)
        self.wait_ended(int(interactive_id))


if __name__ == "__main__":
    unittest.main()
