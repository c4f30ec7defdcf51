"""End-to-end tests of the agent's HTTP endpoint (docs/metrics.md): /metrics through promtool's
linter and a real Prometheus server (the PromQL of Grafana dashboard 12239 and of
packaging/grafana/tarmac.json), malformed and oversized requests over raw sockets, and --listen
errors. promtool and prometheus are Debian's `prometheus` package (2.42; PROMTOOL= and PROMETHEUS=
in the environment name others); the tests that need them skip when they are absent, and fail
when they are absent in CI (devtools.require_tool)."""
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.parse

from agent_support import HeldSim, LiveAgent, end_process, free_port, http_get, wait_for
from devtools import require_tool
from prometheus_support import PROMETHEUS, LivePrometheus
from test_status import TARMAC

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
PROMTOOL = os.environ.get("PROMTOOL") or shutil.which("promtool") or "/usr/bin/promtool"

# dcgm-exporter's labels, which tarmac keeps on DCGM_FI_* for drop-in compatibility.
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
TARMAC_GPU_LABELS = {"gpu", "uuid", "pci_bus_id", "hostname"}
# The only two complaints promtool's linter may make, and only about a DCGM_FI_* metric: the names
# are dcgm-exporter's, and dashboards (12239 and others) depend on them.
ALLOWED_LINT = [
    re.compile(r"^(DCGM_FI_[A-Z0-9_]+) label names should be written in 'snake_case' not 'camelCase'$"),
    re.compile(r'^(DCGM_FI_[A-Z0-9_]+) counter metrics should have "_total" suffix$'),
    re.compile(r"^(DCGM_FI_[A-Z0-9_]+) metric name should not include type 'counter'$"),  # ..._PCIE_REPLAY_COUNTER
]

A100_UTIL = [96, 94, 95, 93]          # docs/simulator.md, a100x4-balanced
A100_USED_MIB = [38900, 38850, 39010, 38790]
A100_TEMP = [68, 67, 69, 66]
A100_POWER = [250, 248, 251, 247]


def raw_request(port, data, timeout=20):
    """Sends DATA on a fresh connection and reads until the server closes (or goes quiet after an
    answer). Returns the bytes received; a reset after the answer is tolerated (the answer counts)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    buf = b""
    try:
        if data:
            s.sendall(data)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            if b"\r\n\r\n" in buf:
                s.settimeout(1.0)
    except socket.timeout:
        pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    return buf


def status_of(response):
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", response)
    return int(m.group(1)) if m else None


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*')


def parse_exposition(text):
    """Prometheus text format -> (samples [(name, {labels}, float)], {name: type}). Raises
    AssertionError on a line it cannot read."""
    samples, types = [], {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3]
            continue
        m = SAMPLE.match(line)
        if not m:
            raise AssertionError(f"line {n} is not a sample: {line!r}")
        labels = {}
        if m.group(2):
            rest = m.group(2)
            pos = 0
            while pos < len(rest):
                lm = LABEL.match(rest, pos)
                if not lm:
                    raise AssertionError(f"line {n}: bad labels at {rest[pos:]!r}")
                labels[lm.group(1)] = lm.group(2)
                pos = lm.end()
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples, types


def promtool_problems(text):
    """Runs `promtool check metrics` on TEXT; returns (exit code, complaints that are not allowed,
    allowed complaints)."""
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    bad, allowed = [], []
    for line in lines:
        (allowed if any(p.match(line) for p in ALLOWED_LINT) else bad).append(line)
    if r.returncode not in (0, 3):          # 1: a parse error ("error while linting: ...")
        bad.insert(0, f"promtool exit {r.returncode}")
    if r.returncode == 0 and lines:
        bad.insert(0, "promtool exit 0 but printed complaints")
    if r.returncode == 3 and not allowed and not bad:
        bad.append("promtool exit 3 without a complaint")
    return r.returncode, bad, allowed


class MetricsFormat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.live = LiveAgent("a100x4-balanced")
        cls.addClassCleanup(cls.live.close)

    def live_metrics(self):
        # Wait for a sample of every GPU (the first scrape can come before the first snapshot).
        text = ""
        def ready():
            nonlocal text
            text = self.live.metrics()
            return len(re.findall(r"^DCGM_FI_DEV_GPU_UTIL\{", text, re.M)) == 4
        self.assertTrue(wait_for(ready, timeout=20, step=0.2), text[-2000:])
        return text

    def test_promtool_check_metrics_allows_only_dcgm_naming(self):
        require_tool("promtool", PROMTOOL, hint="Debian: apt install prometheus")
        text = self.live_metrics()
        code, bad, allowed = promtool_problems(text)
        self.assertEqual(bad, [], f"promtool check metrics (exit {code}) complains beyond dcgm-exporter's naming")
        # The allowance is used for what it exists for, and only that (sanity of the filter).
        self.assertTrue(all(a.startswith("DCGM_FI_") for a in allowed), allowed)

    def test_labels_and_types(self):
        samples, types = parse_exposition(self.live_metrics())
        names = {s[0] for s in samples}
        self.assertTrue(any(n.startswith("tarmac_") for n in names), names)
        for name, labels, _ in samples:
            with self.subTest(metric=name):
                if name.startswith("DCGM_FI_"):
                    self.assertEqual(set(labels), DCGM_LABELS)
                    self.assertEqual(labels["device"], f"nvidia{labels['gpu']}")
                    self.assertEqual(labels["modelName"], "NVIDIA A100-SXM4-40GB")
                elif name.startswith("tarmac_"):
                    self.assertTrue(all(re.fullmatch(r"[a-z_][a-z0-9_]*", l) for l in labels), labels)
                    if "gpu" in labels:
                        self.assertLessEqual(TARMAC_GPU_LABELS, set(labels))
                    if types.get(name) == "counter":
                        self.assertTrue(name.endswith("_total"), name)
                else:
                    self.fail(f"unexpected metric family {name}")
                self.assertIn(name, types, "no # TYPE")
        util = {l["gpu"]: v for n, l, v in samples if n == "DCGM_FI_DEV_GPU_UTIL"}
        self.assertEqual(util, {str(i): float(u) for i, u in enumerate(A100_UTIL)})
        used = {l["gpu"]: v for n, l, v in samples if n == "DCGM_FI_DEV_FB_USED"}
        self.assertEqual(used, {str(i): float(u) for i, u in enumerate(A100_USED_MIB)})


    def test_history_and_report_read_the_store(self):
        # The agent flushes every 5 s: wait for recorded samples of every GPU.
        body = {}
        def recorded():
            nonlocal body
            status, _, text = self.live.get("/api/v1/history?since=5m&step=1s")
            body = json.loads(text) if status == 200 else {}
            return len(body.get("gpus", [])) == 4 and all(g["points"] for g in body["gpus"])
        self.assertTrue(wait_for(recorded, timeout=30, step=0.5), body)
        self.assertEqual(body["level"], "samples")
        for g in body["gpus"]:
            with self.subTest(gpu=g["gpu"]):
                last = g["points"][-1]
                self.assertEqual(last["util_gpu_pct"], A100_UTIL[g["gpu"]])
                self.assertEqual(last["mem_used_mib"], A100_USED_MIB[g["gpu"]])
                self.assertEqual(last["activity"], "busy")
        one = json.loads(self.live.get("/api/v1/history?since=5m&gpu=2")[2])
        self.assertEqual([g["gpu"] for g in one["gpus"]], [2])
        status, headers, page = self.live.get("/report")
        self.assertEqual(status, 200, page[:300])
        self.assertTrue(headers["Content-Type"].startswith("text/html"))
        self.assertIn("<svg", page)
        self.assertIn("NVIDIA A100-SXM4-40GB", page)


class PrometheusScrapes(unittest.TestCase):
    """A real Prometheus scrapes two agents each second: a100x4-balanced and h100x2-log (GPM, read
    each second with agent.slow_interval = 1s)."""

    @classmethod
    def setUpClass(cls):
        require_tool("prometheus", PROMETHEUS, hint="Debian: apt install prometheus")
        cls.a100 = LiveAgent("a100x4-balanced")
        cls.addClassCleanup(cls.a100.close)
        cls.h100 = LiveAgent("h100x2-log", config='[agent]\nslow_interval = "1s"\n')
        cls.addClassCleanup(cls.h100.close)
        cls.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-prom-"))
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        cls.prometheus = LivePrometheus(cls.dir, f"""\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tarmac-a100
    static_configs:
      - targets: ["127.0.0.1:{cls.a100.port}"]
  - job_name: tarmac-h100
    static_configs:
      - targets: ["127.0.0.1:{cls.h100.port}"]
""")
        cls.addClassCleanup(cls.prometheus.close)
        cls.port = cls.prometheus.port

    def query(self, promql):
        status, _, body = http_get(self.port, "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        self.assertEqual(status, 200, body)
        doc = json.loads(body)
        self.assertEqual(doc["status"], "success", body)
        return doc["data"]["result"]

    def wait_query(self, promql, want, timeout=30):
        """Polls PROMQL until WANT(result) holds; returns the last result."""
        last = []
        def ok():
            nonlocal last
            last = self.query(promql)
            return want(last)
        if not wait_for(ok, timeout=timeout, step=0.5):
            self.fail(f"{promql}: {json.dumps(last)[:1500]}; targets: {self.targets()}")
        return last

    def targets(self):
        try:
            doc = json.loads(http_get(self.port, "/api/v1/targets")[2])
            return [(t["labels"].get("job"), t["health"], t.get("lastError")) for t in doc["data"]["activeTargets"]]
        except Exception as e:  # only for the failure message
            return repr(e)

    @staticmethod
    def by_gpu(result):
        return {r["metric"]["gpu"]: float(r["value"][1]) for r in result}

    def test_targets_up(self):
        for job in ("tarmac-a100", "tarmac-h100"):
            with self.subTest(job=job):
                self.wait_query(f'up{{job="{job}"}}', lambda r: len(r) == 1 and r[0]["value"][1] == "1")

    def test_util_and_memory_are_the_scenarios(self):
        util = self.wait_query('DCGM_FI_DEV_GPU_UTIL{job="tarmac-a100"}', lambda r: len(r) == 4)
        self.assertEqual(self.by_gpu(util), {str(i): float(v) for i, v in enumerate(A100_UTIL)})
        used = self.wait_query('DCGM_FI_DEV_FB_USED{job="tarmac-a100"}', lambda r: len(r) == 4)
        self.assertEqual(self.by_gpu(used), {str(i): float(v) for i, v in enumerate(A100_USED_MIB)})
        for r in util:
            self.assertEqual(r["metric"]["instance"], f"127.0.0.1:{self.a100.port}")
            self.assertEqual(r["metric"]["modelName"], "NVIDIA A100-SXM4-40GB")
            self.assertRegex(r["metric"]["UUID"], r"^GPU-[0-9a-f-]{36}$")

    def test_dashboard_12239_queries(self):
        # NVIDIA's "NVIDIA DCGM Exporter Dashboard" (grafana.com 12239), its variables instance and gpu
        # set to everything.
        sel = 'instance=~".+", gpu=~".+"'
        six = lambda r: len(r) == 6        # both agents' GPUs: 4 A100s and 2 H100s
        exprs = {
            f"DCGM_FI_DEV_GPU_TEMP{{{sel}}}": A100_TEMP,
            f"DCGM_FI_DEV_POWER_USAGE{{{sel}}}": A100_POWER,
            f"DCGM_FI_DEV_SM_CLOCK{{{sel}}} * 1000000": [1410e6] * 4,
            f"DCGM_FI_DEV_MEM_CLOCK{{{sel}}} * 1000000": [1215e6] * 4,
            f"DCGM_FI_DEV_GPU_UTIL{{{sel}}}": A100_UTIL,
            f"DCGM_FI_DEV_FB_USED{{{sel}}}": A100_USED_MIB,
        }
        for expr, a100_values in exprs.items():
            with self.subTest(expr=expr):
                result = self.wait_query(expr, six)
                a100 = {r["metric"]["gpu"]: float(r["value"][1]) for r in result
                        if r["metric"]["job"] == "tarmac-a100"}
                self.assertEqual(a100, {str(i): float(v) for i, v in enumerate(a100_values)})
        with self.subTest(expr="sum(DCGM_FI_DEV_POWER_USAGE)"):
            total = self.wait_query(f"sum(DCGM_FI_DEV_POWER_USAGE{{{sel}}})", lambda r: len(r) == 1)
            self.assertGreater(float(total[0]["value"][1]), sum(A100_POWER))
            a100_total = self.wait_query('sum(DCGM_FI_DEV_POWER_USAGE{job="tarmac-a100"})', lambda r: len(r) == 1)
            self.assertEqual(float(a100_total[0]["value"][1]), float(sum(A100_POWER)))
        with self.subTest(expr="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"):
            # h100x2-log: GPU 1 runs its tensor cores 71 % of the time (GPM), GPU 0 does not.
            tensor = self.wait_query(f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{sel}}}", lambda r: len(r) >= 2)
            self.assertEqual({r["metric"]["job"] for r in tensor}, {"tarmac-h100"})
            self.assertAlmostEqual(self.by_gpu(tensor)["1"], 0.71, places=3)
            self.assertAlmostEqual(self.by_gpu(tensor)["0"], 0.0, places=3)
        with self.subTest(expr="label_values(gpu), label_values(instance)"):
            _, _, body = http_get(self.port, "/api/v1/label/instance/values")
            self.assertLessEqual({f"127.0.0.1:{self.a100.port}", f"127.0.0.1:{self.h100.port}"},
                                 set(json.loads(body)["data"]))


class TarmacDashboardMetrics(unittest.TestCase):
    """Every metric packaging/grafana/tarmac.json queries is in the live output, on holding-zombie
    (GPU 3 held by an idle notebook; holding_after 1 s so the class comes at once)."""

    @classmethod
    def setUpClass(cls):
        cls.live = LiveAgent("holding-zombie", config='[activity]\nholding_after = "1s"\n')
        cls.addClassCleanup(cls.live.close)

    @staticmethod
    def dashboard_metrics():
        doc = json.loads((REPO / "packaging" / "grafana" / "tarmac.json").read_text())
        exprs = []
        def walk(o):
            if isinstance(o, dict):
                for k, v in o.items():
                    if k == "expr" and isinstance(v, str):
                        exprs.append(v)
                    else:
                        walk(v)
            elif isinstance(o, list):
                for v in o:
                    walk(v)
        walk(doc)
        names = set()
        for e in exprs:
            names |= {n for n in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e) if n.startswith(("tarmac_", "DCGM_"))}
        return exprs, names

    def test_every_dashboard_metric_has_samples(self):
        exprs, names = self.dashboard_metrics()
        self.assertTrue(exprs, "no expr in packaging/grafana/tarmac.json")
        self.assertIn("tarmac_process_holding", names)
        present = set()
        def all_there():
            nonlocal present
            samples, _ = parse_exposition(self.live.metrics())
            present = {s[0] for s in samples}
            return names <= present
        wait_for(all_there, timeout=30, step=0.5)
        self.assertEqual(sorted(names - present), [], "queried by packaging/grafana/tarmac.json, no sample")

    def test_holding_process_on_gpu3(self):
        held = []
        def found():
            nonlocal held
            samples, _ = parse_exposition(self.live.metrics())
            held = [(l, v) for n, l, v in samples if n == "tarmac_process_holding"]
            return bool(held)
        self.assertTrue(wait_for(found, timeout=30, step=0.5), self.live.metrics()[-3000:])
        self.assertEqual([l["gpu"] for l, _ in held], ["3"])
        labels, value = held[0]
        self.assertEqual(value, 20480 * 1024 * 1024)
        self.assertTrue(labels["command"].startswith("python -m ipykernel_launcher"), labels)
        for key in ("pid", "user", "command", "container", "slurm_job", "uuid", "pci_bus_id", "hostname"):
            self.assertIn(key, labels)
        samples, _ = parse_exposition(self.live.metrics())
        classes = {l["gpu"]: l["class"] for n, l, v in samples if n == "tarmac_gpu_activity" and v == 1}
        self.assertEqual(classes, {"0": "busy", "1": "busy", "2": "busy", "3": "holding"})


class MalformedRequests(unittest.TestCase):
    """Bad requests get a 4xx (or 5xx) with Connection: close, and the agent keeps serving."""

    @classmethod
    def setUpClass(cls):
        cls.live = LiveAgent("a100x4-balanced")
        cls.addClassCleanup(cls.live.close)

    def assert_still_serving(self):
        status, _, body = self.live.get("/healthz")
        self.assertEqual((status, body.strip()), (200, "ok"))
        samples, _ = parse_exposition(self.live.metrics())
        self.assertEqual(len([s for s in samples if s[0] == "DCGM_FI_DEV_GPU_UTIL"]), 4)
        self.assertIsNone(self.live.agent.poll(), self.live.stderr()[-1500:])

    def expect(self, data, status, timeout=20):
        response = raw_request(self.live.port, data, timeout=timeout)
        self.assertEqual(status_of(response), status, response[:400])
        head = response.split(b"\r\n\r\n", 1)[0].lower()
        self.assertIn(b"connection: close", head, response[:400])
        return response

    def test_bad_requests(self):
        cases = [
            ("garbage request line", b"GARBAGE\r\n\r\n", 400),
            ("binary junk", bytes(range(1, 32)) + b"\r\n\r\n", 400),
            ("POST", b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 405),
            ("20 KB header", b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 431),
            ("5000-byte path", b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
            ("HTTP/2.0", b"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        ]
        before = self.rejected()
        for what, data, status in cases:
            with self.subTest(what):
                self.expect(data, status)
                self.assert_still_serving()
        self.assertGreaterEqual(self.rejected() - before, len(cases))

    def test_bad_query_and_unknown_path(self):
        status, _, body = self.live.get("/api/v1/history?since=bogus")
        self.assertEqual(status, 400, body)
        self.assertIn("since=bogus", body)
        status, _, body = self.live.get("/nope")
        self.assertEqual(status, 404, body)
        self.assert_still_serving()

    def test_half_sent_head_times_out_without_blocking_others(self):
        # The stalled client connects and sends half a head first: it is ahead of the requests below
        # in the server's accept queue, so a server that waited on it would answer it (408, after the
        # 10 s head timeout) before answering them.
        stalled = socket.create_connection(("127.0.0.1", self.live.port), timeout=60)
        self.addCleanup(stalled.close)
        stalled.sendall(b"GET /metrics HTTP/1.1\r\nHo")
        sent = time.monotonic()
        self.assert_still_serving()          # the stalled client blocks nobody:
        stalled.setblocking(False)
        try:
            early = stalled.recv(4096)
        except BlockingIOError:
            early = None
        self.assertIsNone(early, "the stalled client was answered before the others were served")
        stalled.settimeout(60)               # a hang, not a slow machine, runs into this
        response = b""
        try:
            while chunk := stalled.recv(65536):
                response += chunk
        except ConnectionResetError:  # after the answer: the answer counts, as in raw_request
            pass
        waited = time.monotonic() - sent
        self.assertEqual(status_of(response), 408, response[:400])
        self.assertGreater(waited, 5, "408 only after the head timeout (10 s)")
        self.assert_still_serving()

    def test_connection_limit(self):
        socks = []
        try:
            for _ in range(300):
                socks.append(socket.create_connection(("127.0.0.1", self.live.port), timeout=5))
            for s in socks:
                s.setblocking(False)
            # The server accepts in the order the connections were made: once the last one has its
            # answer, every connection before it has been accepted (held, or answered and closed).
            answered = {}
            def sweep():
                for i, s in enumerate(socks):
                    if i in answered:
                        continue
                    try:
                        answered[i] = s.recv(4096)
                    except BlockingIOError:
                        pass
                    except ConnectionResetError:
                        answered[i] = b"<reset>"
                return 299 in answered
            self.assertTrue(wait_for(sweep, timeout=60, step=0.05), f"connection 300 got no answer: {sorted(answered)}")
            sweep()
            # 256 idle connections are held open; the 257th and later get 503 and are closed.
            self.assertEqual(sorted(answered), list(range(256, 300)), {k: v[:60] for k, v in answered.items()})
            self.assertTrue(all(status_of(v) == 503 for v in answered.values()),
                            {k: v[:60] for k, v in answered.items()})
        finally:
            for s in socks:
                s.close()
        self.assertTrue(wait_for(lambda: self.healthz_ok(), timeout=10, step=0.2))
        self.assert_still_serving()

    def healthz_ok(self):
        try:
            return self.live.get("/healthz", timeout=2)[0] == 200
        except OSError:
            return False

    def rejected(self):
        samples, _ = parse_exposition(self.live.metrics())
        return next(v for n, _, v in samples if n == "tarmac_agent_http_rejected_total")


class ListenErrors(unittest.TestCase):
    def setUp(self):
        self.sim = HeldSim("a100x4-balanced")
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-listen-"))

    def tearDown(self):
        self.sim.close()
        self.sim.proc.stdout.close()
        self.sim.proc.stderr.close()
        shutil.rmtree(self.sim.state, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_port_in_use_exits_2_naming_the_address(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            r = self.sim.run("agent", "--state-dir", str(self.dir), "--listen", f"127.0.0.1:{port}",
                             "--duration", "10s", timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"127.0.0.1:{port}", r.stderr)

    def test_nonsense_address_exits_2(self):
        for bad in ("nonsense", "127.0.0.1:99999", "127.0.0.1:"):
            with self.subTest(listen=bad):
                r = self.sim.run("agent", "--state-dir", str(self.dir), "--listen", bad, "--duration", "10s", timeout=60)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(bad, r.stderr)

    def test_listen_off_and_config_key(self):
        port = free_port()
        r = self.sim.run("agent", "--state-dir", str(self.dir), "--listen", "off", "--duration", "1s", timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("serving http", r.stderr)
        cfg = self.dir / "tarmac.toml"
        cfg.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
        agent = subprocess.Popen([TARMAC, "--config", str(cfg), "agent", "--state-dir", str(self.dir / "s2")],
                                 env=self.sim.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            def up():
                try:
                    return http_get(port, "/healthz", timeout=2)[0] == 200
                except OSError:
                    return False
            self.assertTrue(wait_for(up, timeout=30, step=0.1), "[http] listen from the configuration not served")
        finally:
            agent.terminate()
            _, err = agent.communicate(timeout=15)
        self.assertEqual(agent.returncode, 0, err)
        self.assertIn(f"http://127.0.0.1:{port}/", err)


if __name__ == "__main__":
    unittest.main()
