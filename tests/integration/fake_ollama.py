"""A protocol-faithful fake Ollama server for the backfill tests (issue 16): Ollama cannot be
installed from Debian, so tarmac's Ollama adapter is tested against this, and this is checked in
turn by Ollama's official JavaScript client (test_fake_ollama.py), so that the fake is not only
tarmac's opinion of the protocol.

What it serves, as Ollama's API documentation (docs/api.md) describes it:
  GET  /api/version, /api/tags, /api/ps (loaded models with size, size_vram, expires_at), GET /
  POST /api/generate, /api/chat: NDJSON streamed (chunked, application/x-ndjson, one object a line,
       the last "done": true with done_reason, prompt_eval_count, eval_count and the durations) or,
       with "stream": false, one object; options.num_predict bounds the answer (done_reason
       "length"); an unknown model is a 404 {"error": ...}, a bad body a 400.
  keep_alive: a duration ("5m", "10s", "0") or seconds; 0 unloads the model after the request, a
       negative one keeps it loaded for ever; a request with no prompt (no messages) only loads the
       model, or, with keep_alive 0, unloads it (done_reason "load" / "unload").
  cancel: a generation stops when its client closes the connection, as Ollama's does; counted
       (GET /_fake/stats, the fake's own, says how many were).

Answers are words of the prompt repeated, one "token" a line, `token_delay` seconds apart.
A prompt holding FAIL_MIDSTREAM gets one token and then an {"error": ...} line, as a crashed runner.
Hooks on_load(name) and on_unload(name) let a test hold simulated GPU memory while a model is loaded.

Run alone: python3 fake_ollama.py [serve] [--port N] [--model NAME]... [--token-delay S]; prints its URL.
Without --port it listens where OLLAMA_HOST says (host:port, as `ollama serve` does; 127.0.0.1:11434 by
default), so that it can be the program of a managed server (preset "ollama", binary a wrapper). With
--hold-mem SIZE --sim-load PATH a loaded model holds simulated GPU memory: a tarmac-sim-load child (in
the server's process group, on the GPUs its CUDA_VISIBLE_DEVICES names) started at the load and ended
--free-delay seconds after the unload, as an Ollama runner exits a moment after its unload answered.
--events FILE gets a line per load, unload, memory freed, and SIGTERM (saying whether the memory was
still held then): what a test of the yield's order reads."""
import argparse
import datetime
import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_KEEP_ALIVE_S = 300.0  # Ollama's default: 5 minutes
DEFAULT_PORT = 11434          # Ollama's, when OLLAMA_HOST names none
MODEL_SIZE = 1 << 30          # what /api/ps says a loaded model takes, all of it in "VRAM"


def full_name(name):
    """Ollama's model names default their tag to "latest"."""
    return name if ":" in name else name + ":latest"


def now_text():
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def keep_alive_seconds(value):
    """Seconds from keep_alive (a number of seconds or a Go duration such as "5m", "1h30m", "0");
    None for the default; a negative value means for ever (float("inf")). ValueError when bad."""
    if value is None:
        return DEFAULT_KEEP_ALIVE_S
    if isinstance(value, bool):
        raise ValueError("keep_alive is a boolean")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        text = text.lstrip("+-")
        units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
        seconds, number = 0.0, ""
        i = 0
        if text and all(c.isdigit() or c == "." for c in text):
            seconds = float(text)
        else:
            while i < len(text):
                if text[i].isdigit() or text[i] == ".":
                    number += text[i]
                    i += 1
                    continue
                unit = "ms" if text[i:i + 2] == "ms" else text[i]
                if unit not in units or not number:
                    raise ValueError(f"keep_alive {value!r} is not a duration")
                seconds += float(number) * units[unit]
                number, i = "", i + len(unit)
            if number:
                raise ValueError(f"keep_alive {value!r} is not a duration")
        seconds *= sign
    else:
        raise ValueError("keep_alive is not a duration")
    return float("inf") if seconds < 0 else seconds


class ClientGone(Exception):
    """The client closed the connection: the generation is cancelled."""


class FakeOllama:
    def __init__(self, models=("tiny",), token_delay=0.0, tokens=8, on_load=None, on_unload=None, port=0,
                 host="127.0.0.1"):
        self.models = {full_name(m) for m in models}
        self.token_delay = token_delay
        self.tokens = tokens
        self.on_load = on_load or (lambda name: None)
        self.on_unload = on_unload or (lambda name: None)
        self.lock = threading.Condition()
        self.loaded = {}  # name -> expiry (time.monotonic() seconds, inf: never)
        self.requests = []  # (path, body) of each POST
        self.started = 0    # generations begun
        self.completed = 0
        self.cancelled = 0  # generations stopped by their client closing the connection
        self.active = 0
        self.max_active = 0
        self.stopping = threading.Event()
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        for name in list(self.loaded):
            self._unload(name)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def wait_for(self, predicate, timeout=20.0):
        """Waits until predicate() (called under the fake's lock) holds; its last value."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return predicate()
                self.lock.wait(min(left, 0.1))
            return True

    # Loading, under no lock: the hooks may start a process.
    def _load(self, name, keep_alive_s):
        with self.lock:
            fresh = name not in self.loaded
            self.loaded[name] = time.monotonic() + keep_alive_s
            self.lock.notify_all()
        if fresh:
            self.on_load(name)

    def _unload(self, name):
        with self.lock:
            present = self.loaded.pop(name, None) is not None
            self.lock.notify_all()
        if present:
            self.on_unload(name)

    def expire(self):
        now = time.monotonic()
        with self.lock:
            gone = [n for n, t in self.loaded.items() if t <= now]
        for name in gone:
            self._unload(name)

    def ps(self):
        self.expire()
        with self.lock:
            models = []
            for name, expiry in self.loaded.items():
                left = expiry - time.monotonic()
                until = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=left)
                         if left != float("inf") else datetime.datetime(2318, 1, 1, tzinfo=datetime.timezone.utc))
                models.append(dict(self._describe(name), expires_at=until.isoformat().replace("+00:00", "Z"),
                                   size_vram=MODEL_SIZE))
            return {"models": models}

    def tags(self):
        return {"models": [dict(self._describe(n), modified_at=now_text()) for n in sorted(self.models)]}

    @staticmethod
    def _describe(name):
        return {"name": name, "model": name, "size": MODEL_SIZE, "digest": "0" * 64,
                "details": {"parent_model": "", "format": "gguf", "family": "fake", "families": ["fake"],
                            "parameter_size": "1M", "quantization_level": "F16"}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_fake = None  # set by FakeOllama

    def log_message(self, *args):
        pass

    def handle(self):
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):
            pass  # a client that went away between requests

    # Plain answers.
    def _send_json(self, status, doc):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status, message):
        self._send_json(status, {"error": message})

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        fake = self.server_fake
        if self.path == "/":
            data = b"Ollama is running"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif self.path == "/api/version":
            self._send_json(200, {"version": "0.5.7"})
        elif self.path == "/api/tags":
            self._send_json(200, fake.tags())
        elif self.path == "/api/ps":
            self._send_json(200, fake.ps())
        elif self.path == "/_fake/stats":  # not Ollama's: what a test's client asks of the fake itself
            with fake.lock:
                self._send_json(200, {"started": fake.started, "completed": fake.completed,
                                      "cancelled": fake.cancelled, "active": fake.active})
        else:
            self._error(404, "404 page not found")

    def do_POST(self):
        fake = self.server_fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path not in ("/api/generate", "/api/chat"):
            self._error(404, "404 page not found")
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError as e:
            self._error(400, f"invalid request body: {e}")
            return
        with fake.lock:
            fake.requests.append((self.path, body))
            fake.lock.notify_all()
        chat = self.path == "/api/chat"
        model = body.get("model")
        if not isinstance(model, str) or not model:
            self._error(400, "model is required")
            return
        name = full_name(model)
        if name not in fake.models:
            self._error(404, f'model "{model}" not found, try pulling it first')
            return
        try:
            keep_alive = keep_alive_seconds(body.get("keep_alive"))
        except ValueError as e:
            self._error(400, str(e))
            return
        options = body.get("options") or {}
        if not isinstance(options, dict):
            self._error(400, "options is not an object")
            return
        text = self._prompt_text(body, chat)
        if text is None:
            self._error(400, "messages are not a list of objects with a role and a string content" if chat
                        else "prompt is not a string")
            return
        stream = body.get("stream", True) is not False
        if text == "":
            self._load_only(fake, name, model, keep_alive, chat, stream)
            return
        fake._load(name, keep_alive)
        self._generate(fake, model, text, options, chat, stream)
        if keep_alive == 0:
            fake._unload(name)

    @staticmethod
    def _prompt_text(body, chat):
        """The words the answer echoes ("" when the request only loads or unloads); None when bad."""
        if chat:
            messages = body.get("messages", [])
            if not isinstance(messages, list):
                return None
            parts = []
            for m in messages:
                if not isinstance(m, dict) or not isinstance(m.get("role"), str) or \
                        not isinstance(m.get("content", ""), str):
                    return None
                parts.append(m.get("content", ""))
            return " ".join(p for p in parts if p)
        prompt = body.get("prompt", "")
        return prompt if isinstance(prompt, str) else None

    def _final(self, model, chat, done_reason):
        doc = {"model": model, "created_at": now_text(), "done": True, "done_reason": done_reason}
        if chat:
            doc["message"] = {"role": "assistant", "content": ""}
        else:
            doc["response"] = ""
        return doc

    def _load_only(self, fake, name, model, keep_alive, chat, stream):
        if keep_alive == 0:
            fake._unload(name)
            doc = self._final(model, chat, "unload")
        else:
            fake._load(name, keep_alive)
            doc = self._final(model, chat, "load")
        if stream:
            self._start_stream()
            self._write_line(doc)
            self._end_stream()
        else:
            self._send_json(200, doc)

    def _generate(self, fake, model, text, options, chat, stream):
        words = text.split() or ["x"]
        limit = options.get("num_predict")
        count = fake.tokens if not isinstance(limit, int) or limit < 0 else min(fake.tokens, limit)
        reason = "length" if count < fake.tokens else "stop"
        tokens = [words[i % len(words)] + (" " if i + 1 < count else "") for i in range(count)]
        fail = "FAIL_MIDSTREAM" in text
        with fake.lock:
            fake.started += 1
            fake.active += 1
            fake.max_active = max(fake.max_active, fake.active)
            fake.lock.notify_all()
        began = time.monotonic_ns()
        outcome = "completed"
        try:
            if stream:
                self._start_stream()
            for i, token in enumerate(tokens):
                self._pause(fake)
                if fail and i == 1:
                    why = "an error was encountered while running the model: FAIL_MIDSTREAM"
                    if stream:
                        self._write_line({"error": why})
                    else:
                        self._error(500, why)
                    break
                if stream:
                    piece = {"model": model, "created_at": now_text(), "done": False}
                    if chat:
                        piece["message"] = {"role": "assistant", "content": token}
                    else:
                        piece["response"] = token
                    self._write_line(piece)
            else:
                final = self._final(model, chat, reason)
                elapsed = time.monotonic_ns() - began
                final.update(total_duration=elapsed, load_duration=0, prompt_eval_count=len(words),
                             prompt_eval_duration=0, eval_count=count, eval_duration=elapsed)
                if chat:
                    final["message"]["content"] = "" if stream else "".join(tokens)
                else:
                    final["response"] = "" if stream else "".join(tokens)
                    final["context"] = list(range(len(words) + count))
                if stream:
                    self._write_line(final)
                else:
                    self._send_json(200, final)
            if stream:
                self._end_stream()
        except (ClientGone, BrokenPipeError, ConnectionResetError):
            outcome = "cancelled"
            self.close_connection = True
        finally:
            with fake.lock:
                fake.active -= 1
                if outcome == "cancelled":
                    fake.cancelled += 1
                else:
                    fake.completed += 1
                fake.lock.notify_all()

    def _pause(self, fake):
        """Waits a token's time, watching the connection: a client that closed it cancels."""
        deadline = time.monotonic() + fake.token_delay
        while True:
            if fake.stopping.is_set():
                raise ClientGone()
            left = deadline - time.monotonic()
            readable, _, _ = select.select([self.connection], [], [], max(0.0, min(left, 0.05)))
            if readable:
                try:
                    peek = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    peek = b"?"
                except OSError:
                    peek = b""
                if peek == b"":
                    raise ClientGone()
            if left <= 0:
                return

    def _start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _write_line(self, doc):
        """One NDJSON line, as one chunk of a streamed answer."""
        data = json.dumps(doc).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def listen_address(ollama_host):
    """(host, port) from OLLAMA_HOST as `ollama serve` reads it: "host:port", "host", ":port", with or
    without a scheme; 127.0.0.1:11434 when unset."""
    text = (ollama_host or "").strip()
    for scheme in ("http://", "https://"):
        if text.startswith(scheme):
            text = text[len(scheme):]
    text = text.rstrip("/")
    host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    return host or "127.0.0.1", int(port) if port else DEFAULT_PORT


class SimMemory:
    """A loaded model's simulated GPU memory: a tarmac-sim-load child per model, started at its load
    and ended FREE_DELAY seconds after its unload (on a thread: the unload's answer does not wait).
    Each child is ended once, whatever the order of loads and unloads (a model loaded again before
    its last memory was freed holds two for a while), and none is left when the fake ends.

    Its memory is freed, as NVML sees it, when the child's entry leaves the simulation's registry
    (TARMAC_SIM_STATE/procs/PID: the child removes it on SIGTERM, before it dies): "freed" is
    recorded then, by the thread that ended it or by holding(), whichever looks first, so that a
    SIGTERM that came once NVML listed none of it reads "freed" before it, however slowly the child
    then dies."""

    def __init__(self, program, size, free_delay, record):
        self.program, self.size, self.free_delay, self.record = program, size, free_delay, record
        self.lock = threading.Lock()
        self.loads = {}     # name -> Popen: loaded now
        self.freeing = []   # (name, Popen): unloaded, its memory not yet given back
        self.closed = False
        self.state = os.environ.get("TARMAC_SIM_STATE")

    def _registered(self, proc):
        """Whether NVML still lists PROC's memory (its registry entry is there); without a state
        directory, whether it runs."""
        if self.state:
            return os.path.exists(os.path.join(self.state, "procs", str(proc.pid)))
        return proc.poll() is None

    def load(self, name):
        with self.lock:  # a load racing the end starts nothing the end would miss
            if self.closed or name in self.loads:
                return
            self.loads[name] = subprocess.Popen([self.program, "--mem", self.size, "--util", "0"],
                                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL)
        self.record(f"load {name}")

    def unload(self, name):
        self.record(f"unload {name}")
        with self.lock:
            proc = self.loads.pop(name, None)
            if proc is None:
                return
            self.freeing.append((name, proc))
        threading.Thread(target=self._free, args=(name, proc), daemon=True).start()

    def _freed(self, name, proc):
        """Records "freed NAME" once for PROC, under the lock."""
        if (name, proc) in self.freeing:
            self.freeing.remove((name, proc))
            self.record(f"freed {name}")

    def _free(self, name, proc):
        time.sleep(self.free_delay)
        proc.terminate()
        proc.wait()
        with self.lock:
            self._freed(name, proc)

    def holding(self):
        """The models whose memory NVML still lists; a freeing one that it no longer lists is
        recorded as freed first."""
        with self.lock:
            for name, proc in list(self.freeing):
                if not self._registered(proc):
                    self._freed(name, proc)
            return sorted(set(self.loads) | {name for name, _ in self.freeing})

    def end(self):
        with self.lock:
            self.closed = True
            procs = list(self.loads.values()) + [proc for _, proc in self.freeing]
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def main():
    parser = argparse.ArgumentParser(description="a fake Ollama server for tests")
    parser.add_argument("command", nargs="?", default="serve", choices=["serve"], help="as `ollama serve`")
    parser.add_argument("--port", type=int, default=None, help="default: OLLAMA_HOST's, else 11434")
    parser.add_argument("--model", action="append", default=None)
    parser.add_argument("--token-delay", type=float, default=0.0)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--hold-mem", default=None, help="GPU memory a loaded model holds (tarmac-sim-load --mem)")
    parser.add_argument("--sim-load", default=None, help="the simulator's tarmac-sim-load")
    parser.add_argument("--free-delay", type=float, default=0.0, help="seconds from an unload to its memory's release")
    parser.add_argument("--events", default=None, help="a file to append what happened to, a line each")
    args = parser.parse_args()
    if (args.hold_mem is None) != (args.sim_load is None):
        parser.error("--hold-mem and --sim-load go together")
    host, port = listen_address(os.environ.get("OLLAMA_HOST"))
    if args.port is not None:
        port = args.port
    record_lock = threading.Lock()

    def record(line):
        if args.events:
            with record_lock, open(args.events, "a") as f:
                f.write(line + "\n")

    memory = SimMemory(args.sim_load, args.hold_mem, args.free_delay, record) if args.hold_mem else None
    fake = FakeOllama(models=args.model or ["tiny"], token_delay=args.token_delay, tokens=args.tokens, port=port,
                      host=host, on_load=memory.load if memory else None, on_unload=memory.unload if memory else None)

    def on_sigterm(signo, frame):
        held = memory.holding() if memory else []
        record(f"sigterm holding={','.join(held) or '-'}")
        if memory:
            memory.end()
        os._exit(0)
    signal.signal(signal.SIGTERM, on_sigterm)
    print(fake.url, flush=True)
    fake.server.serve_forever()


if __name__ == "__main__":
    main()
