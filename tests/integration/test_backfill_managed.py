"""A managed server (docs/backfill.md "Managed servers"): the agent starts the real llama-server
(llama.cpp, on CPU, with the tiny random-weight model) as a backfill job of its scheduler on a
simulated idle GPU, as an account of its own (the second user, never root), sends a batch to it
once its /health answers, and stops it when the batch is done. Then the yield: a normal job that
needs every GPU arrives mid-batch; the batch stops sending (its requests in flight back to
pending), the server is stopped, the job starts, and when the job ends the server is started again
and the batch finishes, each custom_id exactly once; three times in one batch. The yield times (the
normal job's submission to its start) are printed.

llama-server comes from the peers cache (`scripts/peers.sh --llama-server`); the cache lives in
root's home, which the second user cannot enter, so the test links it into a folder of its own."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from agent_support import free_port, http_get, query, wait_for
from devtools import second_user
from test_backfill_llama import LLAMA_SERVER, MODEL, TOKENS, BatchQueueTest, answered_once
from test_sched_agent import SLOW, AgentQueueTest

TEXTS = 50


def server_tree(into):
    """The peers cache's llama-server under INTO (hard links where one file system allows, else a copy),
    its wrapper script rewritten to the new place; the wrapper's path."""
    source = LLAMA_SERVER.parent.parent
    target = pathlib.Path(into) / "llama-server"
    if subprocess.run(["cp", "-al", str(source), str(target)], capture_output=True).returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True)
    # peers.sh links ggml's CPU backends beside the loader with absolute links into the cache: point
    # them at the linked tree, which the second user can reach.
    for link in target.rglob("*"):
        if link.is_symlink() and os.readlink(link).startswith(str(source)):
            pointed = os.readlink(link).replace(str(source), str(target))
            link.unlink()
            link.symlink_to(pointed)
    wrapper = target / "bin" / "llama-server"
    text = wrapper.read_text().replace(str(source), str(target))
    wrapper.unlink()  # a hard link: the cache's own wrapper must stay as it is
    wrapper.write_text(text)
    wrapper.chmod(0o755)
    return wrapper


def kill_under(folder, signo=signal.SIGKILL):
    """SIGNO to every process whose command line names FOLDER (the servers this test started).
    SIGKILL goes to each one's process group too (not this test's own): what a server started (the
    fake Ollama's tarmac-sim-load children) names no folder, and was left running after the test."""
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if str(folder).encode() in (entry / "cmdline").read_bytes():
                pid = int(entry.name)
                group = os.getpgid(pid)
                if signo == signal.SIGKILL and group != os.getpgrp():
                    os.killpg(group, signo)
                else:
                    os.kill(pid, signo)
        except OSError:
            continue


@unittest.skipUnless(LLAMA_SERVER.exists(),
                     f"llama-server is not in the peers cache ({LLAMA_SERVER}): run scripts/peers.sh --llama-server")
@unittest.skipUnless(os.geteuid() == 0, "needs root: the agent runs the managed server as another account")
class ManagedLlamaServer(BatchQueueTest):
    def setUp(self):
        self.peer_dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-managed-"))
        self.peer_dir.chmod(0o755)
        self.addCleanup(shutil.rmtree, str(self.peer_dir), True)
        self.addCleanup(kill_under, self.peer_dir)
        user = second_user(self).pw_name
        wrapper = server_tree(self.peer_dir)
        self.model = self.peer_dir / "tiny.gguf"
        shutil.copyfile(MODEL, self.model)
        self.model.chmod(0o644)
        command = [str(wrapper), "-m", "{model}", "--port", "{port}", "--host", "127.0.0.1", "-np", "4", "-c", "2048",
                   "-n", str(TOKENS), "-t", "1"]
        self.http_port = free_port()
        self.listen = f"127.0.0.1:{self.http_port}"
        self.config = ('backfill_idle = "1s"\n\n[backfill.server.llama]\nkind = "managed"\n'
                       f"command = {json.dumps(command)}\nuser = \"{user}\"\nready_timeout = \"30s\"\n"
                       'timeout = "30s"\nretries = 6\nmax_parallel = 4\n')
        super().setUp()

    def server_jobs(self):
        return [j for j in self.jobs().values() if j["name"] == "backfill-server-llama"]

    def submit_texts(self, name, count=TEXTS):
        texts = self.tmp / f"{name}.json"
        texts.write_text(json.dumps([f"document number {i} about the water" for i in range(count)]))
        out = self.tmp / f"{name}.jsonl"
        r = self.tarmac("--json", "backfill", "submit", "--model", str(self.model), "--texts", str(texts),
                        "--template", "Summarise: {text}", "--output", str(out), "--parallel", "4")
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        return json.loads(r.stdout)["id"], out

    def diagnostics(self):
        return self.server_logs()

    def server_logs(self):
        out = ""
        for log in sorted((self.state / "logs").glob("*.log")):
            out += f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}\n"
        return out

    def check_output(self, batch_id, out, count=TEXTS):
        for line in answered_once(self, out, count):
            self.assertEqual(line["response"]["body"]["usage"]["completion_tokens"], TOKENS)
        final = self.status(batch_id)
        self.assertEqual((final["done"], final["failed"], final["pending"]), (count, 0, 0))

    def wait_server_stopped(self):
        self.assertTrue(wait_for(lambda: all(j["state"] in ("done", "cancelled") for j in self.server_jobs()),
                                 timeout=30 * SLOW, step=0.1),
                        f"the server's job did not end once its batch was done: {self.server_jobs()}\n"
                        f"{self.agent_log()}")

    def batches_on_cards(self):
        """GPU index -> the batches /api/v1/gpus shows on its card (what the dashboard draws)."""
        status, _, body = http_get(self.http_port, "/api/v1/gpus")
        if status != 200:
            return {}
        return {g["index"]: g["backfill"] for g in json.loads(body)["gpus"] if g["backfill"]}

    def test_a_batch_runs_on_a_managed_server_started_on_an_idle_gpu(self):
        t0 = time.monotonic()
        count = 4 * TEXTS  # sent for long enough to be seen
        batch_id, out = self.submit_texts("first", count)
        # While it is sent, the card of the GPU its server runs on shows it, and no other card does.
        seen = {}
        self.assertTrue(wait_for(lambda: seen.update(self.batches_on_cards()) or seen, timeout=60 * SLOW, step=0.05),
                        f"no card showed the batch: {self.status(batch_id)}\n{self.agent_log()}")
        # status through the agent names it on that GPU too: its server is backfill, not somebody's work.
        # The server is paused as soon as the card shows the batch, so that it is still sent while
        # status asks. Not under the sanitizers: there a batch this size can be done before the pause
        # (CI's asan run, twice); test_status_agent covers what status makes of the agent's answer.
        said = {}

        def status_says():
            r = self.tarmac("--json", "status")
            said.update({g["index"]: g["backfill"] for g in json.loads(r.stdout)["gpus"] if g["backfill"]}
                        if r.returncode == 0 and r.stdout.startswith("{") else {})
            return said
        sanitized = bool(os.environ.get("TARMAC_COMPAT_PRELOAD"))
        if not sanitized:
            kill_under(self.peer_dir, signal.SIGSTOP)
            try:
                self.assertTrue(wait_for(status_says, timeout=30 * SLOW, step=0.05),
                                f"cards: {self.batches_on_cards()}\n{self.agent_log()}")
            finally:
                kill_under(self.peer_dir, signal.SIGCONT)
        self.assertEqual(len(seen), 1, seen)
        (shown,) = next(iter(seen.values()))
        self.assertEqual(shown["model"], str(self.model))
        self.assertEqual((shown["server"], shown["requests"]), ("llama", count), shown)
        self.assertNotIn("user", shown, "anyone reads /api/v1/gpus: not whose batch it is")
        self.assertEqual(self.server_jobs()[0]["gpus"], list(seen), "the card of the server's own GPU")
        if not sanitized:
            self.assertEqual(list(said), list(seen))
            (named,) = next(iter(said.values()))
            self.assertEqual((named["model"], named["server"], named["requests"]), (str(self.model), "llama", count),
                             named)
        self.wait_status(batch_id, lambda s: s["state"] == "done", "the batch did not complete")
        elapsed = time.monotonic() - t0
        self.check_output(batch_id, out, count)
        # When it ran: one span, inside the test's own time.
        windows = self.status(batch_id)["windows"]
        self.assertEqual(len(windows), 1, windows)
        self.assertLessEqual(windows[0]["start_unix_ms"], windows[0]["end_unix_ms"])
        self.assertLess(abs(windows[0]["end_unix_ms"] / 1000 - time.time()), 60 * SLOW, windows)
        # Its server's GPU time, from its start to the batch's end, is the batch's (written on the
        # agent's tick after the batch ended): at most the whole test.
        gpu_s = self.wait_status(batch_id, lambda s: s["gpu_hours"] > 0, "no GPU time")["gpu_hours"] * 3600
        self.assertGreater(gpu_s, 0.1, self.status(batch_id))
        self.assertLess(gpu_s, elapsed + 1, self.status(batch_id))
        servers = self.server_jobs()
        self.assertEqual(len(servers), 1, servers)
        self.assertTrue(servers[0]["backfill"], servers[0])
        self.assertEqual(servers[0]["user"], second_user(self).pw_name, "never root")
        self.wait_server_stopped()
        print(f"\n{count} requests through a managed llama-server, started on an idle GPU: {elapsed:.1f} s, "
              f"{gpu_s:.1f} GPU-seconds", flush=True)

    def test_normal_jobs_take_the_gpu_back_mid_batch_three_times_and_the_batch_finishes_after(self):
        # Room after the third yield's 90 answers: under the sanitizers each `backfill status` the
        # test polls with, and the normal job's submission, are slow: leave the batch room.
        count = 12 * TEXTS
        batch_id, out = self.submit_texts("yield", count)
        yield_s = []
        for round_, answered in enumerate((10, 50, 90)):
            # Mid-batch: this many answered and more to come. Not "requests in flight" at the moment
            # of a poll as well: under the sanitizers a poll (a `backfill status`) takes a large part
            # of a second, and a CI run saw the whole rest of the batch answered without any poll
            # catching both (the server is paused below, so the job still arrives mid-batch).
            self.wait_status(batch_id, lambda s: answered <= s["done"] < count,
                             f"the batch did not reach {answered} answers mid-batch")
            # The server is paused while the job is submitted, so that the batch is mid-batch when the
            # job arrives however slow the submission is (the sanitizers); it goes on at once after.
            # A SIGTERM that reaches it paused costs it about 1 s more to exit: the yield times printed
            # here are not the measurement, bench/backfill_yield_bench.py's are (it pauses nothing).
            kill_under(self.peer_dir, signal.SIGSTOP)
            submitted = time.time()
            # Every GPU: the server's must be given back. The job runs until the test has read the
            # status below (the server starts again a backfill_idle after the job ends), however slow
            # the test's polls are (the sanitizers).
            release = self.tmp / f"release-{answered}"
            job = self.submit("/bin/sh", "-c", f"while [ ! -e {release} ]; do sleep 0.05; done", n=4)
            # Still paused until the batches have stopped sending to it (logged before its SIGTERM):
            # however slow the agent is to yield (the sanitizers), the server cannot finish the batch
            # in the meantime.
            self.assertTrue(wait_for(lambda: self.log_path.read_text(errors="replace").count(" yields to ") > round_,
                                     timeout=30 * SLOW, step=0.02),
                            f"the batches did not stop sending for the job\n{self.agent_log()}")
            kill_under(self.peer_dir, signal.SIGCONT)
            self.assertTrue(wait_for(lambda: self.job(job)["started_unix_ms"] is not None, timeout=30 * SLOW,
                                     step=0.02),
                            f"the normal job did not start: {self.jobs()}\n{self.agent_log()}")
            yield_s.append(self.job(job)["started_unix_ms"] / 1000 - submitted)
            mid = self.status(batch_id)
            self.assertLess(mid["done"], count, "the normal job arrived mid-batch")
            self.assertEqual(mid["in_flight"], 0, f"nothing in flight while the server is stopped: {mid}")
            release.touch()
        self.wait_status(batch_id, lambda s: s["state"] == "done", "the batch did not finish after the jobs")
        self.check_output(batch_id, out, count)
        servers = self.server_jobs()
        self.assertEqual(len(servers), 1, servers)
        self.assertEqual(servers[0]["requeues"], 3, servers)
        log = self.log_path.read_text(errors="replace")
        yields = [line.split("info: ", 1)[-1] for line in log.splitlines() if "backfill: yield: server llama" in line]
        self.assertEqual(len(yields), 3, log)
        # Each time the batches stop sending (requests in flight back to pending) before the server is
        # signalled (the scheduler logs its SIGTERM after sending it).
        order = [line for line in log.splitlines() if "preempting backfill job" in line or "yields to job" in line]
        self.assertEqual(["yields to job" in line for line in order], [True, False] * 3, log)
        # Each yield is an event in the store, with its duration.
        events = [json.loads(d) for (d,) in query(self.db, "SELECT detail FROM event WHERE kind = 'backfill_yield' "
                                                           "ORDER BY ts_ms")]
        self.assertEqual([(e["server"], e["for_job"] > 0, e["ms"] >= 0) for e in events], [("llama", True, True)] * 3)
        # llama-server has no unload: nothing to wait for before its SIGTERM, so NVML is not asked.
        self.assertEqual([(e["memory_confirmed"], e["memory_freed_ms"]) for e in events], [(None, None)] * 3)
        self.wait_server_stopped()
        print("\nyields: normal job submitted -> started in " + ", ".join(f"{y:.2f}" for y in yield_s) + " s\n  "
              + "\n  ".join(yields) + "\n  " + "\n  ".join(o.split("info: ", 1)[-1] for o in order), flush=True)

@unittest.skipUnless(os.geteuid() == 0, "needs root: the agent runs the managed server as another account")
class ManagedServerNeverReady(AgentQueueTest):
    """A managed server whose health path never answers (a program that only sleeps): stopped after
    its ready_timeout, the batch saying why, and tried again later; nothing is sent."""

    def setUp(self):
        user = second_user(self).pw_name
        self.config = ('backfill_idle = "1s"\n\n[backfill.server.mute]\nkind = "managed"\n'
                       'command = ["/bin/sleep", "600", "{port}"]\n'
                       f'user = "{user}"\nready_timeout = "1s"\n')
        super().setUp()

    def test_a_server_that_never_answers_is_stopped_and_the_batch_says_why(self):
        texts = self.tmp / "texts.json"
        texts.write_text(json.dumps(["a", "b"]))
        r = self.tarmac("--json", "backfill", "submit", "--model", "m", "--texts", str(texts), "--template",
                        "{text}", "--output", str(self.tmp / "out.jsonl"))
        self.assertEqual(r.returncode, 0, r.stderr + self.agent_log())
        batch_id = json.loads(r.stdout)["id"]
        last = {}

        def told():
            r = self.tarmac("--json", "backfill", "status", str(batch_id))
            last.update(json.loads(r.stdout))
            return "did not answer /health within its ready_timeout 1s" in last["reason"]
        self.assertTrue(wait_for(told, timeout=30 * SLOW, step=0.1), f"{last}\n{self.agent_log()}")
        self.assertIn("tried again in 30s", last["reason"])
        self.assertEqual((last["done"], last["failed"], last["pending"]), (0, 0, 2), "nothing was sent")
        servers = [j for j in self.jobs().values() if j["name"] == "backfill-server-mute"]
        self.assertEqual(len(servers), 1, servers)
        self.assertTrue(wait_for(lambda: self.job(servers[0]["id"])["state"] == "cancelled", timeout=30 * SLOW,
                                 step=0.1), f"{self.job(servers[0]['id'])}\n{self.agent_log()}")
        self.assertEqual(self.job(servers[0]["id"])["user"], second_user(self).pw_name)


if __name__ == "__main__":
    unittest.main()
