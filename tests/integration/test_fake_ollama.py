"""The fake Ollama server (fake_ollama.py) that tarmac's Ollama adapter is tested against, checked
so that it is not only tarmac's opinion of the protocol:

- with Ollama's official JavaScript client (npm "ollama", pinned in scripts/peers.sh, fetched into
  the peers cache by `scripts/peers.sh --ollama-js`; skipped without it): version, list, generate and
  chat whole and streamed, ps with size_vram, abort() of a stream (the fake sees its connection
  closed and stops generating), unload with keep_alive 0, a missing model's 404;
- on the wire: a client that closes its connection mid-stream cancels the generation; keep_alive
  semantics (0 unloads after the request, a request with no prompt loads or unloads, a negative one
  keeps the model); the load and unload hooks a test can hold simulated GPU memory with."""
import http.client
import json
import os
import pathlib
import shutil
import socket
import subprocess
import unittest

from fake_ollama import FakeOllama, keep_alive_seconds

HERE = pathlib.Path(__file__).resolve().parent
PEERS = pathlib.Path(os.environ.get("TARMAC_PEERS") or pathlib.Path.home() / ".cache" / "tarmac-peers")
OLLAMA_JS = PEERS / "ollama-js"


def post(fake, path, body):
    """One request; the answer's status and its body, NDJSON lines parsed."""
    host, port = fake.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    answer = conn.getresponse()
    lines = [json.loads(line) for line in answer.read().decode().splitlines() if line.strip()]
    conn.close()
    return answer.status, lines


class FakeOllamaWire(unittest.TestCase):
    def test_closing_the_connection_cancels_the_generation(self):
        with FakeOllama(tokens=10000, token_delay=0.005) as fake:
            s = socket.create_connection(fake.server.server_address)
            body = json.dumps({"model": "tiny", "prompt": "go on"}).encode()
            s.sendall(b"POST /api/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            got = b""
            while got.count(b'"done": false') < 2:
                got += s.recv(4096)
            self.assertIn(b"Transfer-Encoding: chunked", got)
            self.assertIn(b"application/x-ndjson", got)
            s.close()
            self.assertTrue(fake.wait_for(lambda: fake.cancelled == 1 and fake.active == 0),
                            f"cancelled {fake.cancelled}, active {fake.active}")
            self.assertEqual(fake.completed, 0)

    def test_keep_alive(self):
        events = []
        with FakeOllama(on_load=lambda n: events.append(("load", n)),
                        on_unload=lambda n: events.append(("unload", n))) as fake:
            status, lines = post(fake, "/api/chat", {"model": "tiny", "messages": [{"role": "user", "content": "a"}],
                                                     "keep_alive": 0})
            self.assertEqual(status, 200)
            self.assertTrue(lines[-1]["done"])
            # Unloaded once answered; as in Ollama, the unload may come just after the answer's last line.
            self.assertTrue(fake.wait_for(lambda: not fake.loaded), fake.ps())
            status, lines = post(fake, "/api/generate", {"model": "tiny", "keep_alive": "-1"})
            self.assertEqual(lines, [dict(lines[0], done_reason="load")])
            [model] = fake.ps()["models"]
            self.assertEqual((model["name"], model["size_vram"] > 0), ("tiny:latest", True))
            self.assertTrue(model["expires_at"].startswith("2318"))
            status, lines = post(fake, "/api/generate", {"model": "tiny", "keep_alive": 0, "stream": False})
            self.assertEqual(lines[0]["done_reason"], "unload")
            self.assertEqual(fake.ps()["models"], [])
            self.assertEqual(events, [("load", "tiny:latest"), ("unload", "tiny:latest")] * 2)
            self.assertEqual(post(fake, "/api/generate", {"model": "tiny", "prompt": "x", "keep_alive": "soon"})[0], 400)
            self.assertEqual(post(fake, "/api/generate", {"model": "big", "prompt": "x"})[0], 404)
        self.assertEqual([keep_alive_seconds(v) for v in (None, 0, "0", "1h30m", "250ms", 7)],
                         [300.0, 0.0, 0.0, 5400.0, 0.25, 7.0])

    def test_an_error_mid_stream_is_a_line(self):
        with FakeOllama() as fake:
            status, lines = post(fake, "/api/generate", {"model": "tiny", "prompt": "FAIL_MIDSTREAM now"})
            self.assertEqual(status, 200)
            self.assertFalse(lines[0]["done"])
            self.assertIn("FAIL_MIDSTREAM", lines[-1]["error"])


@unittest.skipUnless((OLLAMA_JS / "node_modules" / "ollama" / "package.json").exists() and shutil.which("node"),
                     f"Ollama's JavaScript client is not in the peers cache ({OLLAMA_JS}) or node is missing: "
                     "run scripts/peers.sh --ollama-js")
class FakeOllamaWithOfficialClient(unittest.TestCase):
    def test_the_official_client_agrees(self):
        # Long answers unless num_predict bounds them: the aborted stream is still generating.
        with FakeOllama(tokens=100000, token_delay=0.005) as fake:
            run = subprocess.run(["node", str(HERE / "ollama_js" / "check.cjs"), str(OLLAMA_JS), fake.url],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 0, run.stderr)
            out = json.loads(run.stdout)
            self.assertEqual(out["tags"], ["tiny:latest"])
            self.assertEqual(out["generate"], {"response": "one two one", "done": True, "done_reason": "length",
                                               "prompt_eval_count": 2, "eval_count": 3})
            self.assertEqual(out["chat"], {"role": "assistant", "content": "hello world", "eval_count": 2})
            self.assertEqual(out["generate_stream"], {"parts": 5, "text": "a b a b", "last": {"done": True, "eval_count": 4}})
            self.assertEqual(out["chat_stream"]["text"], "x y x")
            self.assertEqual(out["chat_stream"]["last"], {"done": True, "done_reason": "length"})
            self.assertEqual(out["ps"], [{"name": "tiny:latest", "size_vram": 1 << 30}])
            self.assertEqual(out["abort"], "AbortError")
            self.assertTrue(out["server_saw_close"], "abort() closed the stream's connection while the client ran")
            self.assertEqual(out["unload"], "unload")
            self.assertEqual(out["ps_after_unload"], 0)
            self.assertEqual(out["missing"]["status"], 404)
            # abort() closed the connection, and the fake stopped generating.
            self.assertTrue(fake.wait_for(lambda: fake.cancelled == 1 and fake.active == 0),
                            f"cancelled {fake.cancelled}, active {fake.active}")


if __name__ == "__main__":
    unittest.main()
