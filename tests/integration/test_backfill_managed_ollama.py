"""A managed Ollama server's yield (docs/backfill.md "Yield", issue 16): the agent runs the fake Ollama
(fake_ollama.py, preset "ollama" with `binary` a wrapper) as a backfill job on a simulated idle GPU, as
the second user; while it has a model loaded, a tarmac-sim-load child of the fake holds simulated GPU
memory on the GPU the job was given, and gives it back half a second after Ollama's unload (as a
runner exits a moment after its unload answered). A normal job that needs every GPU arrives while
the batch has requests in flight: the batch stops sending, the model is unloaded, and the agent asks
NVML until the server's memory is gone; only then is the server signalled. The fake records the
order (load, unload, memory freed, SIGTERM with nothing held), the `backfill_yield` event says the
memory was confirmed freed and after how long, and the batch finishes, each custom_id once."""
import json
import os
import pathlib
import shutil
import sys
import tempfile
import unittest

from agent_support import BUILD, query, wait_for
from devtools import second_user
from test_backfill_llama import BatchQueueTest, answered_once
from test_backfill_managed import kill_under
from test_sched_agent import SLOW

FAKE = pathlib.Path(__file__).resolve().parent / "fake_ollama.py"
SIM_LOAD = BUILD / "sim" / "tarmac-sim-load"
PYTHON = "/usr/bin/python3"  # the second user cannot reach a Python under root's home (pyenv)
TEXTS = 40


@unittest.skipUnless(os.geteuid() == 0, "needs root: the agent runs the managed server as another account")
@unittest.skipUnless(os.path.exists(PYTHON), f"{PYTHON} runs the fake as the second user")
class ManagedOllamaYield(BatchQueueTest):
    FREE_DELAY_S = 0.5  # from the unload's answer until the fake's memory is gone

    def setUp(self):
        self.peer_dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-managed-ollama-"))
        self.peer_dir.chmod(0o755)
        self.addCleanup(shutil.rmtree, str(self.peer_dir), True)
        self.addCleanup(kill_under, self.peer_dir)
        user = second_user(self).pw_name
        self.events = self.peer_dir / "events"
        self.events.touch()
        self.events.chmod(0o666)  # written by the fake, as the second user
        self.wrapper = self.peer_dir / "ollama"
        self.config = ('backfill_idle = "1s"\n\n[backfill.server.llm]\nkind = "managed"\npreset = "ollama"\n'
                       f'binary = "{self.wrapper}"\nprotocol = "ollama"\nuser = "{user}"\nready_timeout = "30s"\n'
                       'timeout = "30s"\nretries = 6\nmax_parallel = 4\n')
        super().setUp()
        # The simulation's state: the fake's tarmac-sim-load, as the second user, registers itself there.
        state = pathlib.Path(self.sim.state)
        state.chmod(0o755)
        for d in state.rglob("*"):
            if d.is_dir():
                d.chmod(0o1777)
        # The server's environment is the scheduler's (PATH, HOME, OLLAMA_HOST, CUDA_VISIBLE_DEVICES...):
        # the wrapper adds the simulation's state, and runs the fake as `ollama serve` with its memory.
        self.wrapper.write_text(
            "#!/bin/sh\n"
            f"export TARMAC_SIM_STATE='{state}'\n"
            f"exec {PYTHON} '{FAKE}' \"$@\" --tokens 20 --token-delay 0.05 --hold-mem 2048MiB "
            f"--sim-load '{SIM_LOAD}' --free-delay {self.FREE_DELAY_S} --events '{self.events}'\n")
        self.wrapper.chmod(0o755)

    def diagnostics(self):
        return f"fake: {self.events.read_text()}"

    def test_the_yield_confirms_through_nvml_that_the_memory_is_gone_before_the_sigterm(self):
        batch_id, out = self.submit_texts(TEXTS)
        self.wait_status(batch_id, lambda s: s["done"] >= 4 and s["in_flight"] > 0,
                         "the batch did not reach 4 answers with requests in flight")
        job = self.submit("/bin/sleep", "0.5", n=4)  # every GPU: the server's must be given back
        self.assertTrue(wait_for(lambda: self.job(job)["started_unix_ms"] is not None, timeout=30 * SLOW, step=0.02),
                        f"the normal job did not start: {self.jobs()}\n{self.agent_log()}")
        self.wait_status(batch_id, lambda s: s["state"] == "done", "the batch did not finish after the job")
        answered_once(self, out, TEXTS)

        # The fake's order: its model loaded, unloaded, its memory (the sim-load child) gone, and only
        # then the SIGTERM, with nothing held. Without the wait the SIGTERM comes while it is held.
        events = self.events.read_text().splitlines()
        first = events.index(next(e for e in events if e.startswith("sigterm")))
        yield_lines = "\n".join(line for line in self.log_path.read_text(errors="replace").splitlines()
                                if any(w in line for w in ("yield", "unload", "NVML", "memory", "preempt")))
        self.assertEqual(events[:first + 1],
                         ["load tiny:latest", "unload tiny:latest", "freed tiny:latest", "sigterm holding=-"],
                         "\n".join(events) + "\nthe agent's log of the yield:\n" + yield_lines)
        # The yield's event says NVML confirmed it, after the fake's delay at least.
        yields = [json.loads(d) for (d,) in query(self.db, "SELECT detail FROM event WHERE kind = 'backfill_yield'")]
        self.assertEqual(len(yields), 1, yields)
        self.assertEqual((yields[0]["server"], yields[0]["for_job"]), ("llm", job))
        self.assertIs(yields[0]["memory_confirmed"], True, yields)
        self.assertGreaterEqual(yields[0]["memory_freed_ms"], self.FREE_DELAY_S * 1000 * 0.8, yields)
        log = self.log_path.read_text(errors="replace").splitlines()
        confirmed = next(i for i, line in enumerate(log) if "NVML lists none of its memory" in line)
        preempting = next(i for i, line in enumerate(log) if "preempting backfill job" in line)
        self.assertLess(confirmed, preempting, "\n".join(log))
        print(f"\nyield: NVML confirmed the server's memory gone {yields[0]['memory_freed_ms']} ms after the unload; "
              f"the yield took {yields[0]['ms']} ms", file=sys.stderr, flush=True)


if __name__ == "__main__":
    unittest.main()
