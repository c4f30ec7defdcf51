"""An external server's yield (docs/backfill.md "External servers", issue 16): an Ollama that tarmac
did not start (the fake, fake_ollama.py, run here as `ollama serve` on GPU 2 of the simulation, each
loaded model a tarmac-sim-load child of it that holds simulated memory there) serves a batch, and
someone else has loaded another model into it. A normal
job for one GPU starts on a free one and nothing yields; a normal job that needs every GPU arrives
while the batch has requests in flight: the scheduler sees that GPU 2 would be free if the server
unloaded (its listening socket's process and that process's children are NVML's process there),
the batch stops sending, both models are unloaded, the job starts, and the server is never signalled
(tarmac does not stop what it did not start). Once the job has left the GPUs the batch is sent
again, the model loads again, and the batch finishes, each custom_id once."""
import json
import signal
import subprocess
import sys
import time
import unittest
import urllib.request

from agent_support import free_port, http_get, query, wait_for
from test_backfill_llama import BatchQueueTest, answered_once
from test_backfill_managed_ollama import FAKE, SIM_LOAD
from test_sched_agent import SLOW

TEXTS = 40


class ExternalOllamaYield(BatchQueueTest):
    def setUp(self):
        self.port = free_port()
        self.http_port = free_port()
        self.listen = f"127.0.0.1:{self.http_port}"
        self.config = ('backfill_idle = "1s"\n\n[backfill.server.llm]\n'
                       f'url = "http://127.0.0.1:{self.port}"\nprotocol = "ollama"\nserver_user = "root"\n'
                       'timeout = "30s"\nretries = 6\nmax_parallel = 4\n')
        super().setUp()
        self.events = self.tmp / "fake-events"
        env = self.sim.env({"CUDA_VISIBLE_DEVICES": "2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        self.fake = subprocess.Popen(
            [sys.executable, str(FAKE), "serve", "--port", str(self.port), "--tokens", "20", "--token-delay", "0.05",
             "--model", "tiny", "--model", "other", "--hold-mem", "2048MiB", "--sim-load", str(SIM_LOAD),
             "--events", str(self.events)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.addCleanup(self.end_fake)
        self.assertTrue(self.fake.stdout.readline().startswith("http://"), "the fake did not start")

    def end_fake(self):
        if self.fake.poll() is None:
            self.fake.send_signal(signal.SIGTERM)
            self.fake.wait(timeout=30)

    def diagnostics(self):
        return f"fake: {self.events.read_text() if self.events.exists() else ''}"

    def fake_events(self):
        return self.events.read_text().splitlines() if self.events.exists() else []

    def batches_on_cards(self):
        """GPU index -> the batches /api/v1/gpus shows on its card (what the dashboard draws)."""
        status, _, body = http_get(self.http_port, "/api/v1/gpus")
        if status != 200:
            return {}
        return {g["index"]: g["backfill"] for g in json.loads(body)["gpus"] if g["backfill"]}

    def yields(self):
        return [json.loads(d) for (d,) in query(self.db, "SELECT detail FROM event WHERE kind = 'backfill_yield'")]

    def test_the_server_unloads_for_a_job_that_needs_its_gpu_and_is_sent_to_again_after_it(self):
        t0 = time.monotonic()
        batch_id, out = self.submit_texts(TEXTS)
        self.wait_status(batch_id, lambda s: s["done"] >= 2 and s["in_flight"] > 0,
                         "the batch did not reach 2 answers with requests in flight")
        self.assertTrue(wait_for(lambda: f"listens on port {self.port}" in self.agent_log(100000), timeout=30 * SLOW),
                        f"the agent did not find the server's process\n{self.agent_log()}")
        # The card of GPU 2, where its runner is, shows the batch, and no other card does.
        seen = {}
        self.assertTrue(wait_for(lambda: seen.update(self.batches_on_cards()) or seen, timeout=30 * SLOW, step=0.05),
                        f"no card showed the batch: {self.status(batch_id)}\n{self.agent_log()}")
        self.assertEqual(list(seen), [2], seen)
        self.assertEqual((seen[2][0]["server"], seen[2][0]["model"]), ("llm", "tiny"), seen)

        # One GPU is free elsewhere: the job starts there, and the server is not asked for anything.
        one = self.submit("/bin/sleep", "0.2", n=1)
        self.assertTrue(wait_for(lambda: self.job(one)["state"] == "done", timeout=30 * SLOW, step=0.05),
                        f"{self.jobs()}\n{self.agent_log()}")
        self.assertEqual(self.yields(), [])
        self.assertEqual(self.fake_events(), ["load tiny:latest"])
        # Someone else loads another model into the shared server, for ever: its runner is on GPU 2 too.
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/api/generate", method="POST",
                                         data=json.dumps({"model": "other", "keep_alive": -1}).encode())
        with urllib.request.urlopen(request, timeout=30) as answer:
            self.assertEqual(answer.status, 200)

        job = self.submit("/bin/sleep", "0.5", n=4)  # every GPU: the server's must be given back
        self.assertTrue(wait_for(lambda: self.job(job)["started_unix_ms"] is not None, timeout=30 * SLOW, step=0.02),
                        f"the normal job did not start: {self.jobs()}\n{self.agent_log()}")
        self.assertIsNone(self.fake.poll(), "the external server was stopped")
        self.wait_status(batch_id, lambda s: s["state"] == "done", "the batch did not finish after the job")
        answered_once(self, out, TEXTS)

        # The fake's order: both models loaded, both unloaded (the other one too: its runner held the
        # GPU as well) and their memory freed, which let the job start; the batch's loaded again once
        # it was sent to again; never signalled.
        events = self.fake_events()
        self.assertEqual(events[:2], ["load tiny:latest", "load other:latest"], "\n".join(events))
        self.assertEqual(sorted(events[2:6]), ["freed other:latest", "freed tiny:latest", "unload other:latest",
                                               "unload tiny:latest"], "\n".join(events))
        self.assertEqual(events[6:7], ["load tiny:latest"], "\n".join(events))
        self.assertFalse([e for e in events if e.startswith("sigterm")], events)
        yields = self.yields()
        self.assertEqual(len(yields), 1, yields)
        y = yields[0]
        self.assertEqual((y["server"], y["external"], y["for_job"], y["unloaded"]), ("llm", True, job, True), y)
        self.assertEqual(len(y["gpus"]), 1, y)
        self.assertIsNone(y["memory_confirmed"], y)
        log = self.log_path.read_text(errors="replace").splitlines()
        asked = next(i for i, line in enumerate(log) if "asking backfill server llm to unload" in line)
        again = next(i for i, line in enumerate(log) if "its batches are sent again" in line)
        self.assertLess(asked, again, "\n".join(log))
        status = self.status(batch_id)
        self.assertEqual(status["done"], TEXTS, status)
        # Its GPU time: one GPU while it was sent to, written on the tick after it ended; not the yield's.
        gpu_s = self.wait_status(batch_id, lambda s: s["gpu_hours"] > 0, "no GPU time")["gpu_hours"] * 3600
        self.assertGreater(gpu_s, 0.1, status)
        # One GPU at most, for at most the batch's own span (and not the job's time on it).
        span_s = (status["ended_unix_ms"] - status["started_unix_ms"]) / 1000
        self.assertLessEqual(gpu_s, span_s + 0.5, status)
        self.assertLess(gpu_s, time.monotonic() - t0, status)
        print(f"\nexternal yield: the model unloaded {y['ms']} ms after the scheduler asked "
              f"({y['interrupted']} requests in flight back to pending)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    unittest.main()
