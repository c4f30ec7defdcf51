"""End-to-end tests of the agent's endpoint beyond loopback (docs/fleet.md "Scraping across the
network"): TLS and basic auth from a web.config.file that `tarmac config web-config` wrote and
promtool checked, a real Prometheus scraping it with tls_config and basic_auth (and refused with a
wrong password or without the CA), client certificates, the refusal to serve in clear, and the
command lines reduced to programs' names. Certificates come from the openssl command (Debian's
openssl); Prometheus and promtool from Debian's prometheus package."""
import base64
import http.client
import json
import os
import pathlib
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.parse

from agent_support import HANG_S, HeldSim, end_process, free_port, http_get, wait_for
from devtools import require_tool
from test_metrics import PROMETHEUS, PROMTOOL
from test_status import TARMAC

PASSWORD = "s3cret pass"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def close_sim(sim):
    sim.close()
    sim.proc.stdout.close()
    sim.proc.stderr.close()


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it, and a
    stranger's certificate from another CA, under D."""
    require_tool("openssl", hint="Debian: apt install openssl")
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                f"{ca}.key", "-out", f"{ca}.crt", "-days", "2", "-subj", f"/CN={ca}", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, ca, ext in (("server", "ca", ["-extfile", "server.ext"]), ("client", "ca", []),
                          ("stranger", "other-ca", [])):
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", *ext, cwd=d)


def web_config(d, *args, password=PASSWORD):
    """`tarmac config web-config ARGS` with PASSWORD on stdin; the file it printed."""
    r = subprocess.run([TARMAC, "config", "web-config", *args], input=password + "\n", capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"web-config exit {r.returncode}: {r.stderr}")
    path = d / "web.yml"
    path.write_text(r.stdout)
    return path


class Agent:
    """`tarmac agent` on SIM listening on ADDRESS:PORT with CONFIG (the text of tarmac.toml)."""

    def __init__(self, sim, d, config, address="0.0.0.0", env=None):
        self.port = free_port()
        self.dir = d
        cfg = d / f"tarmac-{self.port}.toml"
        cfg.write_text(config)
        self.err = open(d / f"agent-{self.port}.stderr", "w+")
        self.proc = subprocess.Popen(
            [TARMAC, "--config", str(cfg), "agent", "--state-dir", str(d / f"state-{self.port}"), "--listen",
             f"{address}:{self.port}", "--socket", "off", "--interval", "500ms", "--process-interval", "1s"],
            env=dict(sim.env(), **(env or {})), stdout=subprocess.DEVNULL, stderr=self.err, text=True)

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def exited(self, timeout=HANG_S):
        """The exit code once it has exited (it must)."""
        return self.proc.wait(timeout=timeout)

    def close(self):
        end_process(self.proc)
        self.err.close()


def https(port, path, ca=None, auth=None, cert=None, timeout=10):
    """(status, headers, body) of GET PATH over TLS, trusting CA, with basic AUTH (user, password)
    and the client certificate CERT (a name under the PKI's folder, given as (crt, key))."""
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(*cert)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=timeout)
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    try:
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode()
    finally:
        conn.close()


def https_patiently(port, path, ca, auth):
    """The status of https(...), asked again as a client does when told 429 and Retry-After: the
    agent rations the time it spends checking new passwords (docs/security.md), and on a loaded
    machine one bcrypt check can take the whole ration (a flake seen in CI under asan)."""
    for _ in range(30):
        status, headers, _ = https(port, path, ca, auth)
        if status != 429:
            return status
        time.sleep(float(headers.get("Retry-After", "1")))  # the server's own word on when to come back
    return status


class TlsAndPasswords(unittest.TestCase):
    """One agent on 0.0.0.0 with TLS and a password, and a real Prometheus scraping it three ways."""

    @classmethod
    def setUpClass(cls):
        cls.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-web-"))
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        make_pki(cls.dir)
        cls.ca = str(cls.dir / "ca.crt")
        cls.web = web_config(cls.dir, "--user", "prometheus", "--cert", str(cls.dir / "server.crt"), "--key",
                             str(cls.dir / "server.key"))
        cls.sim = HeldSim("a100x4-balanced")
        cls.addClassCleanup(close_sim, cls.sim)
        cls.agent = Agent(cls.sim, cls.dir, f'[http]\nweb_config_file = "{cls.web}"\n')
        cls.addClassCleanup(cls.agent.close)
        cls.auth = ("prometheus", PASSWORD)

        def up():
            try:
                return https(cls.agent.port, "/healthz", cls.ca, cls.auth, timeout=2)[0] == 200
            except OSError:
                return cls.agent.proc.poll() is not None
        if not wait_for(up) or cls.agent.proc.poll() is not None:
            raise AssertionError(f"the agent did not serve https (exit {cls.agent.proc.poll()}): "
                                 f"{cls.agent.stderr()[-1500:]}")

    def test_the_generated_file_passes_promtool(self):
        promtool = require_tool("promtool", PROMTOOL, hint="Debian: apt install prometheus")
        r = subprocess.run([promtool, "check", "web-config", str(self.web)], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        text = self.web.read_text()
        self.assertNotIn(PASSWORD, text)
        self.assertIn("$2b$10$", text)

    def test_the_log_says_https_and_basic_auth(self):
        self.assertIn(f"serving https://0.0.0.0:{self.agent.port}/", self.agent.stderr())
        self.assertIn("basic auth", self.agent.stderr())

    def test_a_password_is_needed_for_every_path(self):
        for path in ("/metrics", "/api/v1/processes", "/", "/healthz", "/report", "/nope"):
            with self.subTest(path=path):
                status, headers, _ = https(self.agent.port, path, self.ca)
                self.assertEqual(status, 401)
                self.assertEqual(headers.get("WWW-Authenticate"), 'Basic realm="tarmac", charset="UTF-8"')
                self.assertEqual(https_patiently(self.agent.port, path, self.ca, ("prometheus", "wrong")), 401)
                self.assertEqual(https_patiently(self.agent.port, path, self.ca, ("other", PASSWORD)), 401)
        self.assertEqual(https(self.agent.port, "/healthz", self.ca, self.auth)[0], 200)

    def test_plain_http_gets_no_answer_and_is_counted(self):
        with socket.create_connection(("127.0.0.1", self.agent.port), timeout=20) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            try:
                got = s.recv(4096)
            except ConnectionResetError:
                got = b""
        self.assertNotIn(b"HTTP/1.1", got)
        self.assertNotIn(b"DCGM_FI", got)

        def counted():
            body = https(self.agent.port, "/metrics", self.ca, self.auth)[2]
            line = [l for l in body.splitlines() if l.startswith("tarmac_agent_http_tls_failures_total ")]
            return line and float(line[0].split()[1]) >= 1
        self.assertTrue(wait_for(counted))

    def test_beyond_loopback_only_programs_names_leave(self):
        _, _, body = https(self.agent.port, "/api/v1/processes", self.ca, self.auth)
        procs = json.loads(body)["processes"]
        self.assertTrue(procs)
        for p in procs:
            self.assertTrue(p["command"])
            self.assertNotIn(" ", p["command"], p)
            self.assertNotIn("/", p["command"], p)
        metrics = https(self.agent.port, "/metrics", self.ca, self.auth)[2]
        info = [l for l in metrics.splitlines() if l.startswith("tarmac_process_info{")]
        self.assertTrue(info)
        for line in info:
            command = line.split('command="', 1)[1].split('"', 1)[0]
            self.assertNotIn(" ", command, line)
        # The same processes on loopback, where every local user reads /proc anyway: whole lines.
        local = Agent(self.sim, self.dir, "", address="127.0.0.1")
        try:
            def whole():
                try:
                    status, _, body = http_get(local.port, "/api/v1/processes", timeout=2)
                except OSError:
                    return False
                return status == 200 and any(" " in p["command"] for p in json.loads(body)["processes"])
            self.assertTrue(wait_for(whole), local.stderr()[-1000:])
        finally:
            local.close()

    def test_prometheus_scrapes_with_tls_and_password_and_is_refused_otherwise(self):
        prometheus = require_tool("prometheus", PROMETHEUS, hint="Debian: apt install prometheus")
        d = self.dir / "prom"
        d.mkdir()
        (d / "password").write_text(PASSWORD)
        (d / "wrong").write_text("not it")
        target = f"127.0.0.1:{self.agent.port}"
        (d / "prometheus.yml").write_text(f"""\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: good
    scheme: https
    tls_config: {{ca_file: {self.ca}}}
    basic_auth: {{username: prometheus, password_file: {d / 'password'}}}
    static_configs: [{{targets: ["{target}"]}}]
  - job_name: wrong-password
    scheme: https
    tls_config: {{ca_file: {self.ca}}}
    basic_auth: {{username: prometheus, password_file: {d / 'wrong'}}}
    static_configs: [{{targets: ["{target}"]}}]
  - job_name: no-ca
    scheme: https
    basic_auth: {{username: prometheus, password_file: {d / 'password'}}}
    static_configs: [{{targets: ["{target}"]}}]
  - job_name: plain-http
    basic_auth: {{username: prometheus, password_file: {d / 'password'}}}
    static_configs: [{{targets: ["{target}"]}}]
""")
        port = free_port()
        log = open(d / "prometheus.log", "w+")
        self.addCleanup(log.close)
        prom = subprocess.Popen([prometheus, f"--config.file={d / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={d / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                                 "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT, cwd=d)
        self.addCleanup(end_process, prom, 15)
        targets = {}

        def scraped():
            nonlocal targets
            try:
                doc = json.loads(http_get(port, "/api/v1/targets", timeout=2)[2])
            except (OSError, ValueError):
                return False
            targets = {t["labels"]["job"]: t for t in doc["data"]["activeTargets"]}
            # A 429 (the agent's ration for checking new passwords spent, as under a loaded CI) is
            # not the answer yet: Prometheus asks again at its next scrape.
            return len(targets) == 4 and all(t["lastScrape"] != "0001-01-01T00:00:00Z" and
                                             (t["health"] == "up" or (t["lastError"] and "429" not in t["lastError"]))
                                             for t in targets.values())
        if not wait_for(scraped):
            log.seek(0)
            self.fail(f"targets: {targets}; prometheus: {log.read()[-1500:]}")
        self.assertEqual(targets["good"]["health"], "up", targets["good"])
        self.assertEqual(targets["wrong-password"]["health"], "down")
        self.assertIn("401", targets["wrong-password"]["lastError"])
        self.assertEqual(targets["no-ca"]["health"], "down")
        self.assertIn("certificate", targets["no-ca"]["lastError"])
        self.assertEqual(targets["plain-http"]["health"], "down")

        def utilization():
            q = urllib.parse.urlencode({"query": 'DCGM_FI_DEV_GPU_UTIL{job="good"}'})
            try:
                doc = json.loads(http_get(port, "/api/v1/query?" + q, timeout=2)[2])
            except (OSError, ValueError):
                return False
            return len(doc["data"]["result"]) == 4
        self.assertTrue(wait_for(utilization), "the good job's samples reached the TSDB")


class ClientCertificates(unittest.TestCase):
    """RequireAndVerifyClientCert alone authenticates: no password, a certificate from the CA."""

    def test_only_a_certificate_from_the_ca_gets_in(self):
        d = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-mtls-"))
        self.addCleanup(shutil.rmtree, d, True)
        make_pki(d)
        web = web_config(d, "--cert", str(d / "server.crt"), "--key", str(d / "server.key"), "--client-ca",
                         str(d / "ca.crt"))
        sim = HeldSim("a100x4-balanced")
        self.addCleanup(close_sim, sim)
        agent = Agent(sim, d, f'[http]\nweb_config_file = "{web}"\n')
        self.addCleanup(agent.close)
        ca = str(d / "ca.crt")
        client = (str(d / "client.crt"), str(d / "client.key"))

        def up():
            try:
                return https(agent.port, "/healthz", ca, cert=client, timeout=2)[0] == 200
            except OSError:
                return agent.proc.poll() is not None
        self.assertTrue(wait_for(up) and agent.proc.poll() is None, agent.stderr()[-1500:])
        for cert in (None, (str(d / "stranger.crt"), str(d / "stranger.key"))):
            with self.subTest(cert=cert):
                with self.assertRaises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
                    https(agent.port, "/healthz", ca, cert=cert)


class Refusals(unittest.TestCase):
    """What the agent will not do beyond loopback, and a web config it cannot use."""

    @classmethod
    def setUpClass(cls):
        cls.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-web-refuse-"))
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        cls.sim = HeldSim("a100x4-balanced")
        cls.addClassCleanup(close_sim, cls.sim)

    def refused(self, config, *wanted, env=None):
        agent = Agent(self.sim, self.dir, config, env=env)
        self.addCleanup(agent.close)
        self.assertEqual(agent.exited(), 2, agent.stderr())
        for w in wanted:
            self.assertIn(w, agent.stderr())
        return agent.stderr()

    def test_clear_http_beyond_loopback_needs_insecure(self):
        self.refused("", "reachable beyond this machine", "no TLS and authentication", "http.web_config_file",
                     "http.insecure = true")

    def test_tls_without_authentication_is_not_enough(self):
        d = self.dir / "pki"
        d.mkdir()
        make_pki(d)
        web = web_config(d, "--cert", str(d / "server.crt"), "--key", str(d / "server.key"))
        self.refused(f'[http]\nweb_config_file = "{web}"\n', "no authentication")

    def test_a_password_without_tls_is_not_enough(self):
        d = self.dir / "pw"
        d.mkdir()
        web = web_config(d, "--user", "prometheus")
        self.refused(f'[http]\nweb_config_file = "{web}"\n', "no TLS (passwords would cross the network in clear)")

    def test_an_unusable_web_config_names_the_file_and_the_problem(self):
        bad = self.dir / "bad.yml"
        bad.write_text("tls_server_config:\n  cert_file: x.crt\n  key_file: x.key\n  curve_preferences: [X25519]\n")
        self.refused(f'[http]\nweb_config_file = "{bad}"\n', str(bad), "curves")
        missing = self.dir / "missing.yml"
        self.refused(f'[http]\nweb_config_file = "{missing}"\n', str(missing))
        nofiles = self.dir / "nofiles.yml"
        nofiles.write_text(f"tls_server_config:\n  cert_file: gone.crt\n  key_file: gone.key\n")
        self.refused(f'[http]\nweb_config_file = "{nofiles}"\n', str(self.dir / "gone.crt"))

    def test_without_openssl_the_agent_names_the_library_and_serves_nothing(self):
        # OpenSSL is loaded at run time (src/tarmac/serve/openssl.hpp): a machine without it gets
        # the library's name and the package, never an endpoint without its TLS or its passwords.
        d = self.dir / "nossl"
        d.mkdir()
        make_pki(d)
        missing = {"TARMAC_OPENSSL_LIB": str(d / "missing" / "libssl.so.3")}
        tls = web_config(d, "--cert", str(d / "server.crt"), "--key", str(d / "server.key"), "--user", "prometheus")
        self.refused(f'[http]\nweb_config_file = "{tls}"\n', "cannot load", "libssl.so.3", "apt install libssl3",
                     env=missing)
        password_only = web_config(d, "--user", "prometheus")
        self.refused(f'[http]\nweb_config_file = "{password_only}"\n', "cannot load", "libssl.so.3", env=missing)

    def test_insecure_serves_with_a_warning_and_programs_names(self):
        for expose, whole in ((False, False), (True, True)):
            with self.subTest(expose_command_lines=expose):
                agent = Agent(self.sim, self.dir,
                              f"[http]\ninsecure = true\nexpose_command_lines = {'true' if expose else 'false'}\n")
                self.addCleanup(agent.close)
                procs = []

                def served():
                    nonlocal procs
                    try:
                        status, _, body = http_get(agent.port, "/api/v1/processes", timeout=2)
                    except OSError:
                        return agent.proc.poll() is not None
                    procs = json.loads(body)["processes"] if status == 200 else []
                    return bool(procs)
                self.assertTrue(wait_for(served) and agent.proc.poll() is None, agent.stderr()[-1500:])
                self.assertIn("beyond loopback without TLS and authentication (http.insecure = true)", agent.stderr())
                self.assertEqual(any(" " in p["command"] for p in procs), whole, procs)


if __name__ == "__main__":
    unittest.main()
