"""The alert webhook over HTTPS (issue 16: Slack, Teams, Discord and PagerDuty webhooks are all
https): `tarmac alerts --send-test` posts to a local TLS server whose certificate is made here,
trusted through alerts.webhook_ca; refused (naming the certificate problem) without it; and a
machine without libcurl is told which library is missing. The webhook's path, which is its secret
for Slack and the others, never appears in what tarmac prints."""
import http.server
import json
import pathlib
import shutil
import ssl
import subprocess
import tempfile
import threading
import unittest

from test_status import TARMAC

SECRET_PATH = "/services/T000/B000/s3cr3t"


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length", "0"))
        self.server.bodies.append((self.path, json.loads(self.rfile.read(length))))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


class WebhookOverTls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-tls-"))
        cls.cert = cls.dir / "cert.pem"
        key = cls.dir / "key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cls.cert), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        cls.server.bodies = []
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cls.cert), str(key))
        cls.server.socket = context.wrap_socket(cls.server.socket, server_side=True)
        cls.thread = threading.Thread(target=cls.server.serve_forever, daemon=True)
        cls.thread.start()
        cls.url = f"https://127.0.0.1:{cls.server.server_address[1]}{SECRET_PATH}"

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def send_test(self, ca=None, env=None, json_out=False):
        config = self.dir / "tarmac.toml"
        config.write_text(f'[alerts]\nwebhook = "{self.url}"\n' + (f'webhook_ca = "{ca}"\n' if ca else ""))
        args = [TARMAC, "--config", str(config)] + (["--json"] if json_out else []) + ["alerts", "--send-test"]
        return subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)

    def test_delivered_when_the_ca_is_trusted(self):
        before = len(self.server.bodies)
        r = self.send_test(ca=self.cert)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("webhook https://127.0.0.1:", r.stdout)
        self.assertIn("delivered", r.stdout)
        self.assertNotIn("s3cr3t", r.stdout + r.stderr)
        path, body = self.server.bodies[before]
        self.assertEqual(path, SECRET_PATH)
        self.assertEqual(body["status"], "test")
        self.assertIn("TEST from tarmac on", body["text"])
        self.assertIsNone(body["alert"])

    def test_refused_naming_the_certificate_when_the_ca_is_not_trusted(self):
        before = len(self.server.bodies)
        r = self.send_test(json_out=True)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        j = json.loads(r.stdout)
        self.assertFalse(j["webhook"]["ok"])
        self.assertIn("certificate", j["webhook"]["error"].lower())
        self.assertNotIn("s3cr3t", r.stdout + r.stderr)
        self.assertEqual(len(self.server.bodies), before, "nothing reached the server")

    def test_without_libcurl_the_message_names_it(self):
        env = {"PATH": "/usr/bin:/bin", "TARMAC_CURL_LIB": str(self.dir / "missing" / "libcurl.so.4")}
        r = self.send_test(ca=self.cert, env=env)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("libcurl", r.stdout)
        self.assertIn("cannot load", r.stdout)

    def test_the_command_sink_gets_the_test_too_and_json_stays_clean(self):
        config = self.dir / "command.toml"
        out = self.dir / "command.out"
        config.write_text(f'[alerts]\ncommand = "/usr/bin/tee {out}"\n')
        r = subprocess.run([TARMAC, "--config", str(config), "--json", "alerts", "--send-test"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(json.loads(r.stdout)["command"]["ok"])  # tee's copy went to stderr, not into the JSON
        self.assertEqual(json.loads(out.read_text())["status"], "test")

    def test_a_bad_url_is_refused_by_the_configuration(self):
        config = self.dir / "bad.toml"
        config.write_text('[alerts]\nwebhook = "ftp://127.0.0.1/x"\n')
        r = subprocess.run([TARMAC, "--config", str(config), "alerts", "--send-test"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("ftp://127.0.0.1/x", r.stderr)


if __name__ == "__main__":
    unittest.main()
