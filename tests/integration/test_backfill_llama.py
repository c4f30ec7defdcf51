"""A batch sent to a real LLM server (docs/backfill.md "Dispatch"): llama.cpp's llama-server on CPU
with a tiny random-weight model (data/tiny-llama.gguf, data/make_tiny_gguf.py), through the real
`tarmac` binary and agent on a held simulation. 200 texts and a template complete with each
custom_id exactly once in the output, across kill -9 of the agent mid-batch (then `resume`) and
kill -9 of llama-server mid-request (restarted on its port: the requests it dropped are sent again).

llama-server comes from Debian sid, run through sid's own loader from the peers cache:
`scripts/peers.sh --llama-server` fetches it (scripts/test.sh does); without it the test is skipped,
naming that command."""
import collections
import json
import os
import signal
import pathlib
import subprocess
import time
import unittest

from agent_support import end_process, free_port, wait_for
from test_sched_agent import SLOW, AgentQueueTest

PEERS = pathlib.Path(os.environ.get("TARMAC_PEERS") or pathlib.Path.home() / ".cache" / "tarmac-peers")
LLAMA_SERVER = PEERS / "llama-server" / "bin" / "llama-server"
MODEL = pathlib.Path(__file__).resolve().parent / "data" / "tiny-llama.gguf"
TOKENS = 8  # each answer's length: the tiny model never samples its end token (make_tiny_gguf.py)
TEXTS = 200


def answered_once(test, out, texts):
    """The output OUT's lines, each of text-0 ... text-(TEXTS-1) answered exactly once, without an error."""
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    counts = collections.Counter(line["custom_id"] for line in lines)
    test.assertEqual(set(counts), {f"text-{i}" for i in range(texts)})
    test.assertEqual([c for c in counts.values() if c != 1], [], "every custom_id exactly once")
    for line in lines:
        test.assertIsNone(line["error"], line)
    return lines


class LlamaServer:
    """llama-server on 127.0.0.1:PORT with the tiny model: one thread, 4 slots, TOKENS per answer."""

    def __init__(self, port, log_path):
        self.port = port
        self.log_path = log_path
        self.proc = None

    def start(self, timeout=30):
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                [str(LLAMA_SERVER), "-m", str(MODEL), "--host", "127.0.0.1", "--port", str(self.port), "-np", "4",
                 "-c", "2048", "-n", str(TOKENS), "-t", "1"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        import urllib.request

        def healthy():
            if self.proc.poll() is not None:
                raise AssertionError(f"llama-server exited {self.proc.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False
        if not wait_for(healthy, timeout=timeout * SLOW, step=0.05):
            raise AssertionError(f"llama-server not healthy within {timeout}s: {self.log()}")

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def go_on(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            end_process(self.proc)

    def log(self, tail=2000):
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""


@unittest.skipUnless(LLAMA_SERVER.exists(),
                     f"llama-server is not in the peers cache ({LLAMA_SERVER}): run scripts/peers.sh --llama-server")
class BatchQueueTest(AgentQueueTest):
    """An agent's queue with batches: their status, and a wait for one."""

    def diagnostics(self):
        """More to print when a wait fails: the server's log."""
        return ""

    def status(self, batch_id):
        r = self.tarmac("--json", "backfill", "status", str(batch_id))
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        return json.loads(r.stdout)

    def submit_texts(self, count, parallel=4):
        """`tarmac backfill submit` of COUNT texts for model tiny; returns (batch id, output path)."""
        texts = self.tmp / "texts.json"
        texts.write_text(json.dumps([f"document number {i} about the water" for i in range(count)]))
        out = self.tmp / "out.jsonl"
        r = self.tarmac("--json", "backfill", "submit", "--model", "tiny", "--texts", str(texts),
                        "--template", "Summarise: {text}", "--output", str(out), "--parallel", str(parallel))
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        return json.loads(r.stdout)["id"], out

    def wait_status(self, batch_id, predicate, what, timeout=60, step=0.05):
        """Polls batch BATCH_ID's status until PREDICATE(status); returns it. Fails naming WHAT."""
        last = {}

        def check():
            last.update(self.status(batch_id))
            return predicate(last)
        self.assertTrue(wait_for(check, timeout=timeout * SLOW, step=step),
                        f"{what}: {last}\n{self.agent_log()}\n{self.diagnostics()}")
        return last


class BackfillOnLlamaServer(BatchQueueTest):
    def setUp(self):
        self.port = free_port()
        self.config = (f"\n[backfill.server.llama]\nurl = \"http://127.0.0.1:{self.port}\"\ntimeout = \"30s\"\n"
                       "retries = 6\nmax_parallel = 4\n")
        super().setUp()
        self.llama = LlamaServer(self.port, self.tmp / "llama.log")
        self.addCleanup(self.llama.stop)
        self.llama.start()

    def diagnostics(self):
        return self.llama.log()

    def wait_answered(self, batch_id, at_least, timeout=120):
        return self.wait_status(batch_id, lambda s: s["done"] + s["failed"] >= at_least,
                                f"{at_least} answers not reached", timeout=timeout, step=0.1)

    def step_until(self, batch_id, at_least):
        """Lets the server answer in slices of 0.1 s, paused (SIGSTOP) while the test looks, until the
        batch has AT_LEAST answers; returns its status with the server paused: however slow the
        test's polls are (the sanitizers), the batch cannot run out meanwhile."""
        last = {}
        deadline = time.monotonic() + 120 * SLOW
        while True:
            last = self.status(batch_id)
            if last["done"] + last["failed"] >= at_least or time.monotonic() > deadline:
                break
            self.llama.go_on()
            time.sleep(0.1)
            self.llama.pause()
        self.assertGreaterEqual(last["done"] + last["failed"], at_least, f"{last}\n{self.agent_log()}")
        return last

    def test_a_batch_of_texts_completes_once_each_across_kill_nine_of_agent_and_server(self):
        t0 = time.monotonic()
        texts = self.tmp / "texts.json"
        texts.write_text(json.dumps([f"document number {i} about the water" for i in range(TEXTS)]))
        out = self.tmp / "summaries.jsonl"
        r = self.tarmac("--json", "backfill", "submit", "--model", "tiny", "--texts", str(texts), "--template",
                        "Summarise: {text}", "--output", str(out), "--parallel", "4")
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        batch_id = json.loads(r.stdout)["id"]

        # kill -9 of the agent mid-batch (the server paused, so that the batch is mid-batch when the
        # kill comes); the restarted agent waits for the output to be handed over.
        self.llama.pause()
        self.step_until(batch_id, 40)
        self.kill_agent()
        self.start_agent()
        self.assertIn("resume", self.status(batch_id)["reason"])
        r = self.tarmac("backfill", "resume", str(batch_id), "--output", str(out))
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())

        # kill -9 of llama-server with requests in flight; restarted on its port, the dropped
        # requests are sent again (the dispatcher's retries).
        mid = self.step_until(batch_id, 80)
        self.assertTrue(wait_for(lambda: self.status(batch_id)["in_flight"] > 0, timeout=30 * SLOW, step=0.1),
                        f"nothing in flight to the paused server: {self.status(batch_id)}\n{self.agent_log()}")
        self.assertGreater(mid["in_flight"] + mid["pending"], 0)
        self.llama.kill()
        time.sleep(0.3)  # let the agent find the server gone (connection refused, then backoff)
        self.llama.start()

        self.assertTrue(wait_for(lambda: self.status(batch_id)["state"] == "done", timeout=120 * SLOW, step=0.2),
                        f"{self.status(batch_id)}\n{self.agent_log()}\n{self.llama.log()}")
        elapsed = time.monotonic() - t0

        lines = answered_once(self, out, TEXTS)
        for line in lines:
            self.assertEqual(line["response"]["status_code"], 200)
            body = line["response"]["body"]
            self.assertEqual(body["object"], "chat.completion")
            self.assertEqual(body["usage"]["completion_tokens"], TOKENS)
            self.assertTrue(body["choices"][0]["message"]["content"].strip(), "a real generation")
            self.assertEqual(body["choices"][0]["finish_reason"], "length")
            # Streamed (docs/backfill.md "Streaming") and put back together from its events: the
            # server's whole answers carry its "timings", its streams carry them in the last event.
            self.assertNotIn("timings", body)
            self.assertTrue(body["id"].startswith("chatcmpl-"), body)
        final = self.status(batch_id)
        self.assertEqual((final["done"], final["failed"], final["pending"]), (TEXTS, 0, 0))
        self.assertEqual(final["completion_tokens"], TEXTS * TOKENS)
        self.assertGreater(final["tokens_per_s"], 0)
        results = self.tarmac("backfill", "results", str(batch_id))
        self.assertEqual([json.loads(line)["custom_id"] for line in results.stdout.splitlines()],
                         [f"text-{i}" for i in range(TEXTS)], "results in input order")
        print(f"\n{TEXTS} requests through tarmac and llama-server, with both killed once: {elapsed:.1f} s, "
              f"{final['tokens_per_s']:.0f} tokens/s", flush=True)


if __name__ == "__main__":
    unittest.main()
