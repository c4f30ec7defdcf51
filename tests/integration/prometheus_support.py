"""Debian's real Prometheus for the end-to-end tests: started on a free loopback port with a given
prometheus.yml, up once /-/ready answers, its log kept for failure messages."""
import os
import shutil
import subprocess

from agent_support import end_process, free_port, http_get, wait_for

PROMETHEUS = os.environ.get("PROMETHEUS") or shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = os.environ.get("PROMTOOL") or shutil.which("promtool") or "/usr/bin/promtool"


class LivePrometheus:
    """`prometheus` with CONFIG (prometheus.yml's text) and its TSDB in DIRECTORY; `.port`, `.url`,
    `.proc`, `.log` (its output, a file)."""

    def __init__(self, directory, config):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (directory / "prometheus.yml").write_text(config)
        self.log = open(directory / "prometheus.log", "w+")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={directory / 'prometheus.yml'}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=directory)
        if not wait_for(lambda: self.proc.poll() is None and self.http_ok("/-/ready"), timeout=30, step=0.2):
            text = self.log_text()
            self.close()
            raise AssertionError(f"prometheus not ready (exit {self.proc.poll()}): {text[-2000:]}")

    def http_ok(self, path):
        try:
            return http_get(self.port, path, timeout=2)[0] == 200
        except OSError:
            return False

    def log_text(self):
        self.log.seek(0)
        return self.log.read()

    def close(self):
        end_process(self.proc, timeout=15)
        self.log.close()
