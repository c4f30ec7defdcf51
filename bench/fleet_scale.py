#!/usr/bin/env python3
"""`tarmac fleet --prometheus` at fleet scale (docs/fleet.md). A benchmark, not a test: it prints
figures and fails only when the fleet it reads back is not the one it wrote.

  1. Writes, in OpenMetrics, the series `tarmac fleet` reads for NODES nodes of GPUS GPUs each, as
     their agents would expose them (dcgm-exporter's DCGM_FI_DEV_* names, tarmac_gpu_activity with
     its six classes, tarmac_gpu_idle_seconds, tarmac_gpu_job_info, tarmac_gpu_pod_info,
     tarmac_process_info, up), POINTS samples a minute apart ending now; a third of the GPUs idle
     or reserved-idle, one in twelve holding.
  2. Turns them into TSDB blocks with Debian's `promtool tsdb create-blocks-from openmetrics`, and
     starts Debian's Prometheus on them (no scraping).
  3. Times, RUNS times each, the floor (the same nine instant queries asked side by side by
     Python's urllib, bodies read, nothing parsed), `tarmac --json fleet --prometheus` (whose rows
     must be every GPU with the class written) and the table.

Goal (issue 18): the grid in under 1 s for 1,000 nodes x 8 GPUs on a 2-core machine.

Usage: bench/fleet_scale.py   (env: TARMAC_BUILD_DIR=build, NODES=1000, GPUS=8, POINTS=5, RUNS=5,
       PROMETHEUS, PROMTOOL)
"""
import concurrent.futures
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(os.environ.get("TARMAC_BUILD_DIR", HERE / "build")).resolve()
TARMAC = str(BUILD / "tarmac")
PROMETHEUS = os.environ.get("PROMETHEUS") or shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = os.environ.get("PROMTOOL") or shutil.which("promtool") or "/usr/bin/promtool"
NODES = int(os.environ.get("NODES", "1000"))
GPUS = int(os.environ.get("GPUS", "8"))
POINTS = int(os.environ.get("POINTS", "5"))
RUNS = int(os.environ.get("RUNS", "5"))
CLASSES = ("busy", "starved", "holding", "idle", "reserved-idle", "fault")
QUERIES = ("max by (instance, uuid, gpu, hostname, class) (tarmac_gpu_activity == 1)",
           "max by (instance, UUID, modelName) (DCGM_FI_DEV_GPU_UTIL)", "max by (instance, UUID) (DCGM_FI_DEV_FB_USED)",
           "max by (instance, UUID) (DCGM_FI_DEV_FB_FREE)", "max by (instance, uuid) (tarmac_gpu_idle_seconds > 0)",
           "count by (instance, uuid, slurm_job) (tarmac_gpu_job_info)",
           "count by (instance, uuid, pod, namespace) (tarmac_gpu_pod_info)",
           "count by (instance, uuid, user) (tarmac_process_info)",
           "up == 0 and on (job) count by (job) (tarmac_agent_samples_total)")  # as src/tarmac/fleet/fleet.hpp


def class_of(node, gpu):
    k = (node * GPUS + gpu) % 12
    return "holding" if k == 0 else "reserved-idle" if k in (1, 2) else "idle" if k in (3, 4) else "busy"


def write_openmetrics(path, now):
    """The fleet's series, one family after another, each series' samples in time order."""
    stamps = [now - 60 * (POINTS - 1 - i) for i in range(POINTS)]
    gpus = [(n, g) for n in range(NODES) for g in range(GPUS)]

    def ids(n, g):
        return f'instance="node-{n:04d}:9478",job="tarmac",gpu="{g}"', f"GPU-{n:08x}-0000-0000-0000-{g:012x}"

    with open(path, "w") as out:
        def family(name, kind, series):
            out.write(f"# TYPE {name} {kind}\n")
            for labels, value in series:
                for t in stamps:
                    out.write(f"{name}{{{labels}}} {value} {t}\n")

        def activity():
            for n, g in gpus:
                base, uuid = ids(n, g)
                for c in CLASSES:
                    yield (f'{base},uuid="{uuid}",hostname="node-{n:04d}",class="{c}"',
                           1 if c == class_of(n, g) else 0)

        def dcgm(value):
            for n, g in gpus:
                base, uuid = ids(n, g)
                yield f'{base},UUID="{uuid}",modelName="NVIDIA H100 80GB HBM3",Hostname="node-{n:04d}"', value(n, g)

        def own(value, extra=lambda n, g: ""):
            for n, g in gpus:
                base, uuid = ids(n, g)
                v = value(n, g)
                if v is not None:
                    yield f'{base},uuid="{uuid}",hostname="node-{n:04d}"{extra(n, g)}', v

        busy = lambda n, g: class_of(n, g) == "busy"
        family("tarmac_gpu_activity", "gauge", activity())
        family("DCGM_FI_DEV_GPU_UTIL", "gauge", dcgm(lambda n, g: 95 if busy(n, g) else 0))
        family("DCGM_FI_DEV_FB_USED", "gauge", dcgm(lambda n, g: 70000 if busy(n, g) or class_of(n, g) == "holding" else 0))
        family("DCGM_FI_DEV_FB_FREE", "gauge", dcgm(lambda n, g: 11559 if busy(n, g) or class_of(n, g) == "holding" else 81559))
        family("tarmac_gpu_idle_seconds", "gauge",
               own(lambda n, g: 3600 * (1 + (n + g) % 48) if class_of(n, g) in ("idle", "reserved-idle") else 0))
        family("tarmac_gpu_job_info", "gauge",
               own(lambda n, g: 1 if n % 2 == 0 else None, lambda n, g: f',slurm_job="{100000 + n}"'))
        family("tarmac_gpu_pod_info", "gauge",
               own(lambda n, g: 1 if n % 2 == 1 else None,
                   lambda n, g: f',pod="trainer-{n}",namespace="ml",container="main"'))
        family("tarmac_process_info", "gauge",
               own(lambda n, g: 1 if busy(n, g) or class_of(n, g) == "holding" else None,
                   lambda n, g: f',pid="{1000 + g}",user="user{n % 50}",command="python",container="",slurm_job=""'))
        out.write("# TYPE tarmac_agent_samples_total counter\n")
        for n in range(NODES):
            for i, t in enumerate(stamps):
                out.write(f'tarmac_agent_samples_total{{instance="node-{n:04d}:9478",job="tarmac"}} {GPUS * 60 * i} {t}\n')
        out.write("# TYPE up gauge\n")
        for n in range(NODES):
            for t in stamps:
                out.write(f'up{{instance="node-{n:04d}:9478",job="tarmac"}} 1 {t}\n')
        out.write("# EOF\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    for tool in (PROMETHEUS, PROMTOOL, TARMAC):
        if not os.path.exists(tool):
            sys.exit(f"fleet_scale: {tool} is missing")
    work = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-fleet-scale-"))
    prom = None
    try:
        now = int(time.time())
        t0 = time.monotonic()
        write_openmetrics(work / "fleet.om", now)
        t_write = time.monotonic() - t0
        t0 = time.monotonic()
        r = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(work / "fleet.om"),
                            str(work / "data")], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"promtool: {r.stderr[-2000:]}")
        t_blocks = time.monotonic() - t0
        (work / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={work / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                                 "--storage.tsdb.retention.time=30d", "--log.level=warn"],
                                stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "w"), cwd=work)
        deadline = time.monotonic() + 300
        while True:
            try:
                if urllib.request.urlopen(url + "/-/ready", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if prom.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"prometheus did not start: {(work / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)

        def floor():
            def ask(q):
                return len(urllib.request.urlopen(f"{url}/api/v1/query?query={urllib.parse.quote(q)}", timeout=60).read())
            with concurrent.futures.ThreadPoolExecutor(len(QUERIES)) as pool:
                return sum(pool.map(ask, QUERIES))

        def fleet():
            r = subprocess.run([TARMAC, "--json", "fleet", "--prometheus", url], capture_output=True, text=True,
                               timeout=300)
            if r.returncode != 0:
                sys.exit(f"tarmac fleet: exit {r.returncode}: {r.stderr[-2000:]}")
            return json.loads(r.stdout)

        doc = fleet()  # warm Prometheus' caches for both, and check the answer
        got = {(g["host"], g["gpu"]): g["activity"] for g in doc["gpus"]}
        want = {(f"node-{n:04d}", g): class_of(n, g) for n in range(NODES) for g in range(GPUS)}
        if got != want:
            missing = len(set(want) - set(got))
            sys.exit(f"tarmac fleet read {len(got)} GPUs ({missing} missing) or other classes than written")
        body_bytes = floor()
        floors, fleets, texts = [], [], []
        for _ in range(RUNS):
            t0 = time.monotonic()
            floor()
            floors.append(time.monotonic() - t0)
            t0 = time.monotonic()
            fleet()
            fleets.append(time.monotonic() - t0)
            t0 = time.monotonic()
            subprocess.run([TARMAC, "fleet", "--prometheus", url], capture_output=True, timeout=300, check=True)
            texts.append(time.monotonic() - t0)
        f_med, q_med = statistics.median(fleets), statistics.median(floors)
        print(f"fleet_scale: {NODES} nodes x {GPUS} GPUs = {NODES * GPUS} GPUs, {POINTS} points a series; "
              f"written in {t_write:.1f} s, blocks in {t_blocks:.1f} s")
        print(f"  the nine queries' answers: {body_bytes / 1e6:.1f} MB")
        print(f"  floor (urllib, the nine queries side by side, not parsed): median {q_med * 1000:.0f} ms")
        print(f"  tarmac --json fleet --prometheus:                         median {f_med * 1000:.0f} ms "
              f"(min {min(fleets) * 1000:.0f}, max {max(fleets) * 1000:.0f}); {f_med / q_med:.2f}x the floor")
        print(f"  tarmac fleet --prometheus (the table):                    median {statistics.median(texts) * 1000:.0f} ms")
        print(f"  goal < 1 s: {'met' if f_med < 1.0 else 'NOT met'}")
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(timeout=30)
            except subprocess.TimeoutExpired:
                prom.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
