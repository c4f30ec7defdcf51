"""`tarmac fleet` and `tarmac report --prometheus` (docs/fleet.md) against the real engine: three
agents on three simulated scenarios under distinct host names, one real Prometheus (Debian's)
scraping them each second with the rules `tarmac alerts --prometheus-rules` writes, and a second
one federating `tarmac:*` and the fleet's series from it, as a global Prometheus would.
`tarmac fleet --host` (the agents' own APIs) and `tarmac fleet --prometheus` (PromQL) must list the
same GPUs, on the same hosts, in the same classes, grounded first, with the pods and users each
agent knows; a target that is down, or an agent that does not answer, is named and the rest shown
(exit 1). The fleet report from either Prometheus must agree with each host's own report over the
same range, to within a recording interval and a scrape per GPU."""
import http.server
import json
import math
import pathlib
import shutil
import subprocess
import tempfile
import threading
import unittest
import time
import urllib.parse

from agent_support import LiveAgent, free_port, http_get, wait_for
from devtools import require_tool
from prometheus_support import PROMETHEUS, PROMTOOL, LivePrometheus
from test_status import TARMAC

# name: (scenario, GPUs). Classes that hold still while the test reads them: busy, idle, holding.
HOSTS = {"node-a": ("a100x4-gpu0-only", 4), "node-b": ("h100x2-log", 2), "node-c": ("holding-zombie", None)}
GROUNDED = ("holding", "reserved-idle", "idle")
JOB = "4711"  # Slurm's job on node-a's GPU 1, through the HPC job mapping: reserved-idle
# The recording rules' interval: four scrapes, so that a scrape a loaded machine misses does not
# leave an interval with one sample (which `increase` cannot read).
RECORD_S = 4
FEDERATED = ('{__name__=~"tarmac:.*"}', '{__name__=~"tarmac_gpu_(activity|idle_seconds|job_info|pod_info)|'
             'tarmac_process_info|tarmac_agent_samples_total|DCGM_FI_DEV_(GPU_UTIL|FB_USED|FB_FREE)|up",job="tarmac"}')


class Fleet(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_tool("prometheus", PROMETHEUS, hint="Debian: apt install prometheus")
        require_tool("promtool", PROMTOOL, hint="Debian: apt install prometheus")
        cls.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-fleet-"))
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        jobs = cls.dir / "hpc-jobs"
        jobs.mkdir()
        (jobs / "1").write_text(JOB + "\n")
        cls.agents = {}
        for host, (scenario, _) in HOSTS.items():
            config = f'[http]\nhostname = "{host}"\n[activity]\nholding_after = "1s"\n'
            if host == "node-a":
                config += f'[slurm]\njob_map_dir = "{jobs}"\n'
            agent = LiveAgent(scenario, config=config, extra=("--flush", "500ms"))
            cls.addClassCleanup(agent.close)
            cls.agents[host] = agent
        rules = subprocess.run([TARMAC, "alerts", "--prometheus-rules", "--record-interval", f"{RECORD_S}s", "-o",
                                str(cls.dir / "rules.yml")], capture_output=True, text=True, timeout=60)
        assert rules.returncode == 0, rules.stderr
        checked = subprocess.run([PROMTOOL, "check", "rules", str(cls.dir / "rules.yml")], capture_output=True,
                                 text=True, timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        cls.dead = free_port()  # a target nobody serves
        cls.other_dead = free_port()  # another exporter's, down: none of tarmac's business
        targets = ", ".join(f'"127.0.0.1:{a.port}"' for a in cls.agents.values())
        cls.prometheus = LivePrometheus(cls.dir, f"""\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
rule_files: ["{cls.dir / 'rules.yml'}"]
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
        (cls.dir / "global").mkdir()
        matches = "\n".join(f"        - '{m}'" for m in FEDERATED)
        cls.global_prometheus = LivePrometheus(cls.dir / "global", f"""\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: federate
    honor_labels: true
    metrics_path: /federate
    params:
      "match[]":
{matches}
    static_configs:
      - targets: ["127.0.0.1:{cls.port}"]
""")
        cls.addClassCleanup(cls.global_prometheus.close)

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

    def query(self, port, promql):
        status, _, body = http_get(port, "/api/v1/query?" + urllib.parse.urlencode({"query": promql}), timeout=5)
        return json.loads(body)["data"]["result"] if status == 200 else []

    def recorded_past(self, port, t):
        """Whether the Prometheus at PORT holds every GPU's recorded seconds evaluated after T."""
        try:
            got = self.query(port, "count(timestamp(tarmac:gpu_activity_seconds:increase) > %d)" % t)
        except OSError:
            return False
        return bool(got) and int(got[0]["value"][1]) == len(self.agents_view())

    def report(self, *args):
        r = subprocess.run([TARMAC, "--json", "report", *args], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def own_reports(self, since, until):
        """{(host, gpu): {class: hours}} and {job: held-idle hours} from each agent's own store."""
        hours, jobs = {}, {}
        for host, agent in self.agents.items():
            db = str(agent.dir / "state" / "tarmac.db")
            doc = self.report("--db", db, "--since", f"@{since}", "--until", f"@{until}")
            for g in doc["gpus"]:
                hours[(host, g["gpu"])] = g["hours"]
            for j in self.report("--db", db, "--since", f"@{since}", "--until", f"@{until}", "--by", "job")["jobs"]:
                jobs[j["job"]] = j["held_idle_gpu_hours"]
        return hours, jobs

    def assert_reports_agree(self, mine, theirs, tolerance_h, what):
        self.assertEqual(set(mine), set(theirs), what)
        for key, classes in mine.items():
            for cls, h in classes.items():
                if cls == "unrecorded":
                    continue
                self.assertLessEqual(abs(h - theirs[key].get(cls, 0)), tolerance_h,
                                     f"{what}: {key} {cls}: {h * 3600:.1f} s against {theirs[key].get(cls, 0) * 3600:.1f} s")

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
        # Prometheus lags the agents by a scrape, and scrapes the dead target on its own schedule
        # (its first failed scrape is what makes it "down"): wait until it has seen both.
        def settled():
            _, _, err, view = via_prometheus()
            return view == expected and f"127.0.0.1:{self.dead}" in err
        self.assertTrue(wait_for(settled), via_prometheus())
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

    def test_the_fleet_report_agrees_with_each_hosts_own_report_through_federation_too(self):
        self.assertTrue(wait_for(lambda: "holding" in self.agents_view().values()), self.agents_view())
        self.assertTrue(wait_for(lambda: self.agents_view()[("node-a", 1)] == "reserved-idle"), self.agents_view())
        self.assertTrue(wait_for(lambda: self.recorded_past(self.port, 0)), self.prometheus.log_text())
        # A range the classes held still through, recorded by both Prometheus servers.
        since = math.ceil(time.time()) + 1
        until = since + 5 * RECORD_S
        for prom in (self.prometheus, self.global_prometheus):
            self.assertTrue(wait_for(lambda: self.recorded_past(prom.port, until + RECORD_S), timeout=60),
                            prom.log_text())
        range_h = (until - since) / 3600
        # ... and by every agent's store (flushed each 500 ms).
        self.assertTrue(wait_for(lambda: all(
            sum(h for c, h in g.items() if c != "unrecorded") >= range_h - 1 / 3600
            for g in self.own_reports(since, until)[0].values())), self.own_reports(since, until))
        own, own_jobs = self.own_reports(since, until)
        # One recording interval and one scrape of difference per GPU (where each puts the edges).
        tolerance_h = (RECORD_S + 1) / 3600
        for prom in (self.prometheus, self.global_prometheus):
            doc = self.report("--prometheus", prom.url, "--since", f"@{since}", "--until", f"@{until}", "--price", "3")
            fleet = {(g["host"], g["gpu"]): g["hours"] for g in doc["gpus"]}
            self.assert_reports_agree(own, fleet, tolerance_h, prom.url)
            held = {j["job"]: j["held_idle_gpu_hours"] for j in doc["jobs"]}
            self.assertEqual(set(held), set(own_jobs), doc["jobs"])
            self.assertLessEqual(abs(held[JOB] - own_jobs[JOB]), tolerance_h, (held, own_jobs))
            # The holder of node-c's memory is a user whose GPU-hours are all holding.
            users = {u["user"]: u["hours"] for u in doc["users"]}
            self.assertTrue(any(abs(h["holding"] - range_h) <= tolerance_h for h in users.values()), users)
            hosts = {h["host"]: h for h in doc["hosts"]}
            self.assertEqual(set(hosts), set(HOSTS))
            self.assertEqual(hosts["node-b"]["gpu_count"], 2)
            self.assertEqual(doc["kind"], "fleet-report")
            self.assertAlmostEqual(doc["fleet"]["idle_cost"], 3 * sum(
                h["idle"] + h["reserved-idle"] for h in fleet.values()), places=6)
            # The same, by host, as a table.
            text = subprocess.run([TARMAC, "report", "--prometheus", prom.url, "--since", f"@{since}", "--until",
                                   f"@{until}", "--by", "host"], capture_output=True, text=True, timeout=60)
            self.assertEqual(text.returncode, 0, text.stderr)
            self.assertIn("on 3 hosts", text.stdout)
            self.assertEqual(sum(line.startswith("  node-") for line in text.stdout.splitlines()), 3, text.stdout)

        # The global Prometheus has the fleet too, and the dead target through the federated `up`.
        rc, doc, err = self.fleet("--prometheus", self.global_prometheus.url)
        self.assertEqual({(g["host"], g["gpu"]): g["activity"] for g in doc["gpus"]}, self.agents_view())
        self.assertEqual(rc, 1)
        self.assertIn(f"target 127.0.0.1:{self.dead} (job tarmac) is down", err)

    def test_report_prometheus_refuses_what_does_not_apply(self):
        for args in (("--by", "pod"), ("--html", "x.html"), ("--db", "x.db"), ("--since", "500d"),
                     ("--timeout", "0s"), ("--since", "yesterday")):
            r = subprocess.run([TARMAC, "report", "--prometheus", self.url, *args], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertTrue(r.stderr.startswith("tarmac: "), r.stderr)
        for url in ("ftp://x", ""):
            r = subprocess.run([TARMAC, "report", "--prometheus", url], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2, (url, r.stderr))
            self.assertIn("--prometheus", r.stderr)
        r = subprocess.run([TARMAC, "report", "--prometheus", f"http://127.0.0.1:{self.dead}", "--timeout", "2s"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 3, r.stderr)
        # Prometheus' own reason for refusing a query reaches the user, escaped.
        class Refusing(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps({"status": "error", "errorType": "execution",
                                   "error": "query processing would load too many samples \x1b[2J"}).encode()
                self.send_response(422)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        r = subprocess.run([TARMAC, "report", "--prometheus", f"http://127.0.0.1:{server.server_port}"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("answered HTTP 422: query processing would load too many samples", r.stderr)
        self.assertNotIn("\x1b", r.stderr)
        for bad in ("1s", "90m", "1500ms", "soon"):
            r = subprocess.run([TARMAC, "alerts", "--prometheus-rules", "--record-interval", bad], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 2, (bad, r.stderr))

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
