"""A stand-in for `tarmac agent`'s HTTP server: the dashboard page from the source tree at / and
canned JSON in the agent's API shapes, so the page can be built and tested without the agent.

Its four A100s train at ~95 % until `switch()` (or `POST /_switch`), then stall at 4 % with their
memory held (as in the a100x4-stall-midway scenario), with a "starved" alert firing. `set_down()`
(or `POST /_down`, `POST /_up`) makes every API route answer 503, as an agent that went away.

    python3 tests/integration/fake_agent.py [--port 8765] [--gpus 4]    # then open http://127.0.0.1:8765/
"""
import argparse
import json
import pathlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "src" / "tarmac" / "serve" / "dashboard.html"
STEP_MS = 30000
NAME = "NVIDIA A100-SXM4-40GB"
BUS_IDS = ["00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0"]
COMMAND = "python train.py --config configs/resnet50.yaml --data /mnt/nfs/imagenet --local-rank {}"


def now_ms():
    return int(time.time() * 1000)


class FakeAgent:
    """The fake's state and server; `start()` serves on 127.0.0.1 (port 0: a free one) in a thread."""

    def __init__(self, gpus=4, port=0):
        self.n = gpus
        self.stalled_since_ms = None
        self.down = False
        self.requests = []  # paths asked for, in order
        self.lock = threading.Lock()
        self.started_ms = now_ms()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.thread = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def start(self):
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def switch(self):
        """From now on the GPUs are stalled: 4 %, memory still held, a starved alert firing."""
        with self.lock:
            self.stalled_since_ms = now_ms()

    def set_down(self, down=True):
        with self.lock:
            self.down = down

    # ---- the canned state ----

    def uuid(self, i):
        return f"GPU-16aaab6a-6e43-4884-a60d-b64116853b{i:02x}"

    def sample(self, i, ts):
        """GPU I's values at TS: training (with a little wobble), or stalled after the switch."""
        stalled = self.stalled_since_ms is not None and ts >= self.stalled_since_ms
        wobble = (ts // STEP_MS + i * 7) % 5 - 2
        if stalled:
            return {"util_gpu_pct": 4, "util_mem_pct": 1, "mem_used_mib": 38400 + 10 * i, "power_w": 92.0 - i,
                    "temp_c": 44 + i % 2, "activity": "starved"}
        # An hour ago the job had not started yet: 20 minutes of idle, then training.
        if ts < self.started_ms - 40 * 60 * 1000:
            return {"util_gpu_pct": 0, "util_mem_pct": 0, "mem_used_mib": 0, "power_w": 55.0, "temp_c": 32,
                    "activity": "idle"}
        return {"util_gpu_pct": 95 + wobble - i % 2, "util_mem_pct": 41, "mem_used_mib": 38900 + 50 * i,
                "power_w": 250.0 + wobble, "temp_c": 68 + i % 3, "activity": "busy"}

    def gpus(self):
        ts = now_ms()
        out = []
        for i in range(self.n):
            s = self.sample(i, ts)
            out.append({"index": i, "uuid": self.uuid(i), "name": NAME, "pci_bus_id": BUS_IDS[i % 4],
                        "activity": s["activity"], "util_gpu_pct": s["util_gpu_pct"],
                        "util_mem_pct": s["util_mem_pct"], "mem_used_mib": s["mem_used_mib"],
                        "mem_total_mib": 40960, "temp_c": s["temp_c"], "power_w": s["power_w"],
                        "power_limit_w": 400.0, "clock_sm_mhz": 1410, "processes": 1, "lost": None})
        alerts = []
        if self.stalled_since_ms is not None:
            alerts = [{"rule": "starved", "gpu": i, "since_ms": self.stalled_since_ms,
                       "summary": f"GPU {i} holds 38 GiB at 4 % utilization <script>x</script>"}
                      for i in range(self.n)]
        return {"hostname": "fake-node-01", "driver_version": "535.129.03", "timestamp_ms": ts, "gpus": out,
                "alerts": alerts}

    def processes(self):
        ts = now_ms()
        procs = []
        for i in range(self.n):
            s = self.sample(i, ts)
            procs.append({"gpu": i, "uuid": self.uuid(i), "pid": 22058 + i, "user": "alice",
                          "command": COMMAND.format(i), "container": "train-7f3a" if i < 2 else None,
                          "job": "4711" if i % 2 == 0 else None, "used_mib": s["mem_used_mib"] - 400,
                          "sm_util_pct": s["util_gpu_pct"] if i != 3 else None})
        return {"timestamp_ms": ts, "processes": procs}

    def history(self, query):
        until = now_ms() // STEP_MS * STEP_MS
        since = until - 3600 * 1000
        wanted = [int(query["gpu"][0])] if "gpu" in query else range(self.n)
        gpus = []
        for i in wanted:
            points = []
            for ts in range(since, until + 1, STEP_MS):
                # Ten minutes that were not recorded, and GPU 1 without a power reading, as real data has.
                if since + 15 * 60000 <= ts < since + 25 * 60000:
                    continue
                s = self.sample(i, ts)
                points.append({"ts_ms": ts, "util_gpu_pct": float(s["util_gpu_pct"]),
                               "util_mem_pct": float(s["util_mem_pct"]), "mem_used_mib": s["mem_used_mib"],
                               "power_w": None if i == 1 else s["power_w"], "temp_c": float(s["temp_c"]),
                               "activity": s["activity"]})
            gpus.append({"gpu": i, "points": points})
        return {"since_ms": since, "until_ms": until, "step_ms": STEP_MS, "gpus": gpus}

    # ---- HTTP ----

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: the tests print what matters
                pass

            def send(self, status, body, ctype):
                data = body.encode("utf-8") if isinstance(body, str) else body
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                url = urlparse(self.path)
                with fake.lock:
                    fake.requests.append(self.path)
                    down = fake.down
                if url.path == "/":
                    return self.send(200, DASHBOARD.read_bytes(), "text/html; charset=utf-8")
                if url.path == "/healthz":
                    return self.send(200, "ok\n", "text/plain")
                if url.path == "/report":
                    return self.send(200, "<!DOCTYPE html><title>report</title><p>fake report",
                                     "text/html; charset=utf-8")
                routes = {"/api/v1/gpus": lambda: fake.gpus(), "/api/v1/processes": lambda: fake.processes(),
                          "/api/v1/history": lambda: fake.history(parse_qs(url.query))}
                if url.path not in routes:
                    return self.send(404, "not found\n", "text/plain")
                if down:
                    return self.send(503, json.dumps({"error": "down"}), "application/json")
                with fake.lock:
                    body = routes[url.path]()
                return self.send(200, json.dumps(body), "application/json")

            def do_POST(self):
                actions = {"/_switch": fake.switch, "/_down": lambda: fake.set_down(True),
                           "/_up": lambda: fake.set_down(False)}
                if self.path not in actions:
                    return self.send(404, "not found\n", "text/plain")
                actions[self.path]()
                return self.send(200, "ok\n", "text/plain")

        return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--gpus", type=int, default=4)
    args = ap.parse_args()
    fake = FakeAgent(args.gpus, args.port)
    print(f"serving {DASHBOARD} at {fake.url} (POST /_switch, /_down, /_up)", flush=True)
    try:
        fake.server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
