"""Batches end to end (docs/backfill.md "Commands"): `tarmac backfill submit|status|cancel|resume|
results` through the real binary against the agent on a held simulation, as in test_sched_agent.py.
What is checked: bad input is refused with its line and nothing is queued (no batch, no output file
left); a batch is recorded with its requests pending and its output owned by the submitter; status
and its JSON; the batch survives kill -9 of the agent and its output is handed over again (the tail
a crash left past the store's end cut); cancel; results in input order."""
import json
import os
import pathlib
import time
import unittest

from test_sched_agent import AgentQueueTest


def closed_window():
    """A --window that is not now (local time): the batches here stay unsent, so what they check is
    the queue alone; test_backfill_llama.py sends them."""
    hour = (time.localtime().tm_hour + 3) % 24
    return f"{hour:02d}:00-{(hour + 1) % 24:02d}:00"


def request_line(custom_id, prompt="Say hi"):
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                       "body": {"messages": [{"role": "user", "content": prompt}], "max_tokens": 8}})


class BackfillBatches(AgentQueueTest):
    # A server nobody listens on: the batches here wait outside their window, never sent.
    config = '\n[backfill.server.local]\nurl = "http://127.0.0.1:9"\n'

    def backfill(self, *args):
        if args and args[0] == "submit" and "--window" not in args:
            args = (*args, "--window", closed_window())
        return self.tarmac("backfill", *args)

    def status_json(self, batch_id=None):
        r = self.tarmac("--json", "backfill", "status", *([str(batch_id)] if batch_id else []))
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        return json.loads(r.stdout)

    def write_input(self, lines, name="in.jsonl"):
        path = self.tmp / name
        path.write_text("".join(line + "\n" for line in lines))
        return str(path)

    def test_bad_input_is_refused_with_its_line_and_nothing_is_queued(self):
        cases = [
            ([request_line("a"), "{\"custom_id\": \"b\", ", request_line("c")], "line 2: not valid JSON"),
            ([request_line("a"), request_line("b"), request_line("a")], "line 3: custom_id \"a\" is already on line 1"),
            ([request_line("a").replace("/v1/chat/completions", "/v1/embeddings")], "line 1: url \"/v1/embeddings\""),
        ]
        for i, (lines, words) in enumerate(cases):
            out = self.tmp / f"bad-{i}.jsonl"
            r = self.backfill("submit", "--model", "m", "--input", self.write_input(lines, f"bad-in-{i}.jsonl"),
                              "--output", str(out))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(words, r.stderr)
            self.assertFalse(out.exists(), "a refused batch leaves no output behind")
        unreadable = self.backfill("submit", "--model", "m", "--input", str(self.tmp / "missing.jsonl"),
                                   "--output", str(self.tmp / "x.jsonl"))
        self.assertEqual(unreadable.returncode, 2)
        self.assertIn("cannot read", unreadable.stderr)
        self.assertEqual(self.status_json()["batches"], [])

    def test_a_batch_is_recorded_survives_kill_nine_and_is_cancelled(self):
        inp = self.write_input([request_line(f"doc-{i}") for i in range(5)])
        out = self.tmp / "answers.jsonl"
        window = closed_window()
        r = self.backfill("submit", "--model", "llama3", "--input", inp, "--output", str(out), "--name", "nightly",
                          "--window", window, "--parallel", "4")
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        self.assertRegex(r.stdout, r"batch \d+ queued: 5 requests for llama3")
        self.assertEqual(out.stat().st_uid, os.getuid())
        batch = self.status_json()["batches"][0]
        self.assertEqual((batch["pending"], batch["done"], batch["requests"]), (5, 0, 5))
        self.assertEqual((batch["name"], batch["window"], batch["parallel"]), ("nightly", window, 4))
        self.assertEqual(batch["server"], "local", "the only configured server is the default")
        self.assertEqual(batch["output"], str(out))
        text = self.backfill("status", str(batch["id"]))
        self.assertIn("5 pending", text.stdout)

        # A crash left half a line past what the store accounts for; the agent dies with kill -9.
        out.write_text('{"id":"batch_req_1_0","custom_id":"doc-0","resp')
        self.kill_agent()
        self.start_agent()
        again = self.status_json(batch["id"])
        self.assertEqual(again["state"], "queued")
        self.assertIn("resume", again["reason"])
        r = self.backfill("resume", str(batch["id"]), "--output", str(out))
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        self.assertEqual(out.read_text(), "", "the torn line is cut")
        other = self.tmp / "other.jsonl"
        other.write_text("")
        wrong = self.backfill("resume", str(batch["id"]), "--output", str(other))
        self.assertEqual(wrong.returncode, 0, "the agent holds the output already: nothing to hand over")

        bad_id = self.backfill("cancel", "999")
        self.assertEqual(bad_id.returncode, 2)
        self.assertEqual(self.backfill("cancel", str(batch["id"])).returncode, 0)
        self.assertEqual(self.status_json(batch["id"])["state"], "cancelled")
        self.assertEqual(self.backfill("cancel", str(batch["id"])).returncode, 2)

    def test_a_server_that_is_not_configured_is_refused_at_submit(self):
        inp = self.write_input([request_line("a")])
        out = self.tmp / "never.jsonl"
        r = self.backfill("submit", "--model", "m", "--input", inp, "--output", str(out), "--server", "elsewhere")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no server 'elsewhere' is configured (configured: local)", r.stderr)
        self.assertFalse(out.exists())
        self.assertEqual(self.status_json()["batches"], [])

    def test_texts_and_a_template_become_requests(self):
        texts = self.tmp / "texts.json"
        texts.write_text(json.dumps(["first", "second", "third"]))
        out = self.tmp / "summaries.jsonl"
        r = self.backfill("submit", "--model", "m", "--texts", str(texts), "--template", "Summarise: {text}",
                          "--output", str(out))
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        self.assertIn("3 requests", r.stdout)
        no_slot = self.backfill("submit", "--model", "m", "--texts", str(texts), "--template", "Summarise",
                                "--output", str(self.tmp / "x.jsonl"))
        self.assertEqual(no_slot.returncode, 2)
        self.assertIn("{text}", no_slot.stderr)

    def test_results_come_in_input_order(self):
        inp = self.write_input([request_line(f"r{i}") for i in range(3)])
        out = self.tmp / "o.jsonl"
        r = self.tarmac("--json", "backfill", "submit", "--model", "m", "--input", inp, "--output", str(out),
                        "--window", closed_window())
        self.assertEqual(r.returncode, 0, r.stderr)
        batch_id = json.loads(r.stdout)["id"]
        # Lines as a server would have answered them, out of order (written here by hand: the batch
        # waits for its window), plus one that is not this batch's.
        lines = [{"id": f"batch_req_{batch_id}_{i}", "custom_id": f"r{i}", "response": None, "error": None}
                 for i in (2, 0, 1)]
        out.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"id": "someone else"}\n')
        r = self.backfill("results", str(batch_id))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([json.loads(line)["custom_id"] for line in r.stdout.splitlines()], ["r0", "r1", "r2"])
        self.assertIn("1 lines", r.stderr)


if __name__ == "__main__":
    unittest.main()
