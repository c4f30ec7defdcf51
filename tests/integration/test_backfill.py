"""Batches end to end (docs/backfill.md "Commands"): `tarmac backfill submit|status|cancel|resume|
results` through the real binary against the agent on a held simulation, as in test_sched_agent.py.
What is checked: bad input is refused with its line and nothing is queued (no batch, no output file
left); a batch is recorded with its requests pending and its output made 0600; status and its JSON;
the batch survives kill -9 of the agent and its output is handed over again (the tail a crash left
past the store's end cut; another file refused, even while the agent holds the output); cancel;
results in input order.

SecondUserBatches (as root): a second user's batch and the agent's checks of the descriptors it is
handed, sent on the socket by a crafted client (CRAFT below, run as the second user) as the CLI
never would: a FIFO and an unsealed memfd as the input, root's file as the output; another user's
batch is "no batch N"; root's `results` reads a user's output with that user's rights."""
import json
import os
import pathlib
import socket
import stat
import subprocess
import threading
import time
import unittest

from devtools import demoted
from test_sched_agent import SLOW, TARMAC, AgentQueueTest, SecondUser

# A client that hands the agent crafted descriptors: CRAFT SOCKET MODE OUTPUT [ID]; prints the
# agent's answer (one JSON line). MODE: fifo (the input a FIFO), unsealed (an unsealed memfd),
# sealed (a sealed memfd, as the CLI sends), resume (OUTPUT handed over for batch ID).
CRAFT = r'''
import json, os, socket, sys
path, mode, output, *rest = sys.argv[1:]
line = json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                   "body": {"messages": [{"role": "user", "content": "hi"}]}}).encode() + b"\n"
out = os.open(output, os.O_RDWR | os.O_NOFOLLOW)
if mode == "resume":
    req, fds = {"op": "backfill_resume", "id": int(rest[0])}, [out]
else:
    if mode == "fifo":
        fifo = output + ".fifo"
        os.mkfifo(fifo)
        inp = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    else:
        inp = os.memfd_create("craft", os.MFD_ALLOW_SEALING)
        os.write(inp, line)
        if mode == "sealed":
            import fcntl
            fcntl.fcntl(inp, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    hour = (__import__("time").localtime().tm_hour + 3) % 24  # closed_window(): never sent
    req = {"op": "backfill_submit", "model": "m", "output_path": output,
           "window": f"{hour:02d}:00-{(hour + 1) % 24:02d}:00"}
    fds = [inp, out]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
socket.send_fds(s, [json.dumps(req).encode() + b"\n"], fds)
answer = b""
while not answer.endswith(b"\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    answer += chunk
print(answer.decode().strip())
'''


def closed_window():
    """A --window that is not now (local time): the batches here stay unsent, so what they check is
    the queue alone; test_backfill_llama.py sends them."""
    hour = (time.localtime().tm_hour + 3) % 24
    return f"{hour:02d}:00-{(hour + 1) % 24:02d}:00"


def request_line(custom_id, prompt="Say hi"):
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                       "body": {"messages": [{"role": "user", "content": prompt}], "max_tokens": 8}})


class BatchCommands:
    """`tarmac backfill` for the test classes below (a mixin of AgentQueueTest's)."""
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


class BackfillBatches(BatchCommands, AgentQueueTest):
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
        self.assertEqual(stat.S_IMODE(out.stat().st_mode), 0o600, "the answers are the submitter's alone")
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
        self.assertEqual(wrong.returncode, 2, "the agent holds the output, but checks the file it is given")
        self.assertIn("not batch", wrong.stderr)
        self.assertEqual(self.backfill("resume", str(batch["id"]), "--output", str(out)).returncode, 0)

        bad_id = self.backfill("cancel", "999")
        self.assertEqual(bad_id.returncode, 2)
        self.assertEqual(self.backfill("cancel", str(batch["id"])).returncode, 0)
        self.assertEqual(self.status_json(batch["id"])["state"], "cancelled")
        self.assertEqual(self.backfill("cancel", str(batch["id"])).returncode, 2)

    def test_an_output_is_removed_on_a_refusal_or_no_agent_and_kept_when_no_answer_came(self):
        inp = self.write_input([request_line("a")])
        # An agent that reads the request and hangs up without answering: it may have queued it.
        fake = self.tmp / "mute.sock"
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(fake))
        server.listen(1)

        def mute():
            conn, _ = server.accept()
            with conn:
                while b"\n" not in conn.recv(65536):
                    pass

        thread = threading.Thread(target=mute)
        thread.start()
        kept = self.tmp / "kept.jsonl"
        r = self.tarmac("backfill", "submit", "--model", "m", "--input", inp, "--output", str(kept),
                        env=self.env({"TARMAC_SOCKET": str(fake)}))
        thread.join()
        server.close()
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("backfill status", r.stderr)
        self.assertTrue(kept.exists(), "without an answer the batch may be queued with this file as its output")
        gone = self.tmp / "gone.jsonl"
        r = self.tarmac("backfill", "submit", "--model", "m", "--input", inp, "--output", str(gone),
                        env=self.env({"TARMAC_SOCKET": str(self.tmp / "no-agent.sock")}))
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertFalse(gone.exists(), "no agent was reached: nothing is queued")

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

    def test_the_agent_answers_others_while_it_reads_a_large_batch(self):
        # 40 MiB of requests take the agent a second or more to parse and store (longer under a
        # sanitizer); another user's `tarmac jobs` meanwhile is answered at once, not after it.
        pad = "x" * 2048
        inp = self.write_input([request_line(f"r{i}", pad) for i in range(20000)], "large.jsonl")
        out = self.tmp / "large-out.jsonl"
        t0 = time.monotonic()
        submit = subprocess.Popen([TARMAC, "--json", "backfill", "submit", "--model", "m", "--input", inp, "--output",
                                   str(out), "--window", closed_window()],
                                  env=self.env(), cwd=str(self.tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        try:
            deadline = time.monotonic() + 120 * SLOW
            while "reading a batch of" not in self.agent_log(20000):  # the event: its parse has begun
                if submit.poll() is not None:
                    self.fail(f"the submission ended before it was read: {submit.stderr.read()}{self.agent_log()}")
                self.assertLess(time.monotonic(), deadline, self.agent_log())
                time.sleep(0.02)
            t1 = time.monotonic()
            jobs = self.tarmac("--json", "jobs")
            answered_ms = (time.monotonic() - t1) * 1000
            self.assertEqual(jobs.returncode, 0, jobs.stderr)
            self.assertNotIn("read and stored in", self.agent_log(20000),
                             f"jobs was answered only once the batch was stored ({answered_ms:.0f} ms)")
            stdout, stderr = submit.communicate(timeout=300 * SLOW)
        finally:
            if submit.poll() is None:
                submit.kill()
                submit.wait()
        self.assertEqual(submit.returncode, 0, stderr + self.agent_log())
        self.assertEqual(json.loads(stdout)["requests"], 20000)
        print(f"\n  a 40 MiB batch was submitted in {(time.monotonic() - t0) * 1000:.0f} ms; `tarmac jobs` "
              f"meanwhile was answered in {answered_ms:.0f} ms", flush=True)
        batch = self.status_json()["batches"][0]
        self.assertEqual((batch["pending"], batch["requests"]), (20000, 20000))

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


@unittest.skipUnless(os.geteuid() == 0, "needs root to act as a second user")
class SecondUserBatches(BatchCommands, SecondUser):
    def setUp(self):
        super().setUp()
        self.home = self.tmp / "t2"  # the second user's own folder: its inputs and outputs
        self.home.mkdir()
        os.chown(self.home, self.pw.pw_uid, self.pw.pw_gid)

    def craft(self, mode, output, *rest):
        """The agent's answer to CRAFT MODE OUTPUT REST, run as the second user."""
        r = subprocess.run(["/usr/bin/python3", "-c", CRAFT, self.sock, mode, str(output), *map(str, rest)],
                           capture_output=True, text=True, timeout=60, preexec_fn=demoted(self.pw))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def own_file(self, name):
        path = self.home / name
        path.write_text("")
        os.chown(path, self.pw.pw_uid, self.pw.pw_gid)
        path.chmod(0o600)
        return path

    def submit_as_user(self, name="answers.jsonl"):
        inp = self.own_file("in.jsonl")
        inp.write_text(request_line("a") + "\n")
        out = self.home / name
        r = self.as_user("--json", "backfill", "submit", "--model", "m", "--input", str(inp), "--output", str(out))
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        return json.loads(r.stdout)["id"], out

    def test_the_agent_refuses_crafted_descriptors(self):
        for mode in ("fifo", "unsealed"):
            answer = self.craft(mode, self.own_file(f"out-{mode}.jsonl"))
            self.assertFalse(answer["ok"], mode)
            self.assertIn("sealed memfd", answer["error"], mode)
        roots = self.tmp / "roots.jsonl"  # root's file, which the second user may write to
        roots.write_text("")
        roots.chmod(0o666)
        answer = self.craft("sealed", roots)
        self.assertFalse(answer["ok"])
        self.assertIn("not the submitter's own file", answer["error"])
        good = self.craft("sealed", self.own_file("good.jsonl"))
        self.assertTrue(good["ok"], good)
        # Two batches on one file would overwrite each other's lines.
        again = self.craft("sealed", self.home / "good.jsonl")
        self.assertFalse(again["ok"])
        self.assertIn("already the output of batch", again["error"])
        self.assertEqual(len(self.status_json()["batches"]), 1, "only the good one was queued")

    def test_another_users_batch_is_no_batch_and_root_reads_it_with_its_owners_rights(self):
        root_batch = self.tarmac("--json", "backfill", "submit", "--model", "m", "--input",
                                 str(self.write_input([request_line("r")])), "--output", str(self.tmp / "r.jsonl"))
        self.assertEqual(root_batch.returncode, 0, root_batch.stderr)
        root_id = json.loads(root_batch.stdout)["id"]
        for args in (["status", str(root_id)], ["cancel", str(root_id)], ["results", str(root_id)]):
            r = self.as_user("backfill", *args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(f"no batch {root_id}", r.stderr, args)
            self.assertNotIn("root", r.stderr, "its owner is not named")

        batch_id, out = self.submit_as_user()
        self.assertEqual(out.stat().st_uid, self.pw.pw_uid)
        self.assertEqual(stat.S_IMODE(out.stat().st_mode), 0o600)
        out.write_text(json.dumps({"id": f"batch_req_{batch_id}_0", "custom_id": "a"}) + "\n")
        r = self.backfill("results", str(batch_id))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('"custom_id": "a"', r.stdout)
        # The owner swaps the output for a symlink to a file only root may read: root's results
        # must not follow it (it opens as the owner, never through a last symlink).
        out.unlink()
        out.symlink_to("/etc/shadow")
        r = self.backfill("results", str(batch_id))
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("cannot open", r.stderr)
        self.assertNotIn("lines of", r.stderr, "nothing of /etc/shadow was read")


if __name__ == "__main__":
    unittest.main()
