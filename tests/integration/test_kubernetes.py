"""End-to-end: the agent reads which pods the kubelet allocated the GPUs to (docs/kubernetes.md)
from a PodResourcesLister server built from the same .proto (tarmac-test-kubelet, serving a JSON
file as it is at each call), on the simulator. What it checks, as a cluster's operator would see
it: a pod's GPU carries dcgm-exporter's pod, namespace and container labels on its DCGM_FI_* series
and a tarmac_gpu_pod_info series, and /api/v1/gpus names the pod; a GPU allocated to a pod with
nothing running on it is reserved-idle (the pod that "went to lunch"), one not allocated is idle;
freeing the pod takes the labels and the class back; a kubelet that disappears is said once and
its last answer kept."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import unittest

from agent_support import HeldSim, LiveAgent, end_process, free_port, wait_for
from test_status import BUILD

FAKE_KUBELET = BUILD / "tests" / "unit" / "kube" / "tarmac-test-kubelet"


def pod(name, namespace, container, *ids, resource="nvidia.com/gpu"):
    return {"name": name, "namespace": namespace,
            "containers": [{"name": container, "devices": [{"resource_name": resource, "device_ids": list(ids)}]}]}


class Kubernetes(unittest.TestCase):
    SCENARIO = "a100x4-gpu0-only"  # GPU 0 busy with a process, GPUs 1-3 idle

    def setUp(self):
        if not FAKE_KUBELET.exists():
            self.skipTest("built without the kubelet client (TARMAC_KUBELET resolved off)")
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-kube-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.socket = self.dir / "pod-resources" / "kubelet.sock"
        self.socket.parent.mkdir(mode=0o750)
        self.pods = self.dir / "pods.json"
        self.kubelet = None

    def serve(self, pods):
        self.write(pods)
        self.kubelet = subprocess.Popen([str(FAKE_KUBELET), str(self.socket), str(self.pods)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(self.stop_kubelet)
        self.assertEqual(self.kubelet.stdout.readline().strip(), "ready")

    def stop_kubelet(self):
        if self.kubelet is not None:
            end_process(self.kubelet)
            self.kubelet.stdout.close()
            self.kubelet.stderr.close()
            self.kubelet = None

    def write(self, pods):
        tmp = self.pods.with_suffix(".tmp")
        tmp.write_text(json.dumps(pods))
        os.replace(tmp, self.pods)

    def agent(self):
        agent = LiveAgent(self.SCENARIO,
                          config=f'[kubernetes]\npod_resources_socket = "{self.socket}"\nrefresh = "1s"\n'
                                 '[http]\nhostname = "gpu-node-7"\n')
        self.addCleanup(agent.close)
        return agent

    def gpus(self, agent):
        status, _, body = agent.get("/api/v1/gpus")
        self.assertEqual(status, 200)
        return {g["index"]: g for g in json.loads(body)["gpus"]}

    def test_pods_label_their_gpus_and_an_unused_allocation_is_reserved_idle(self):
        uuids = {}
        probe = LiveAgent(self.SCENARIO)  # the scenario's UUIDs, as a user would read them
        try:
            for g in json.loads(probe.get("/api/v1/gpus")[2])["gpus"]:
                uuids[g["index"]] = g["uuid"]
        finally:
            probe.close()
        self.serve([pod("trainer-0", "ml", "main", uuids[0]),
                    pod("notebook", "alice", "jupyter", "nvidia1"),  # the device file's name, as GKE's plugin says
                    pod("nic-user", "net", "app", "eth0", resource="example.com/sriov")])
        agent = self.agent()

        self.assertTrue(wait_for(lambda: self.gpus(agent)[1]["activity"] == "reserved-idle"))
        gpus = self.gpus(agent)
        self.assertEqual(gpus[1]["pods"], [{"pod": "notebook", "namespace": "alice", "container": "jupyter"}])
        self.assertEqual(gpus[0]["pods"], [{"pod": "trainer-0", "namespace": "ml", "container": "main"}])
        self.assertNotEqual(gpus[0]["activity"], "reserved-idle")  # it works
        self.assertEqual(gpus[2]["activity"], "idle")              # no pod, nothing running
        self.assertEqual(gpus[2]["pods"], [])

        text = agent.metrics()
        util = {m.group(1): m.group(0) for m in re.finditer(r'^DCGM_FI_DEV_GPU_UTIL\{gpu="(\d)".*$', text, re.M)}
        self.assertIn('pod="notebook",namespace="alice",container="jupyter"', util["1"])
        self.assertIn('Hostname="gpu-node-7"', util["1"])  # the node's name, as the DaemonSet gives it
        self.assertIn('pod="trainer-0",namespace="ml",container="main"', util["0"])
        self.assertIn('pod="",namespace="",container=""', util["2"])  # no pod's, said as dcgm-exporter says it
        info = re.findall(r'^tarmac_gpu_pod_info\{gpu="(\d)".*pod="([^"]+)".*\} 1$', text, re.M)
        self.assertEqual(sorted(info), [("0", "trainer-0"), ("1", "notebook")])
        self.assertNotIn("nic-user", text)

        # The notebook is deleted: its GPU is plain idle again, and unlabelled.
        self.write([pod("trainer-0", "ml", "main", uuids[0])])
        self.assertTrue(wait_for(lambda: self.gpus(agent)[1]["activity"] == "idle"))
        self.assertEqual(self.gpus(agent)[1]["pods"], [])
        self.assertTrue(wait_for(lambda: "notebook" not in agent.metrics()))

        # The kubelet goes away (a restart): one line says so, and the allocation it last gave stands.
        self.stop_kubelet()
        self.assertTrue(wait_for(lambda: "kubernetes: the kubelet's socket" in agent.stderr()), agent.stderr())
        self.assertEqual(self.gpus(agent)[0]["pods"][0]["pod"], "trainer-0")
        self.assertIn(f"kubernetes: reading pod GPU allocations from {self.socket}", agent.stderr())

        # The store kept each pod's hold: `tarmac report --by job` lists the pods, the notebook's
        # GPU-hours all held idle, the trainer's busy.
        self.assertEqual(agent.stop(), 0)
        r = agent.sim.run("report", "--by", "job", "--json", "--db", str(agent.dir / "state" / "tarmac.db"),
                          "--since", "1d")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {j["job"]: j for j in json.loads(r.stdout)["jobs"]}
        self.assertEqual(sorted(rows), ["pod/alice/notebook", "pod/ml/trainer-0"])
        notebook, trainer = rows["pod/alice/notebook"], rows["pod/ml/trainer-0"]
        self.assertEqual(notebook["gpus"], [1])
        self.assertGreater(notebook["held_idle_gpu_hours"], 0)
        self.assertAlmostEqual(notebook["held_idle_gpu_hours"], notebook["gpu_hours"], places=6)
        self.assertEqual(trainer["gpus"], [0])
        self.assertEqual(trainer["held_idle_gpu_hours"], 0)
        self.assertGreater(trainer["gpu_hours"], 0)
        text = agent.sim.run("report", "--by", "job", "--db", str(agent.dir / "state" / "tarmac.db"), "--since", "1d")
        self.assertLess(text.stdout.index("pod/alice/notebook"), text.stdout.index("pod/ml/trainer-0"), text.stdout)

    def test_a_socket_anyone_could_have_made_is_not_believed(self):
        self.serve([pod("notebook", "alice", "jupyter", "1")])
        os.chmod(self.socket.parent, 0o777)  # anyone could have put this socket here
        agent = self.agent()
        self.assertTrue(wait_for(lambda: "writable by everyone" in agent.stderr()))
        self.assertEqual(self.gpus(agent)[1]["pods"], [])
        self.assertEqual(self.gpus(agent)[1]["activity"], "idle")

    def test_a_host_name_that_is_no_name_stops_the_agent(self):
        sim = HeldSim(self.SCENARIO)
        self.addCleanup(lambda: (sim.close(), sim.proc.stdout.close(), sim.proc.stderr.close()))
        for bad in ("node 7", 'a"b', "x" * 254):
            r = subprocess.run([str(BUILD / "tarmac"), "agent", "--state-dir", str(self.dir / "state"), "--listen",
                                f"127.0.0.1:{free_port()}", "--socket", "off", "--duration", "1s"],
                               env=sim.env({"TARMAC_HOSTNAME": bad}), capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("TARMAC_HOSTNAME", r.stderr)

    def test_check_config_says_where_pods_come_from(self):
        cfg = self.dir / "tarmac.toml"
        cfg.write_text(f'[kubernetes]\npod_resources_socket = "{self.socket}"\n')
        r = subprocess.run([str(BUILD / "tarmac"), "--config", str(cfg), "agent", "--check-config"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"kubernetes: pods' GPUs from {self.socket} every 5s", r.stdout)
        cfg.write_text('[kubernetes]\npod_resources_socket = "kubelet.sock"\n')
        r = subprocess.run([str(BUILD / "tarmac"), "--config", str(cfg), "agent", "--check-config"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("pod_resources_socket", r.stderr)


if __name__ == "__main__":
    unittest.main()
