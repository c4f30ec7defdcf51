"""`tarmac status` and `tarmac watch` through the agent (docs/agent.md "Commands through the
agent"): with an agent on the machine they show its live view, read over its socket, with classes
it measured over time; `--direct` (and `--holding-after`) read NVML; no agent is no news; an agent
that answers badly, too slowly, or as another user is named and NVML read instead.

The agent here classes with holding_after = 1s, the command with the default 10m: GPU 3 of
holding-zombie (a Jupyter kernel at 0 % holding 20 GiB) is `holding` only as the agent sees it, so
the class shown says where it came from."""
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from agent_support import HeldSim, end_process, wait_for
from devtools import demoted, second_user
from test_status import TARMAC

AGENT_CONFIG = '[activity]\nholding_after = "1s"\n'


def normalized(text):
    """Status text without what differs between two looks a moment apart at the same GPUs: the
    header's time and source, how long each class has lasted, and each process's age."""
    lines = text.splitlines()
    lines[0] = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d.*$", "", lines[0])
    lines = [re.sub(r"\b(busy|idle|starved|holding|reserved-idle|fault) \d+[smhd]\w*", r"\1", l) for l in lines]
    lines = [re.sub(r"(?<= )\d+[smhd](\d\d[smh])?(?= )", "AGE", l) for l in lines]  # a process's age
    return "\n".join(" ".join(l.split()) for l in lines)  # column widths follow the cells


class StatusThroughTheAgent(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-status-agent-"))
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        os.chmod(cls.dir, 0o755)  # the second user reaches the socket
        cls.sim = HeldSim("holding-zombie", state=str(cls.dir / "sim"))
        cls.addClassCleanup(cls.sim.close)
        cls.sock = str(cls.dir / "agent.sock")
        config = cls.dir / "agent.toml"
        config.write_text(AGENT_CONFIG)
        cls.agent_err = open(cls.dir / "agent.stderr", "w+")
        cls.addClassCleanup(cls.agent_err.close)
        cls.agent = subprocess.Popen(
            [TARMAC, "--config", str(config), "agent", "--listen", "off", "--state-dir", str(cls.dir / "state"),
             "--interval", "200ms", "--process-interval", "500ms"],
            env=cls.sim.env({"TARMAC_SOCKET": cls.sock}), stdout=subprocess.DEVNULL, stderr=cls.agent_err)
        cls.addClassCleanup(end_process, cls.agent)
        # Up once it classes GPU 3 as holding (its second at 0 %), as the socket tells.
        if not wait_for(lambda: cls.agent.poll() is not None or cls.gpu3_holding()):
            cls.agent_err.seek(0)
            raise AssertionError(f"the agent never showed GPU 3 holding: {cls.agent_err.read()[-2000:]}")

    @classmethod
    def gpu3_holding(cls):
        r = cls.run_tarmac("--json", "status")
        return r.returncode == 0 and json.loads(r.stdout)["gpus"][3]["activity"] == "holding"

    @classmethod
    def run_tarmac(cls, *args, socket_path=None, timeout=60, preexec_fn=None):
        env = cls.sim.env({"TARMAC_SOCKET": socket_path or cls.sock})
        return subprocess.run([TARMAC, *args], env=env, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=preexec_fn)

    def status(self, *args, **kw):
        r = self.run_tarmac(*args, "status", **kw) if args and args[0] == "--json" else self.run_tarmac("status", *args, **kw)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def test_status_shows_the_agents_classes_measured_over_time(self):
        r = self.status()
        self.assertEqual(r.stderr, "")
        header, rows = r.stdout.splitlines()[0], r.stdout.splitlines()
        self.assertRegex(header, r"\(agent, \d+\.\d s old\)$")
        gpu3 = next(l for l in rows if re.match(r"\s+3\s+NVIDIA", l))
        self.assertRegex(gpu3, r"holding \d+s")
        busy = [l for l in rows if re.match(r"\s+[012]\s+NVIDIA", l)]
        self.assertTrue(all(re.search(r"busy \d+s", l) for l in busy), busy)
        # The verdict says since when the kernel has been idle, as the agent measured it.
        doc = json.loads(self.run_tarmac("--json", "status").stdout)
        held = doc["gpus"][3]["held_idle_since_unix_ms"]
        self.assertIsNotNone(held)
        hhmm = time.strftime("%H:%M", time.localtime(held / 1000))
        self.assertIn(f"an idle Jupyter kernel of root holds 20.0 GiB on GPU 3 since {hhmm}", r.stdout)
        # The same GPUs read here, classed by one look with the default 10 minutes: starved.
        direct = self.status("--direct")
        self.assertNotIn("(agent", direct.stdout)
        self.assertRegex(next(l for l in direct.stdout.splitlines() if re.match(r"\s+3\s+NVIDIA", l)), r"starved\s")

    def test_every_value_shown_matches_a_direct_read(self):
        through, direct = self.status(), self.status("--direct")
        # Only the class of GPU 3 (the agent's holding, one look's starved) and its verdicts differ.
        a = normalized(through.stdout).replace("holding", "starved").split("\n\n")
        d = normalized(direct.stdout).split("\n\n")
        self.assertEqual(a[0], d[0])  # the GPU table: every value the same
        self.assertEqual(a[1], d[1])  # the process table: users, commands and ages from /proc here

    def test_json_says_where_it_came_from(self):
        doc = json.loads(self.status("--json").stdout)
        self.assertEqual(doc["source"], "agent")
        self.assertLess(doc["agent_sample_age_ms"], 60_000)
        for g in doc["gpus"]:
            self.assertLessEqual(g["activity_since_unix_ms"], doc["timestamp_unix_ms"], g)
            # Read by the agent's full reads every process interval, not by its fast ones.
            self.assertIsNotNone(g["enforced_power_limit_mw"], g)
            self.assertIsNotNone(g["pstate"], g)
        self.assertEqual([g["activity"] for g in doc["gpus"]], ["busy", "busy", "busy", "holding"])
        self.assertEqual(doc["gpus"][3]["processes"][0]["command_line"].split()[:3],
                         ["python", "-m", "ipykernel_launcher"])
        for args in (("--direct",), ("--holding-after", "1s")):
            with self.subTest(args=args):
                r = self.run_tarmac("--json", "status", *args)
                self.assertEqual(json.loads(r.stdout)["source"], "nvml", r.stderr)
                self.assertIsNone(json.loads(r.stdout)["gpus"][0]["activity_since_unix_ms"])

    def test_query_from_the_agent_prints_the_same_bytes(self):
        gpu_fields = ("index,name,uuid,pci.bus_id,memory.total,memory.used,utilization.gpu,temperature.gpu,"
                      "power.draw,power.limit,pstate,clocks.sm,persistence_mode,mig.mode.current")
        for args in (("--query-gpu=" + gpu_fields, "--format=csv"),
                     ("--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader"),
                     ("--query-gpu=index,name", "--format=csv", "-i", "3")):
            with self.subTest(args=args):
                direct = self.run_tarmac("query", *args)
                agent = self.run_tarmac("query", *args, "--from-agent")
                self.assertEqual(direct.returncode, 0, direct.stderr)
                self.assertEqual((agent.returncode, agent.stderr), (0, ""))
                self.assertEqual(agent.stdout, direct.stdout)
        # What it prints is the agent's: an agent (a stand-in) that names its GPU otherwise.
        nvml = f"{os.path.realpath(self.sim.env()['TARMAC_NVML_LIB'])}\n{self.sim.state}"
        view = {"v": 1, "timestamp_unix_ms": 1, "devices": [{"id": {"index": 0, "name": "Stand-in GPU"}}]}
        path = self.fake_agent(json.dumps({"ok": True, "nvml": nvml, "view": view}).encode() + b"\n", "stand-in.sock")
        r = self.run_tarmac("query", "--query-gpu=index,name", "--format=csv,noheader", "--from-agent",
                            socket_path=path)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "0, Stand-in GPU\n", ""))
        # Where no agent answers, NVML: the same bytes again, no word about it.
        alone = self.run_tarmac("query", "--query-gpu=index,name", "--format=csv", "--from-agent",
                                socket_path=str(self.dir / "nobody.sock"))
        self.assertEqual((alone.returncode, alone.stderr), (0, ""))
        self.assertEqual(alone.stdout, self.run_tarmac("query", "--query-gpu=index,name", "--format=csv").stdout)
        # Every field, not only those status's table reads (a fallback once read only those).
        fields = ("--query-gpu=serial,clocks.max.sm,power.limit,power.default_limit,fan.speed,pcie.link.gen.current,"
                  "persistence_mode,ecc.errors.corrected.volatile.total,enforced.power.limit")
        alone = self.run_tarmac("query", fields, "--format=csv", "--from-agent", socket_path=str(self.dir / "nobody.sock"))
        self.assertEqual((alone.returncode, alone.stderr), (0, ""))
        self.assertEqual(alone.stdout, self.run_tarmac("query", fields, "--format=csv").stdout)

    def test_watch_reads_the_agent_too(self):
        r = self.run_tarmac("watch", "-c", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("(agent, ", r.stdout)
        self.assertRegex(r.stdout, r"holding \d+s")
        r = self.run_tarmac("watch", "-c", "1", "--direct")
        self.assertNotIn("(agent, ", r.stdout)

    def test_top_shows_the_agents_view_and_direct_reads_nvml(self):
        r = self.run_tarmac("--json", "top", "--once")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        through = json.loads(r.stdout)
        self.assertEqual(through["hosts"][0]["source"], "agent")
        self.assertEqual([g["activity"] for g in through["hosts"][0]["gpus"]], ["busy", "busy", "busy", "holding"])
        r = self.run_tarmac("--json", "top", "--once", "--direct")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        direct = json.loads(r.stdout)
        self.assertEqual(direct["hosts"][0]["source"], "nvml")
        self.assertEqual(direct["hosts"][0]["gpus"][3]["activity"], "starved")
        # The same processes, described from /proc here: users, commands, resident sizes.
        def described(doc):
            return sorted((p["gpu"], p["pid"], p["user"], p["command"], p["mem_bytes"]) for p in doc["processes"])
        self.assertEqual(described(through), described(direct))
        self.assertTrue(all(p["rss_bytes"] for p in through["processes"]), through["processes"])
        frame = self.run_tarmac("top", "--once")
        self.assertEqual(frame.returncode, 0, frame.stderr)
        self.assertIn("via agent", frame.stdout.splitlines()[0])
        self.assertIn("ipykernel_launcher", frame.stdout)
        self.assertNotIn("via agent", self.run_tarmac("top", "--once", "--direct").stdout)

    def test_top_names_a_bad_agent_and_reads_nvml(self):
        path = self.fake_agent(b"garbage\n", "top-garbage.sock")
        r = self.run_tarmac("top", "--once", socket_path=path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("not JSON", r.stderr)
        self.assertIn("this host's agent: the agent's answer is not JSON: reading NVML here", r.stdout)
        self.assertNotIn("via agent", r.stdout)
        self.assertIn("ipykernel_launcher", r.stdout)
        # No agent at all: no word about it.
        r = self.run_tarmac("--json", "top", "--once", socket_path=str(self.dir / "nobody.sock"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(json.loads(r.stdout)["hosts"][0]["source"], "nvml")

    def test_no_agent_is_no_news(self):
        r = self.run_tarmac("--json", "status", socket_path=str(self.dir / "nobody.sock"))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(json.loads(r.stdout)["source"], "nvml")
        # A socket file left by an agent that is gone: refused, which is no news either.
        stale = self.dir / "stale.sock"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(stale))
        s.close()
        r = self.run_tarmac("--json", "status", socket_path=str(stale))
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(json.loads(r.stdout)["source"], "nvml")

    def test_an_agent_of_other_gpus_is_not_taken(self):
        # A simulation started here: its GPUs, not the agent's, though the agent answers.
        r = self.run_tarmac("sim", "--scenario", "a100x4-gpu0-only", "--", TARMAC, "--json", "status")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        doc = json.loads(r.stdout)
        self.assertEqual(doc["source"], "nvml")
        self.assertEqual([g["activity"] for g in doc["gpus"]], ["busy", "idle", "idle", "idle"])

    def fake_agent(self, answer, name):
        """A socket at NAME whose server reads one line and answers ANSWER (bytes; None: never)."""
        path = str(self.dir / name)
        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
        server.listen(4)
        self.addCleanup(server.close)
        stop = threading.Event()
        self.addCleanup(stop.set)

        def serve():
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    conn.recv(65536)
                    if answer is None:
                        stop.wait(10)
                    else:
                        conn.sendall(answer)
        threading.Thread(target=serve, daemon=True).start()
        return path

    def test_a_bad_answer_is_named_and_nvml_read_instead(self):
        evil_view = {"v": 1, "timestamp_unix_ms": 1, "devices": [{"id": {"index": 0, "name": "EVIL"},
                                                                  "sample": {"temp_c": -4}}]}
        nvml = f"{os.path.realpath(self.sim.env()['TARMAC_NVML_LIB'])}\n{self.sim.state}"
        cases = [(b"garbage\n", "not JSON"),
                 (json.dumps({"ok": True, "nvml": nvml, "view": evil_view}).encode() + b"\n", "sample.temp_c"),
                 (None, "")]  # hangs: given up after the answer's deadline
        for i, (answer, named) in enumerate(cases):
            with self.subTest(answer=answer):
                path = self.fake_agent(answer, f"fake-{i}.sock")
                r = self.run_tarmac("status", socket_path=path)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("tarmac: warning:", r.stderr)
                self.assertIn(named, r.stderr)
                self.assertIn("reading the GPUs directly", r.stderr)
                self.assertNotIn("EVIL", r.stdout)
                self.assertNotIn("(agent", r.stdout)
                self.assertIn("ipykernel_launcher", r.stdout)

    def test_a_backfill_batch_the_agent_names_is_shown_and_bad_entries_are_left_out(self):
        nvml = f"{os.path.realpath(self.sim.env()['TARMAC_NVML_LIB'])}\n{self.sim.state}"
        uuid = "GPU-11111111-2222-3333-4444-555555555555"
        view = {"v": 1, "timestamp_unix_ms": 1, "devices": [{"id": {"index": 0, "name": "Stand-in GPU", "uuid": uuid}},
                                                              {"id": {"index": 1, "name": "Other GPU", "uuid": "GPU-2"}}]}
        batches = [{"uuid": uuid, "model": "qwen\x1b[31m", "server": "llama", "answered": 12, "requests": 40},
                   {"uuid": uuid, "model": "gemma", "server": "llama", "answered": 0, "requests": 5},  # a second at once
                   {"uuid": "GPU-2", "model": "m" * 300, "server": "llama", "answered": 1, "requests": 2},  # too long
                   {"uuid": "GPU-2", "model": "m", "server": "llama", "answered": -1, "requests": 2},      # negative
                   "not an object"]
        path = self.fake_agent(json.dumps({"ok": True, "nvml": nvml, "view": view, "backfill": batches}).encode() + b"\n",
                               "backfill.sock")
        r = self.run_tarmac("--json", "status", socket_path=path)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        gpus = json.loads(r.stdout)["gpus"]
        self.assertEqual(gpus[0]["backfill"], [{"model": "qwen\x1b[31m", "server": "llama", "answered": 12, "requests": 40},
                                               {"model": "gemma", "server": "llama", "answered": 0, "requests": 5}])
        self.assertEqual(gpus[1]["backfill"], [])
        r = self.run_tarmac("status", socket_path=path)
        self.assertIn("GPU 0 runs backfill: qwen", r.stdout)
        self.assertIn(" on llama (12 of 40 requests answered); it yields to any job", r.stdout)
        self.assertIn("GPU 0 runs backfill: gemma on llama (0 of 5 requests answered)", r.stdout)
        self.assertNotIn("\x1b[31m", r.stdout)  # the escape is shown, not obeyed
        self.assertNotIn("GPU 1 runs backfill", r.stdout)

    def test_a_view_from_a_stuck_agent_is_not_shown(self):
        nvml = f"{os.path.realpath(self.sim.env()['TARMAC_NVML_LIB'])}\n{self.sim.state}"
        view = {"v": 1, "timestamp_unix_ms": 1, "age_ms": 600_000, "devices": [{"id": {"index": 0, "name": "OLD"}}]}
        path = self.fake_agent(json.dumps({"ok": True, "nvml": nvml, "view": view}).encode() + b"\n", "stuck.sock")
        r = self.run_tarmac("status", socket_path=path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("the agent's last sample is 600 s old", r.stderr)
        self.assertNotIn("OLD", r.stdout)

    def test_an_older_agent_without_status_is_no_news(self):
        path = self.fake_agent(b'{"ok":false,"code":"invalid","error":"unknown request \'status\'"}\n', "old.sock")
        r = self.run_tarmac("status", socket_path=path)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertNotIn("(agent", r.stdout)

    @unittest.skipUnless(os.geteuid() == 0, "needs root to act as a second user")
    def test_another_users_socket_is_not_believed_and_roots_agent_serves_a_user(self):
        pw = second_user(self)
        # A socket served by the second user, answering a view of GPUs that do not exist: root's
        # status does not show it.
        own = self.dir / "second-user"
        own.mkdir()
        os.chown(own, pw.pw_uid, pw.pw_gid)
        path = str(own / "user.sock")
        view = {"v": 1, "timestamp_unix_ms": 1, "devices": [{"id": {"index": 0, "name": "EVIL"}}]}
        code = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen(1)\n"
                "print('ready',flush=True)\nc,_=s.accept()\nc.recv(65536)\nc.sendall(sys.argv[2].encode()+b'\\n')\n")
        nvml = f"{os.path.realpath(self.sim.env()['TARMAC_NVML_LIB'])}\n{self.sim.state}"
        server = subprocess.Popen(["python3", "-c", code, path, json.dumps({"ok": True, "nvml": nvml, "view": view})],
                                  preexec_fn=demoted(pw), stdout=subprocess.PIPE, text=True)
        self.addCleanup(server.stdout.close)
        self.addCleanup(end_process, server)
        self.assertEqual(server.stdout.readline().strip(), "ready")
        r = self.run_tarmac("status", socket_path=path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"is served by uid {pw.pw_uid}, neither root nor you", r.stderr)
        self.assertNotIn("EVIL", r.stdout)
        # The second user reads root's agent, and what /proc lets that user see of the processes.
        r = self.run_tarmac("--json", "status", preexec_fn=demoted(pw))
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["source"], "agent")
        self.assertEqual(doc["gpus"][3]["activity"], "holding")
        self.assertEqual(doc["gpus"][3]["processes"][0]["user"], "root")


if __name__ == "__main__":
    unittest.main()
