"""Pids the agent reads back from its files are not trusted (issue 14, section 1): a wrapper's lock
file that says pid 0 once made a preemption call kill(0, SIGTERM), which signals the agent's own
process group (the agent itself). The agent now signals wrappers only through the pidfd it holds
and reads pids with parse_pid (2 and above)."""
import functools
import subprocess
import unittest

import test_sched_agent as sa


class DamagedWrapperLock(sa.AgentQueueTest):
    config = 'backfill_idle = "1s"\n'

    def start_agent(self, timeout=60):
        # In a session of its own: before the fix its kill(0, SIGTERM) reached its whole process
        # group, which would otherwise be this test's too.
        popen = subprocess.Popen
        subprocess.Popen = functools.partial(popen, start_new_session=True)
        try:
            super().start_agent(timeout)
        finally:
            subprocess.Popen = popen

    def test_a_pid_of_0_in_a_wrapper_lock_is_never_signalled(self):
        fills = [self.submit("sleep", "300", n=1, flags=("--backfill",)) for _ in range(4)]
        self.wait_jobs(fills, lambda j: j["state"] == "running", 60, "the backfill jobs did not all start")
        self.kill_agent()
        for job in fills:
            # Rewritten in place: the wrapper still holds its flock, so the agent re-attaches it.
            with open(self.state / "jobs" / f"{job}.lock", "r+") as f:
                f.truncate(0)
                f.write("0 0\n")
        self.start_agent()
        normal = self.submit("sleep", "1", n=1)
        # The pass preempts a backfill job for the normal one: before the fix, by kill(0, SIGTERM).
        # Stopping lasts only until the wrapper ends (a `sleep` ends at once): a poll can miss it and
        # see the job queued again, which the four re-attached jobs only are once preempted.
        preempted = sa.wait_for(lambda: any(j["state"] in ("stopping", "queued")
                                            for i, j in self.jobs().items() if i in fills),
                                30 * sa.SLOW)
        self.assertTrue(preempted, f"no backfill job was preempted; the agent's log:\n{self.agent_log()}")
        self.assertIsNone(self.agent.poll(), f"the agent signalled its own group; its log:\n{self.agent_log()}")
        jobs = self.jobs()
        self.assertIn(jobs[normal]["state"], {"queued", "running"}, jobs[normal])
        self.assertIsNone(self.agent.poll(), f"the agent ended; its log:\n{self.agent_log()}")


if __name__ == "__main__":
    unittest.main()
