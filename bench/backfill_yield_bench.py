#!/usr/bin/env python3
"""The yield of a managed server's GPU to a normal job (docs/backfill.md "Yield", issue 16
"Performance"). A benchmark, not a test: it prints figures and never fails on them.

On a held simulation of four free A100s, `tarmac agent` runs the real llama-server (llama.cpp on CPU,
the tiny random-weight model, from the peers cache) as a managed backfill server, as the second user,
with a batch sending to it. YIELDS times, while the batch has requests in flight, a normal job that
needs every GPU (`tarmac run -n 4 --detach -- /bin/sleep 0.5`) is submitted; the yield time is from
that submission to the job's start (the store's started time), which spans the batches' stop, the
server's SIGTERM (its grace, then SIGKILL) and the job's start. When the job has ended the server is
started again on the idle GPUs and the batch goes on. At the end every custom_id must be in the
output once (checked: a broken run's figures are not printed as if they were good).

Goals (issue 16): p50 < 2 s, p99 < 5 s over 20 yields; printed with their ratio (under 1 meets it).
Also the agent's own figure for each yield (the `backfill_yield` event's `ms`: from the batches'
stop until the server's job was queued again).

Needs root (the server runs as another account) and llama-server in the peers cache
(`scripts/peers.sh --llama-server`, ~/.cache/tarmac-peers or TARMAC_PEERS); without them it says so
and exits 0. It takes about 2 minutes on a 2-core machine: not part of ctest.

Usage: bench/backfill_yield_bench.py   (env: TARMAC_BUILD_DIR=build, YIELDS=20)
"""
import json
import math
import os
import pathlib
import sys
import time
import unittest

HERE = pathlib.Path(__file__).resolve().parent.parent
os.environ.setdefault("TARMAC_BUILD_DIR", str(HERE / "build"))
sys.path.insert(0, str(HERE / "tests" / "integration"))

from agent_support import query, wait_for  # noqa: E402
from test_backfill_llama import LLAMA_SERVER  # noqa: E402
from test_backfill_managed import ManagedLlamaServer  # noqa: E402
from test_sched_agent import SLOW  # noqa: E402

YIELDS = int(os.environ.get("YIELDS", "20"))
EVERY = 20  # answers between two yields
GOAL_P50_S = 2.0
GOAL_P99_S = 5.0


def percentile(values, p):
    """The nearest-rank percentile P (0-100) of VALUES."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(p / 100 * len(ranked)) - 1)]


class YieldBench(ManagedLlamaServer):
    def bench_yields(self):
        count = EVERY * YIELDS + 100  # room after the last yield for a slow poll to see one in flight
        batch_id, out = self.submit_texts("bench", count)
        yield_s = []
        for i in range(YIELDS):
            answered = 10 + EVERY * i
            self.wait_status(batch_id, lambda s: s["done"] >= answered and s["in_flight"] > 0,
                             f"the batch did not reach {answered} answers with requests in flight", timeout=120)
            submitted = time.time()
            job = self.submit("/bin/sleep", "0.5", n=4)
            self.assertTrue(wait_for(lambda: self.job(job)["started_unix_ms"] is not None, timeout=30 * SLOW,
                                     step=0.01), f"the normal job did not start: {self.jobs()}\n{self.agent_log()}")
            yield_s.append(self.job(job)["started_unix_ms"] / 1000 - submitted)
            print(f"  yield {i + 1}/{YIELDS}: {yield_s[-1]:.2f} s", file=sys.stderr, flush=True)
        self.wait_status(batch_id, lambda s: s["state"] == "done", "the batch did not finish", timeout=300)
        self.check_output(batch_id, out, count)
        events = [json.loads(d)["ms"] / 1000 for (d,) in
                  query(self.db, "SELECT detail FROM event WHERE kind = 'backfill_yield' ORDER BY ts_ms")]
        p50, p99 = percentile(yield_s, 50), percentile(yield_s, 99)
        print(f"\nbackfill yield, managed llama-server, {len(yield_s)} yields with requests in flight "
              f"(normal job submitted -> started):\n"
              f"  p50 {p50:.2f} s (goal < {GOAL_P50_S:.0f} s: ratio {p50 / GOAL_P50_S:.2f})\n"
              f"  p99 {p99:.2f} s (goal < {GOAL_P99_S:.0f} s: ratio {p99 / GOAL_P99_S:.2f})\n"
              f"  min {min(yield_s):.2f} s, max {max(yield_s):.2f} s; all: "
              + ", ".join(f"{y:.2f}" for y in sorted(yield_s)) + "\n"
              f"  the agent's yield events ({len(events)}): p50 {percentile(events, 50):.2f} s, "
              f"p99 {percentile(events, 99):.2f} s", flush=True)


def main():
    if os.geteuid() != 0:
        print("backfill_yield_bench: skipped: needs root (the agent runs the managed server as another account)")
        return 0
    if not LLAMA_SERVER.exists():
        print(f"backfill_yield_bench: skipped: llama-server is not in the peers cache ({LLAMA_SERVER}): "
              "run scripts/peers.sh --llama-server")
        return 0
    result = unittest.TextTestRunner(verbosity=0).run(YieldBench("bench_yields"))
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
