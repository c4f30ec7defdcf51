"""`tarmac fleet` (docs/fleet.md) against the real engine: three agents on three simulated
scenarios under distinct host names, and one real Prometheus (Debian's) scraping them each second.
`tarmac fleet --host` (the agents' own APIs) and `tarmac fleet --prometheus` (PromQL) must list the
same GPUs, on the same hosts, in the same classes, grounded first, with the pods and users each
agent knows; a target that is down, or an agent that does not answer, is named and the rest shown
(exit 1)."""
import json
import pathlib
import shutil
import subprocess
import tempfile
import unittest
import urllib.parse

from agent_support import LiveAgent, free_port, http_get, wait_for
from devtools import require_tool
from prometheus_support import PROMETHEUS, LivePrometheus
from test_status import TARMAC

# name: (scenario, GPUs). Classes that hold still while the test reads them: busy, idle, holding.
HOSTS = {"node-a": ("a100x4-gpu0-only", 4), "node-b": ("h100x2-log", 2), "node-c": ("holding-zombie", None)}
GROUNDED = ("holding", "reserved-idle", "idle")


class Fleet(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_tool("prometheus", PROMETHEUS, hint="Debian: apt install prometheus")
        cls.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-fleet-"))
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        cls.agents = {}
        for host, (scenario, _) in HOSTS.items():
            agent = LiveAgent(scenario, config=f'[http]\nhostname = "{host}"\n[activity]\nholding_after = "1s"\n')
            cls.addClassCleanup(agent.close)
            cls.agents[host] = agent
        cls.dead = free_port()  # a target nobody serves
        cls.other_dead = free_port()  # another exporter's, down: none of tarmac's business
        targets = ", ".join(f'"127.0.0.1:{a.port}"' for a in cls.agents.values())
        cls.prometheus = LivePrometheus(cls.dir, f"""\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: tarmac
    static_configs:
      - targets: [{targets}, "127.0.0.1:{cls.dead}"]
  - job_name: other-exporter
    static_configs:
      - targets: ["127.0.0.1:{cls.other_dead}"]
""")
        cls.addClassCleanup(cls.prometheus.close)
        cls.port, cls.url = cls.prometheus.port, cls.prometheus.url

    def fleet(self, *args):
        r = subprocess.run([TARMAC, "--json", "fleet", *args], capture_output=True, text=True, timeout=120)
        self.assertIn(r.returncode, (0, 1), r.stderr)
        return r.returncode, json.loads(r.stdout), r.stderr

    def agents_view(self):
        """{(host, gpu): activity} as each agent's own API has it now."""
        out = {}
        for host, agent in self.agents.items():
            for g in json.loads(agent.get("/api/v1/gpus")[2])["gpus"]:
                out[(host, g["index"])] = g["activity"]
        return out

    def prometheus_up(self):
        try:
            status, _, body = http_get(self.port, "/api/v1/query?" + urllib.parse.urlencode(
                {"query": "count(tarmac_gpu_activity == 1)"}), timeout=5)
        except OSError:
            return False
        result = json.loads(body)["data"]["result"] if status == 200 else []
        return bool(result) and int(result[0]["value"][1]) == len(self.agents_view())

    def test_the_agents_and_prometheus_show_the_same_fleet_grounded_first(self):
        # Classes settle (holding needs its second of 0 %), then every GPU is in Prometheus.
        self.assertTrue(wait_for(lambda: "holding" in self.agents_view().values()), self.agents_view())
        self.assertTrue(wait_for(self.prometheus_up), self.prometheus.log_text())
        expected = self.agents_view()

        rc, direct, err = self.fleet(*[x for a in self.agents.values() for x in ("--host", f"127.0.0.1:{a.port}")])
        self.assertEqual(rc, 0, err)
        self.assertEqual({(g["host"], g["gpu"]): g["activity"] for g in direct["gpus"]}, expected)

        def via_prometheus():
            rc, doc, err = self.fleet("--prometheus", self.url)
            return rc, doc, err, {(g["host"], g["gpu"]): g["activity"] for g in doc["gpus"]}
        # Prometheus lags the agents by a scrape: wait until it has seen what they show.
        self.assertTrue(wait_for(lambda: via_prometheus()[3] == expected), via_prometheus()[3])
        rc, doc, err, _ = via_prometheus()
        self.assertEqual(rc, 1, "the dead target is a problem")
        self.assertIn(f"target 127.0.0.1:{self.dead} (job tarmac) is down", err)
        self.assertNotIn(str(self.other_dead), err)

        for listing in (direct["gpus"], doc["gpus"]):
            ranks = [0 if g["activity"] in GROUNDED else 1 for g in listing]
            self.assertEqual(ranks, sorted(ranks), listing)
            holding = [g for g in listing if g["activity"] == "holding"]
            self.assertTrue(holding and all(g["users"] for g in holding), holding)
            by_host = {g["host"] for g in listing}
            self.assertEqual(by_host, set(HOSTS))
            b = [g for g in listing if g["host"] == "node-b"]
            self.assertTrue(all(g["model"].startswith("NVIDIA H100") for g in b), b)
        # Utilization is DCGM_FI_DEV_GPU_UTIL's: below busy (30 %) on the grounded ones, and read
        # for every GPU.
        for g in doc["gpus"]:
            self.assertIsNotNone(g["util_pct"], g)
            if g["activity"] in GROUNDED:
                self.assertLess(g["util_pct"], 30, g)

        text = subprocess.run([TARMAC, "fleet", "--prometheus", self.url], capture_output=True, text=True, timeout=60)
        first = text.stdout.splitlines()[3]
        self.assertIn("holding", first, text.stdout)
        self.assertIn(f"{len(expected)} GPUs on 3 hosts", text.stdout)

    def test_an_agent_that_does_not_answer_is_named_and_the_rest_shown(self):
        rc, doc, err = self.fleet("--host", f"127.0.0.1:{self.agents['node-a'].port}", "--host",
                                  f"127.0.0.1:{self.dead}", "--timeout", "2s")
        self.assertEqual(rc, 1)
        self.assertIn(f"agent 127.0.0.1:{self.dead}", err)
        self.assertEqual({g["host"] for g in doc["gpus"]}, {"node-a"})
        r = subprocess.run([TARMAC, "fleet", "--host", f"127.0.0.1:{self.dead}", "--timeout", "2s"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("no agent answered", r.stderr)

    def test_one_source_and_sane_flags(self):
        for args in ((), ("--host", "a:1", "--prometheus", "http://b:2"), ("--host", "a:1", "--timeout", "forever"),
                     ("--prometheus", "ftp://x")):
            r = subprocess.run([TARMAC, "fleet", *args], capture_output=True, text=True, timeout=60)
            self.assertIn(r.returncode, (2, 3), (args, r.stderr))
            self.assertTrue(r.stderr.startswith("tarmac: "), r.stderr)


if __name__ == "__main__":
    unittest.main()
