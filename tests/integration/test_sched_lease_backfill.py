"""A lease takes GPUs back from backfill (docs/scheduler.md "Leases", docs/backfill.md "Yield"):
`tarmac agent --socket` on a held simulation of four free A100s, every GPU running a backfill job
(the simulator's load program), then `tarmac reserve`. The reserve waits (--wait, 30 s by default)
while the pass preempts one backfill job for it, and prints the lease once that job has ended; the
job waits in the queue again. `--wait 0` fails at once, as reserve did before, and leaves backfill
alone; `--json` prints the lease as it always has."""
import json
import re
import unittest

import test_sched_agent as sa
from test_sched import LOAD


class LeaseOverBackfill(sa.AgentQueueTest):
    config = 'backfill_idle = "1s"\n'

    def fill_every_gpu(self):
        fills = [self.submit(LOAD, "--seconds", "600", n=1, flags=("--backfill",)) for _ in range(4)]
        running = self.wait_jobs(fills, lambda j: j["state"] == "running", 60, "the backfill jobs did not all start")
        self.assertEqual(sorted(g for i in fills for g in running[i]["gpus"]), [0, 1, 2, 3])
        return fills

    def test_reserve_preempts_a_backfill_job_and_is_given_its_gpu(self):
        fills = self.fill_every_gpu()

        r = self.tarmac("reserve", "-n", "1", "--for", "2h", "--wait", "0")
        self.assertEqual(r.returncode, 1, f"{r.stdout}\n{r.stderr}")
        self.assertIn("backfill could yield GPU", r.stderr)
        self.assertEqual({i: (j["state"], j["requeues"]) for i, j in self.jobs().items()},
                         {i: ("running", 0) for i in fills}, "--wait 0 touched backfill or recorded a lease")

        r = self.tarmac("reserve", "-n", "1", "--for", "2h")
        self.assertEqual(r.returncode, 0, f"reserve: {r.stderr}\n{self.agent_log()}")
        said = re.search(r"lease (\d+): waiting for backfill job (\d+) to yield GPU (\d)", r.stderr)
        self.assertIsNotNone(said, f"reserve did not say what it waits for: {r.stderr!r}")
        lease, victim, gpu = (int(g) for g in said.groups())
        self.assertIn(victim, fills)
        self.assertIn(f"export CUDA_VISIBLE_DEVICES=", r.stdout)
        self.assertIn(f"TARMAC_JOB_ID={lease}", r.stdout)

        jobs = self.jobs()
        self.assertEqual((jobs[lease]["kind"], jobs[lease]["state"], jobs[lease]["gpus"]), ("lease", "active", [gpu]))
        self.assertEqual((jobs[victim]["state"], jobs[victim]["requeues"]), ("queued", 1),
                         f"the backfill job on GPU {gpu} was not preempted and queued again\n{self.agent_log()}")
        self.assertEqual({i: (jobs[i]["state"], jobs[i]["requeues"]) for i in fills if i != victim},
                         {i: ("running", 0) for i in fills if i != victim}, "more backfill gave way than needed")
        self.assertIn(f"preempting backfill job {victim} for lease {lease}", self.agent_log(20000))

        # --json: the lease as reserve always printed it, once given.
        r = self.tarmac("--json", "reserve", "-n", "1", "--for", "1h")
        self.assertEqual(r.returncode, 0, f"reserve --json: {r.stderr}\n{self.agent_log()}")
        second = json.loads(r.stdout)
        self.assertEqual((second["kind"], second["state"], len(second["gpus"])), ("lease", "active", 1))
        self.assertNotIn(second["gpus"][0], [gpu])
        preempted = [i for i, j in self.jobs().items() if i in fills and j["requeues"] == 1]
        self.assertEqual(len(preempted), 2, self.jobs())


if __name__ == "__main__":
    unittest.main()
