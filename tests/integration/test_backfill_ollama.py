"""A batch sent to a server that speaks Ollama's native protocol (docs/backfill.md "Ollama's
protocol"), through the real `tarmac` binary and agent on a held simulation, against the
protocol-faithful fake (fake_ollama.py, itself checked with Ollama's JavaScript client in
test_fake_ollama.py):

- chat and completion requests go out as streamed /api/chat and /api/generate with their options
  mapped, each custom_id is in the output exactly once, and the output's response bodies are OpenAI's
  (chat.completion, text_completion, usage), as they would be from an OpenAI-protocol server; an
  {"error": ...} line mid-stream is a failed request, sent again up to the server's retries;
- `tarmac backfill cancel` mid-batch closes the streams in flight: the fake sees its connections
  closed and stops generating;
- while the fake holds its model loaded it holds simulated GPU memory (a tarmac-sim-load on GPU 0,
  started and ended by its load and unload hooks), seen through NVML (`tarmac query`), and freed
  once the model is unloaded with keep_alive 0: what the yield will wait for."""
import collections
import json
import subprocess
import unittest
import urllib.request

from agent_support import BUILD, end_process, wait_for
from fake_ollama import FakeOllama
from test_sched_agent import SLOW, AgentQueueTest

REQUESTS = 30


def chat_line(custom_id, prompt, **extra):
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                       "body": dict({"messages": [{"role": "user", "content": prompt}]}, **extra)})


def completion_line(custom_id, prompt, **extra):
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/completions",
                       "body": dict({"prompt": prompt}, **extra)})


class BackfillOnOllama(AgentQueueTest):
    tokens = 4
    token_delay = 0.0

    def setUp(self):
        self.fake = FakeOllama(tokens=self.tokens, token_delay=self.token_delay).start()
        self.addCleanup(self.fake.stop)
        self.config = (f"\n[backfill.server.ollama]\nurl = \"{self.fake.url}\"\nprotocol = \"ollama\"\n"
                       "timeout = \"30s\"\nretries = 1\nmax_parallel = 4\n")
        super().setUp()

    def status(self, batch_id):
        r = self.tarmac("--json", "backfill", "status", str(batch_id))
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        return json.loads(r.stdout)

    def submit(self, lines, parallel):
        path = self.tmp / "in.jsonl"
        path.write_text("\n".join(lines) + "\n")
        out = self.tmp / "out.jsonl"
        r = self.tarmac("--json", "backfill", "submit", "--model", "tiny", "--input", str(path), "--output", str(out),
                        "--parallel", str(parallel))
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        return json.loads(r.stdout)["id"], out


class BatchOnOllama(BackfillOnOllama):
    def test_a_batch_completes_once_each_with_openai_bodies(self):
        lines = [chat_line(f"c{i}", f"chat number {i}", max_tokens=16, temperature=0.2, stop=["\n"])
                 for i in range(REQUESTS // 2)]
        lines += [completion_line(f"g{i}", f"complete number {i}", seed=i) for i in range(REQUESTS // 2 - 1)]
        lines.append(chat_line("short", "cut me short", max_tokens=2))
        lines.append(completion_line("broken", "FAIL_MIDSTREAM please"))
        batch_id, out = self.submit(lines, parallel=4)
        self.assertTrue(wait_for(lambda: self.status(batch_id)["state"] == "done", timeout=60 * SLOW, step=0.1),
                        f"{self.status(batch_id)}\n{self.agent_log()}")

        answers = [json.loads(line) for line in out.read_text().splitlines()]
        counts = collections.Counter(a["custom_id"] for a in answers)
        self.assertEqual(len(counts), len(lines))
        self.assertEqual([c for c in counts.values() if c != 1], [], "every custom_id exactly once")
        by_id = {a["custom_id"]: a for a in answers}
        for custom_id, answer in by_id.items():
            if custom_id == "broken":
                continue
            self.assertIsNone(answer["error"], answer)
            body = answer["response"]["body"]
            self.assertEqual(answer["response"]["status_code"], 200)
            self.assertEqual(body["model"], "tiny")
            if custom_id.startswith("g"):
                self.assertEqual(body["object"], "text_completion")
                text = body["choices"][0]["text"]
            else:
                self.assertEqual(body["object"], "chat.completion")
                self.assertEqual(body["choices"][0]["message"]["role"], "assistant")
                text = body["choices"][0]["message"]["content"]
            self.assertTrue(text.split()[0] in ("chat", "complete", "cut"), body)
        self.assertEqual(by_id["c0"]["response"]["body"]["usage"],
                         {"prompt_tokens": 3, "completion_tokens": self.tokens, "total_tokens": 3 + self.tokens})
        short = by_id["short"]["response"]["body"]
        self.assertEqual((short["choices"][0]["finish_reason"], short["usage"]["completion_tokens"]), ("length", 2))
        broken = by_id["broken"]
        self.assertEqual(broken["response"]["status_code"], 502)
        self.assertIn("FAIL_MIDSTREAM", broken["response"]["body"]["error"]["message"])
        self.assertIsNotNone(broken["error"])

        # What the fake was sent: native paths, streamed, options mapped; the broken one twice (retries = 1).
        with self.fake.lock:
            sent = list(self.fake.requests)
        paths = collections.Counter(path for path, _ in sent)
        self.assertEqual(paths, {"/api/chat": REQUESTS // 2 + 1, "/api/generate": REQUESTS // 2 - 1 + 2})
        self.assertTrue(all(body["stream"] is True for _, body in sent))
        c0 = next(body for path, body in sent if body.get("messages", [{}])[0].get("content") == "chat number 0")
        self.assertEqual(c0["options"], {"num_predict": 16, "temperature": 0.2, "stop": ["\n"]})
        final = self.status(batch_id)
        self.assertEqual((final["done"], final["failed"]), (len(lines) - 1, 1))


class CancelOnOllama(BackfillOnOllama):
    tokens = 1000000  # every answer endless: the requests are in flight when the batch is cancelled
    token_delay = 0.01

    def test_cancel_closes_the_streams_in_flight(self):
        batch_id, _ = self.submit([chat_line(f"c{i}", "go on") for i in range(6)], parallel=2)
        self.assertTrue(self.fake.wait_for(lambda: self.fake.active == 2, timeout=30 * SLOW),
                        f"active {self.fake.active}\n{self.agent_log()}")
        r = self.tarmac("backfill", "cancel", str(batch_id))
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        self.assertTrue(self.fake.wait_for(lambda: self.fake.cancelled == 2 and self.fake.active == 0,
                                           timeout=10 * SLOW),
                        f"cancelled {self.fake.cancelled}, active {self.fake.active}\n{self.agent_log()}")
        self.assertEqual(self.fake.completed, 0)
        self.assertEqual(self.status(batch_id)["state"], "cancelled")


class MemoryOnOllama(BackfillOnOllama):
    MODEL_MIB = 3072

    def setUp(self):
        self.loads = {}
        super().setUp()
        self.fake.on_load = self.hold_memory
        self.fake.on_unload = self.free_memory

    def hold_memory(self, name):
        self.loads[name] = subprocess.Popen(
            [str(BUILD / "sim" / "tarmac-sim-load"), "--mem", f"{self.MODEL_MIB}MiB", "--util", "0"],
            env=self.sim.env({"CUDA_VISIBLE_DEVICES": "0"}), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(end_process, self.loads[name])

    def free_memory(self, name):
        load = self.loads.pop(name, None)
        if load is not None:
            end_process(load)

    def used_mib(self):
        r = subprocess.run([str(BUILD / "tarmac"), "query", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                            "-i", "0"], env=self.sim.env(), capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout.strip())

    def test_a_loaded_model_holds_gpu_memory_until_unloaded(self):
        before = self.used_mib()
        batch_id, _ = self.submit([chat_line("a", "hello")], parallel=1)
        self.assertTrue(wait_for(lambda: self.status(batch_id)["state"] == "done", timeout=30 * SLOW, step=0.1),
                        f"{self.status(batch_id)}\n{self.agent_log()}")
        # Ollama keeps a model loaded after its last request (keep_alive, 5m by default).
        self.assertTrue(wait_for(lambda: self.used_mib() >= before + self.MODEL_MIB, timeout=20 * SLOW, step=0.1),
                        f"{self.used_mib()} MiB used, {before} before")
        self.assertEqual([m["name"] for m in self.fake.ps()["models"]], ["tiny:latest"])
        # The unload a yield sends (ollama::unload): no prompt, keep_alive 0.
        request = urllib.request.Request(self.fake.url + "/api/generate", method="POST",
                                         data=json.dumps({"model": "tiny", "keep_alive": 0}).encode())
        with urllib.request.urlopen(request, timeout=10) as answer:
            self.assertEqual(json.loads(answer.read())["done_reason"], "unload")
        self.assertTrue(wait_for(lambda: self.used_mib() <= before, timeout=20 * SLOW, step=0.1),
                        f"{self.used_mib()} MiB used, {before} before")
        self.assertEqual(self.fake.ps()["models"], [])


if __name__ == "__main__":
    unittest.main()
