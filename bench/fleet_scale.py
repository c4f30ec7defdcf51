#!/usr/bin/env python3
"""`tarmac fleet --prometheus` and `tarmac report --prometheus` at fleet scale (docs/fleet.md).
A benchmark, not a test: it prints figures and fails only when the fleet or the report it reads
back is not the one it wrote.

  1. Writes, in OpenMetrics, the series `tarmac fleet` reads for NODES nodes of GPUS GPUs each, as
     their agents would expose them (dcgm-exporter's DCGM_FI_DEV_* names, tarmac_gpu_activity with
     its six classes, tarmac_gpu_idle_seconds, tarmac_gpu_job_info, tarmac_gpu_pod_info,
     tarmac_process_info, up), POINTS samples a minute apart ending now; a third of the GPUs idle
     or reserved-idle, one in twelve holding.
  2. Writes DAYS days of the series tarmac's recording rules record every RECORD seconds (5 m, the
     default) and every hour, ending now, as Prometheus would have recorded them for that fleet: the busy GPUs idle
     at night (22:00 to 06:00 UTC), each even node's GPUs held by a Slurm job a day, each odd node's
     by a pod, a user on every busy or holding GPU. In 18-hour blocks, as a Prometheus with the
     default retention holds a week, one file per block, so that promtool reads each sample once.
  3. Turns them into TSDB blocks with Debian's `promtool tsdb create-blocks-from openmetrics`, and
     starts Debian's Prometheus on them (no scraping, no compaction).
  4. Times, RUNS times each, the floor (the same queries asked side by side by Python's urllib,
     bodies read, nothing parsed), `tarmac --json fleet --prometheus` (whose rows must be every GPU
     with the class written) and the table, and `tarmac --json report --prometheus --since 7d`
     (whose class hours must be those written) and its text.

Goals (issue 18), on a 2-core machine for 1,000 nodes x 8 GPUs: the grid in under 1 s, the
week's report in under 5 s.

Usage: bench/fleet_scale.py   (env: TARMAC_BUILD_DIR=build, NODES=1000, GPUS=8, POINTS=5, DAYS=7,
       RECORD=300, RUNS=5, PROMETHEUS, PROMTOOL; KEEP=DIR keeps the recorded TSDB in DIR and
       reads it from there the next time instead of writing it again)
"""
import bisect
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
DAYS = int(os.environ.get("DAYS", "7"))
RECORD = int(os.environ.get("RECORD", "300"))
# Blocks of 18 hours, as a Prometheus with the default retention (15 days) compacts a week into:
# its largest block is a tenth of the retention, in the steps 2 h, 6 h, 18 h. One file per block,
# so that promtool reads each sample once.
BLOCK = 18 * 3600
CLASSES = ("busy", "starved", "holding", "idle", "reserved-idle", "fault")
QUERIES = ("max by (instance, uuid, gpu, hostname, class) (tarmac_gpu_activity == 1)",
           "max by (instance, UUID, modelName) (DCGM_FI_DEV_GPU_UTIL)", "max by (instance, UUID) (DCGM_FI_DEV_FB_USED)",
           "max by (instance, UUID) (DCGM_FI_DEV_FB_FREE)", "max by (instance, uuid) (tarmac_gpu_idle_seconds > 0)",
           "count by (instance, uuid, slurm_job) (tarmac_gpu_job_info)",
           "count by (instance, uuid, pod, namespace) (tarmac_gpu_pod_info)",
           "count by (instance, uuid, user) (tarmac_process_info)",
           "up == 0 and on (job) count by (job) (tarmac_agent_samples_total)")  # as src/tarmac/fleet/fleet.hpp
REPORT_QUERIES = (  # as src/tarmac/fleet/fleet_report.cpp: RANGE the report's, H "1h" past a day
    "max by (instance, hostname, gpu, uuid, class) (sum_over_time(tarmac:gpu_activity_seconds:increaseH[RANGE]))",
    "max by (instance, uuid, modelName) (avg_over_time(tarmac:gpu_util_percent:avgH[RANGE]))",
    "max by (instance, uuid) (avg_over_time(tarmac:gpu_fb_used_mib:avgH[RANGE]))",
    "topk(10, max by (instance, hostname, gpu) (max_over_time(tarmac:gpu_idle_seconds:maxH[RANGE])))",
    "max by (instance, hostname, gpu, slurm_job, class) (sum_over_time(tarmac:job_gpu_activity_seconds:sampledH[RANGE]))",
    "max by (instance, hostname, gpu, namespace, pod, class) "
    "(sum_over_time(tarmac:pod_gpu_activity_seconds:sampledH[RANGE]))",
    "sum by (user, class) (max by (instance, gpu, user, class) "
    "(sum_over_time(tarmac:user_gpu_activity_seconds:sampledH[RANGE])))",
    "sum by (outcome) (max by (instance, outcome) (sum_over_time(tarmac:reaped_processes:increaseH[RANGE])))",
    "sum by (state) (max by (instance, state) (sum_over_time(tarmac:backfill_requests:increaseH[RANGE])))",
    "sum by (kind) (max by (instance, kind) (sum_over_time(tarmac:backfill_tokens:increaseH[RANGE])))")
HEAT_QUERY = "avg(avg_over_time(tarmac:gpu_util_percent:avgH[1h]))"


def class_of(node, gpu):
    k = (node * GPUS + gpu) % 12
    return "holding" if k == 0 else "reserved-idle" if k in (1, 2) else "idle" if k in (3, 4) else "busy"


def recorded_class(n, g, t):
    """The class the recording rules saw for GPU g of node n in the interval ending at t."""
    base = class_of(n, g)
    return "idle" if base == "busy" and not 6 <= (t // 3600) % 24 < 22 else base


def write_recorded(path, stamps, hours, fine_in, expected):
    """The recorded series of the intervals ending at STAMPS and of the hourly evaluations at HOURS
    (one block's; fine_in(e) gives the stamps of the hour before e), one family after another, each
    series' samples in time order; adds each class's hourly seconds to EXPECTED."""
    gpus = [(n, g) for n in range(NODES) for g in range(GPUS)]
    aggregate = {"sum": sum, "avg": lambda v: sum(v) / len(v), "max": max}
    with open(path, "w") as out:
        def family(name, series_of, over_time):
            """series_of(n, g, t) -> (extra labels, value) or None; a series per distinct labels,
            then NAME + "1h" as the hourly rule records it with OVER_TIME."""
            for hourly in (False, True):
                out.write(f"# TYPE {name}{'1h' if hourly else ''} gauge\n")
                for n, g in gpus:
                    base = f'instance="n{n:04d}:9478",hostname="n{n:04d}",gpu="{g}",uuid="GPU-{n:08x}-{g:04x}"'
                    series = {}
                    if not hourly:
                        for t in stamps:
                            got = series_of(n, g, t)
                            if got is not None:
                                series.setdefault(got[0], []).append((t, got[1]))
                                if name == "tarmac:gpu_activity_seconds:increase":
                                    cls = got[0].split('class="')[1][:-1]
                                    key = f"5m|n{n:04d}|{cls}"
                                    expected[key] = expected.get(key, 0) + got[1]
                    else:
                        for e in hours:
                            values = {}
                            for t in fine_in(e):
                                got = series_of(n, g, t)
                                if got is not None:
                                    values.setdefault(got[0], []).append(got[1])
                            for extra, v in values.items():
                                series.setdefault(extra, []).append((e, aggregate[over_time](v)))
                                if name == "tarmac:gpu_activity_seconds:increase":
                                    c = extra.split('class="')[1][:-1]
                                    key = f"1h|n{n:04d}|{c}"  # per series read, host and class
                                    expected[key] = expected.get(key, 0) + aggregate[over_time](v)
                    for extra, points in series.items():
                        prefix = f"{name}{'1h' if hourly else ''}{{{base}{extra}}} "
                        out.write("".join(f"{prefix}{v} {t}\n" for t, v in points))

        def per_class(extra=lambda n, g, t: ""):
            def series_of(n, g, t):
                return f'{extra(n, g, t)},class="{recorded_class(n, g, t)}"', RECORD
            return series_of

        family("tarmac:gpu_activity_seconds:increase", per_class(), "sum")
        family("tarmac:gpu_util_percent:avg",
               lambda n, g, t: (',modelName="NVIDIA H100 80GB HBM3"', 95 if recorded_class(n, g, t) == "busy" else 0),
               "avg")
        family("tarmac:gpu_fb_used_mib:avg",
               lambda n, g, t: ("", 70000 if recorded_class(n, g, t) in ("busy", "holding") else 0), "avg")
        family("tarmac:gpu_idle_seconds:max",
               lambda n, g, t: ("", 3600 * (1 + (n + g) % 48))
               if recorded_class(n, g, t) in ("idle", "reserved-idle") else None, "max")
        family("tarmac:job_gpu_activity_seconds:sampled",
               lambda n, g, t: per_class(lambda n, g, t: f',slurm_job="{100000 + 10 * n + t // 86400 % 10}"')(n, g, t)
               if n % 2 == 0 else None, "sum")
        family("tarmac:pod_gpu_activity_seconds:sampled",
               lambda n, g, t: per_class(lambda n, g, t: f',namespace="ml",pod="trainer-{n}"')(n, g, t)
               if n % 2 == 1 else None, "sum")
        family("tarmac:user_gpu_activity_seconds:sampled",
               lambda n, g, t: per_class(lambda n, g, t: f',user="user{n % 50}"')(n, g, t)
               if recorded_class(n, g, t) in ("busy", "holding") else None, "sum")
        out.write("# EOF\n")


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
    keep = os.environ.get("KEEP")  # a folder to keep the recorded TSDB in, and to take it from next time
    work = pathlib.Path(keep) if keep else pathlib.Path(tempfile.mkdtemp(prefix="tarmac-fleet-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    kept = work / "recorded.json"
    prom = None
    try:
        now = int(time.time()) // RECORD * RECORD
        t_write = t_blocks = 0.0

        def to_blocks(path):
            nonlocal t_blocks
            t0 = time.monotonic()
            r = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                                f"--max-block-duration={BLOCK // 3600}h", str(path), str(work / "data")],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"promtool: {r.stderr[-2000:]}")
            t_blocks += time.monotonic() - t0
            path.unlink()

        # The recorded intervals end at now - k * RECORD; each block's in one file.
        stamps = [now - RECORD * k for k in reversed(range(DAYS * 86400 // RECORD))]
        # The hourly group evaluates at 30m07s past each hour (its own offset: never on a point of
        # the first group's), summing the hour before.
        hours = [h + 1807 for h in range(stamps[0] // 3600 * 3600, now, 3600) if stamps[0] <= h + 1807 <= now]

        def fine_in(e):
            return stamps[bisect.bisect_right(stamps, e - 3600):bisect.bisect_right(stamps, e)]
        expected = {}
        om_bytes = 0
        if kept.exists():
            state = json.loads(kept.read_text())
            if state["shape"] != [NODES, GPUS, DAYS, RECORD]:
                sys.exit(f"fleet_scale: {work} holds another fleet: {state['shape']}")
            now, expected, om_bytes = state["now"], state["expected"], state["om_bytes"]
            stamps = [now - RECORD * k for k in reversed(range(DAYS * 86400 // RECORD))]
        for block_start in sorted({t // BLOCK * BLOCK for t in stamps}) if not kept.exists() else ():
            in_block = [t for t in stamps if block_start <= t < block_start + BLOCK]
            hours_in_block = [e for e in hours if block_start <= e < block_start + BLOCK]
            t0 = time.monotonic()
            write_recorded(work / "recorded.om", in_block, hours_in_block, fine_in, expected)
            t_write += time.monotonic() - t0
            om_bytes += (work / "recorded.om").stat().st_size
            to_blocks(work / "recorded.om")
        if keep:
            kept.write_text(json.dumps({"shape": [NODES, GPUS, DAYS, RECORD], "now": now, "expected": expected,
                                        "om_bytes": om_bytes}))
        # The fleet's raw series last, ending at the time Prometheus starts: they must be fresh
        # (Prometheus looks 5 minutes back).
        t0 = time.monotonic()
        write_openmetrics(work / "fleet.om", int(time.time()))
        t_write += time.monotonic() - t0
        to_blocks(work / "fleet.om")
        (work / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={work / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                                 f"--storage.tsdb.retention.time={DAYS + 30}d", "--log.level=warn",
                                 # The blocks as promtool wrote them: no compaction while timing.
                                 "--storage.tsdb.min-block-duration=2h",
                                 f"--storage.tsdb.max-block-duration={BLOCK // 3600}h"],
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
        # The week's report: the queries tarmac asks (as src/tarmac/fleet/fleet_report.cpp), and tarmac.
        since = now - DAYS * 86400
        range_args = ["--since", f"{DAYS}d", "--until", f"@{now}"]

        def report(*extra):
            r = subprocess.run([TARMAC, *extra, "report", "--prometheus", url, *range_args], capture_output=True,
                               text=True, timeout=600)
            if r.returncode != 0:
                sys.exit(f"tarmac report: exit {r.returncode}: {r.stderr[-2000:]}")
            return r.stdout

        doc = json.loads(report("--json"))
        # Every host's seconds in every class, as read and as written (none: 0): over a day from the
        # hourly series, else from the 5-minute ones.
        series = "1h" if now - since > 86400 else "5m"
        expected = {k[3:]: v for k, v in expected.items() if k.startswith(series + "|")}
        got = {f"{h['host']}|{c}": v * 3600 for h in doc["hosts"] for c, v in h["hours"].items() if c != "unrecorded"}
        wrong = {k: (got.get(k, 0), expected.get(k, 0)) for k in set(got) | set(expected)
                 if abs(got.get(k, 0) - expected.get(k, 0)) > 1e-6 * expected.get(k, 0) + 1}
        if wrong or len(doc["gpus"]) != NODES * GPUS or len(doc["hosts"]) != NODES:
            sys.exit(f"tarmac report read {len(doc['gpus'])} GPUs on {len(doc['hosts'])} hosts; seconds by host and "
                     f"class (read, written) that differ: {dict(list(wrong.items())[:10])}")
        jobs = sum(1 for j in doc["jobs"] if not j["job"].startswith("pod/"))
        hourly = "1h" if now - since > 86400 else ""
        report_floor_queries = [q.replace("RANGE", f"{now - since}s").replace("H[", hourly + "[")
                                for q in REPORT_QUERIES]
        heat_query = HEAT_QUERY.replace("H[", hourly + "[")

        def report_floor():
            def ask(q):
                return len(urllib.request.urlopen(
                    f"{url}/api/v1/query?query={urllib.parse.quote(q)}&time={now}", timeout=600).read())

            def heat():
                return len(urllib.request.urlopen(
                    f"{url}/api/v1/query_range?query={urllib.parse.quote(heat_query)}&start={since // 3600 * 3600 + 3600}"
                    f"&end={now}&step=3600", timeout=600).read())
            with concurrent.futures.ThreadPoolExecutor(len(report_floor_queries) + 1) as pool:
                h = pool.submit(heat)
                return sum(pool.map(ask, report_floor_queries)) + h.result()

        report_bytes = report_floor()
        r_floors, reports, r_texts = [], [], []
        for _ in range(RUNS):
            t0 = time.monotonic()
            report_floor()
            r_floors.append(time.monotonic() - t0)
            t0 = time.monotonic()
            report("--json")
            reports.append(time.monotonic() - t0)
            t0 = time.monotonic()
            report()
            r_texts.append(time.monotonic() - t0)

        f_med, q_med = statistics.median(fleets), statistics.median(floors)
        print(f"fleet_scale: {NODES} nodes x {GPUS} GPUs = {NODES * GPUS} GPUs, {POINTS} points a series; "
              f"written in {t_write:.1f} s, blocks in {t_blocks:.1f} s")
        print(f"  the nine queries' answers: {body_bytes / 1e6:.1f} MB")
        print(f"  floor (urllib, the nine queries side by side, not parsed): median {q_med * 1000:.0f} ms")
        print(f"  tarmac --json fleet --prometheus:                         median {f_med * 1000:.0f} ms "
              f"(min {min(fleets) * 1000:.0f}, max {max(fleets) * 1000:.0f}); {f_med / q_med:.2f}x the floor")
        print(f"  tarmac fleet --prometheus (the table):                    median {statistics.median(texts) * 1000:.0f} ms")
        print(f"  goal < 1 s: {'met' if f_med < 1.0 else 'NOT met'}")
        r_med, rq_med = statistics.median(reports), statistics.median(r_floors)
        samples = NODES * GPUS * len(stamps)
        print(f"report_scale: {DAYS} days recorded every {RECORD} s: {samples / 1e6:.1f} M GPU-intervals "
              f"({om_bytes / 1e9:.1f} GB of OpenMetrics), {len(doc['jobs'])} jobs and pods ({jobs} Slurm jobs)")
        print(f"  the report's answers: {report_bytes / 1e6:.1f} MB")
        print(f"  floor (urllib, the report's queries side by side, not parsed): median {rq_med * 1000:.0f} ms")
        print(f"  tarmac --json report --prometheus --since {DAYS}d:             median {r_med * 1000:.0f} ms "
              f"(min {min(reports) * 1000:.0f}, max {max(reports) * 1000:.0f}); {r_med / rq_med:.2f}x the floor")
        print(f"  tarmac report --prometheus (the text):                       median "
              f"{statistics.median(r_texts) * 1000:.0f} ms")
        print(f"  goal < 5 s: {'met' if r_med < 5.0 else 'NOT met'}")
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(timeout=30)
            except subprocess.TimeoutExpired:
                prom.kill()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
