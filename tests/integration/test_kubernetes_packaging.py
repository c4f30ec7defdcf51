"""The Kubernetes packaging (packaging/kubernetes, docs/kubernetes.md) read as kubectl and the
container build would read it: every manifest parses and is consistent with the others (the
Service selects the DaemonSet's pods, the ServiceMonitor the Service, every mount has its volume,
the kubelet's socket is mounted read-only where the configuration looks for it), the DaemonSet
asks for what the issue asks (hostPID, system-node-critical, every GPU without requesting one),
the ConfigMap's tarmac.toml passes the agent's own `--check-config`, and the image's runtime
packages provide every library the binary links. No cluster or container engine runs here: what
they would refuse is checked by reading, and the image is not built."""
import pathlib
import re
import shutil
import subprocess
import tempfile
import unittest

import yaml

from test_status import BUILD, TARMAC

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBE = ROOT / "packaging" / "kubernetes"
SOCKET_DIR = "/var/lib/kubelet/pod-resources"


def manifests():
    """{kind: document} of every manifest the kustomization lists."""
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    out = {}
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((KUBE / name).read_text()):
            out[doc["kind"]] = doc
    return kustomization, out


class KubernetesPackaging(unittest.TestCase):
    def setUp(self):
        self.kustomization, self.docs = manifests()
        self.ds = self.docs["DaemonSet"]
        self.pod = self.ds["spec"]["template"]["spec"]
        self.container = self.pod["containers"][0]

    def test_the_kustomization_lists_every_manifest_and_all_are_in_one_namespace(self):
        listed = set(self.kustomization["resources"])
        self.assertEqual(listed, {p.name for p in KUBE.glob("*.yaml")} - {"kustomization.yaml"})
        self.assertEqual(set(self.docs), {"Namespace", "ConfigMap", "DaemonSet", "Service", "ServiceMonitor"})
        for kind, doc in self.docs.items():
            self.assertIn("apiVersion", doc, kind)
            if kind != "Namespace":
                self.assertEqual(doc["metadata"]["namespace"], self.docs["Namespace"]["metadata"]["name"], kind)

    def test_the_daemonset_sees_every_gpu_and_the_hosts_processes_without_requesting_a_gpu(self):
        self.assertTrue(self.pod["hostPID"])
        self.assertEqual(self.pod["priorityClassName"], "system-node-critical")
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in self.container["env"]}
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], "all")
        # Series are labelled with the node's name, not the pod's.
        self.assertEqual(env["TARMAC_HOSTNAME"], {"fieldRef": {"fieldPath": "spec.nodeName"}})
        self.assertNotIn("nvidia.com/gpu", yaml.safe_dump(self.container.get("resources", {})))
        self.assertEqual(self.ds["spec"]["selector"]["matchLabels"],
                         {k: v for k, v in self.ds["spec"]["template"]["metadata"]["labels"].items()
                          if k in self.ds["spec"]["selector"]["matchLabels"]})
        sc = self.container["securityContext"]
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertIn("ALL", sc["capabilities"]["drop"])
        self.assertNotIn("privileged", sc)

    def test_the_kubelets_socket_is_mounted_read_only_and_every_mount_has_its_volume(self):
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        for m in self.container["volumeMounts"]:
            self.assertIn(m["name"], volumes, m)
        pr = [m for m in self.container["volumeMounts"] if m["mountPath"] == SOCKET_DIR]
        self.assertEqual(len(pr), 1)
        self.assertTrue(pr[0]["readOnly"])
        self.assertEqual(volumes[pr[0]["name"]]["hostPath"]["path"], SOCKET_DIR)
        # The configuration is the ConfigMap, where the arguments look for it.
        config = [m for m in self.container["volumeMounts"] if volumes[m["name"]].get("configMap")]
        self.assertEqual(len(config), 1)
        self.assertEqual(volumes[config[0]["name"]]["configMap"]["name"], self.docs["ConfigMap"]["metadata"]["name"])
        args = self.container["args"]
        self.assertEqual(args[args.index("--config") + 1], config[0]["mountPath"] + "/tarmac.toml")

    def test_the_configmaps_configuration_passes_the_agents_check_and_matches_the_pod(self):
        text = self.docs["ConfigMap"]["data"]["tarmac.toml"]
        d = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-kpkg-"))
        self.addCleanup(shutil.rmtree, d, True)
        (d / "tarmac.toml").write_text(text)
        # The pod's own arguments, with the file where this test put it.
        args = list(self.container["args"])
        args[args.index("--config") + 1] = str(d / "tarmac.toml")
        r = subprocess.run([TARMAC, *args, "--check-config"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        port = next(p["containerPort"] for p in self.container["ports"] if p["name"] == "metrics")
        self.assertIn(f"http: http://0.0.0.0:{port}/", r.stdout)
        self.assertIn("scheduler: off", r.stdout)
        self.assertRegex(r.stdout, rf"kubernetes: (pods' GPUs from {SOCKET_DIR}/kubelet.sock|off \(this build)")
        state = re.search(r'^state_dir = "([^"]+)"', text, re.M).group(1)
        self.assertIn(state, [m["mountPath"] for m in self.container["volumeMounts"]])
        for probe in ("livenessProbe", "readinessProbe"):
            self.assertEqual(self.container[probe]["httpGet"]["path"], "/healthz")
            self.assertEqual(self.container[probe]["httpGet"]["port"], "metrics")

    def test_the_service_selects_the_pods_and_the_servicemonitor_the_service(self):
        svc, sm = self.docs["Service"], self.docs["ServiceMonitor"]
        pod_labels = self.ds["spec"]["template"]["metadata"]["labels"]
        for k, v in svc["spec"]["selector"].items():
            self.assertEqual(pod_labels.get(k), v, k)
        ports = {p["name"] for p in svc["spec"]["ports"]}
        self.assertIn(svc["spec"]["ports"][0]["targetPort"], [p["name"] for p in self.container["ports"]])
        for k, v in sm["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(svc["metadata"]["labels"].get(k), v, k)
        self.assertIn(svc["metadata"]["namespace"], sm["spec"]["namespaceSelector"]["matchNames"])
        for e in sm["spec"]["endpoints"]:
            self.assertIn(e["port"], ports)
            # The workload's pod/namespace/container labels must survive the scrape.
            self.assertTrue(e["honorLabels"])

    def test_the_image_builds_the_container_preset_and_ships_every_library_it_links(self):
        text = (KUBE / "Containerfile").read_text()
        self.assertIn("cmake --preset container", text)
        self.assertIn("scripts/deps.sh --kubelet", text)
        presets = yaml.safe_load((ROOT / "CMakePresets.json").read_text())  # JSON is YAML
        container = next(p for p in presets["configurePresets"] if p["name"] == "container")
        self.assertEqual(container["inherits"], "release")
        self.assertEqual(container["cacheVariables"]["TARMAC_KUBELET"], "ON")
        # gRPC's shared libraries use the shared C++ runtime: one copy of it in the process.
        self.assertEqual(container["cacheVariables"]["TARMAC_STATIC_RUNTIME"], "OFF")
        self.assertIn("build-container/tarmac", text)
        runtime = text[text.rindex("FROM "):]
        packages = set(re.findall(r"\b(lib[a-z0-9+.-]+)\b", runtime.split("&&")[1]))
        if not shutil.which("dpkg") or not shutil.which("apt-cache"):
            self.skipTest("needs Debian's dpkg and apt-cache")
        # What the runtime packages bring, with their dependencies.
        deps = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                               "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *packages],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(deps.returncode, 0, deps.stderr)
        provided = {line.strip().split(":")[0] for line in deps.stdout.splitlines() if not line.startswith(" ")}
        provided |= {line.split("Depends:")[1].strip().split(":")[0] for line in deps.stdout.splitlines()
                     if "Depends:" in line}
        # Every library the dev build links (the container build links the same) must come from one
        # of them.
        ldd = subprocess.run(["ldd", str(BUILD / "tarmac")], capture_output=True, text=True, timeout=60)
        libs = re.findall(r"=> (/\S+)", ldd.stdout)
        self.assertTrue(libs, ldd.stdout)
        static = ("libc.so", "libm.so", "ld-linux", "libasan", "libubsan")  # the base image's, the sanitizers'

        missing = []
        for lib in libs:
            if any(pathlib.Path(lib).name.startswith(s) for s in static):
                continue
            owner = subprocess.run(["dpkg", "-S", str(pathlib.Path(lib).resolve())], capture_output=True, text=True)
            if owner.returncode != 0:
                owner = subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True)
            pkg = owner.stdout.split(":")[0]
            if pkg not in provided:
                missing.append(f"{lib} ({pkg or 'no package'})")
        self.assertEqual(missing, [], f"not in the image's runtime packages: {packages}")


if __name__ == "__main__":
    unittest.main()
