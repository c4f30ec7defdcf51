"""Headless Chromium driven through the DevTools protocol, with Python's standard library only: a
minimal WebSocket client (RFC 6455, client side: masked text frames out, fragmented frames and
pings in), the browser process, and one page whose console is recorded.

--dump-dom (test_report_html.py) sees a page once; a live page that polls needs a browser that
stays up while the test changes what the server says, hence this. Every console call, uncaught
exception and browser log entry (a failed fetch, a blocked resource) is kept in Page.console as
"kind: text", so a test can require it to stay empty.

Also the one place that says whether this run is CI's and what a missing tool means there
(require_tool): every test that needs a third-party program asks it.
"""
import base64
import json
import os
import pwd
import pathlib
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import unittest
import urllib.request
from urllib.parse import urlparse

CHROMIUM = "/usr/bin/chromium"


def in_ci():
    """Whether this is a CI run: CI=true, as .ci/run, GitHub Actions and GitLab set it."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require_tool(name, path=None, hint=""):
    """The path of the program NAME (PATH if given and executable, else NAME looked up on $PATH).
    When there is none the calling test skips, except under CI, where it fails: a CI run without
    promtool, Prometheus, chromium, tmux... must not pass by skipping what it was meant to check.
    HINT says how to install it."""
    found = path if path and os.access(path, os.X_OK) else (None if path else shutil.which(name))
    if found:
        return found
    what = f"{path or name} is not installed" + (f" ({hint})" if hint else "")
    if in_ci():
        raise AssertionError(f"{what}, and this is a CI run (CI={os.environ.get('CI')}): a missing tool fails here")
    raise unittest.SkipTest(what)


SECOND_USER = "tarmac-t2"


def second_user(test):
    """The passwd entry of the unprivileged second user the abuse tests act as, created when
    missing. Without useradd the test skips, or fails under CI (require_tool); a useradd that
    refuses (a read-only /etc) skips."""
    if subprocess.run(["id", "-u", SECOND_USER], capture_output=True).returncode != 0:
        useradd = require_tool("useradd", hint="Debian: the passwd package")
        r = subprocess.run([useradd, "-M", "-s", "/bin/false", SECOND_USER], capture_output=True, text=True)
        if r.returncode != 0:
            test.skipTest(f"cannot create {SECOND_USER}: {r.stderr.strip()}")
    return pwd.getpwnam(SECOND_USER)


def demoted(pw):
    """A preexec_fn that makes the child PW: its uid and gid, and no supplementary groups."""
    def demote():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    return demote


class WebSocket:
    def __init__(self, url, timeout=30):
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the WebSocket: {head[:200]!r}")

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send_frame(self, opcode, payload):
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, text):
        self._send_frame(0x1, text.encode("utf-8"))

    def recv(self, timeout):
        """The next text message, or None when none came within TIMEOUT seconds."""
        self.sock.settimeout(timeout)
        message = b""
        while True:
            try:
                b0, b1 = self._read(2)
            except (socket.timeout, TimeoutError):
                if message:
                    raise
                return None
            self.sock.settimeout(30)  # the rest of a started frame comes at once
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 0x9:
                self._send_frame(0xA, payload)
            elif opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            elif opcode in (0x0, 0x1, 0x2):
                message += payload
                if b0 & 0x80:
                    return message.decode("utf-8")

    def close(self):
        try:
            self._send_frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class Page:
    """One tab: call() sends a DevTools command and waits for its answer, keeping events meanwhile."""

    def __init__(self, ws_url):
        self.ws = WebSocket(ws_url)
        self.next_id = 0
        self.console = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(domain + ".enable")

    def _event(self, msg):
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            self.console.append(f"console.{p.get('type')}: {text}")
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.console.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Log.entryAdded":
            e = p.get("entry", {})
            if e.get("level") != "verbose":
                self.console.append(f"log.{e.get('level')}: {e.get('text')} {e.get('url', '')}".rstrip())

    def call(self, method, params=None, timeout=30):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            raw = self.ws.recv(max(0.01, left)) if left > 0 else None
            if raw is None:
                raise TimeoutError(f"DevTools did not answer {method} within {timeout} s")
            msg = json.loads(raw)
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def pump(self, seconds):
        """Lets SECONDS pass while recording the page's events."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            raw = self.ws.recv(left)
            if raw is not None:
                self._event(json.loads(raw))

    def eval(self, expression):
        """The JSON value of EXPRESSION in the page (a thrown error is raised here, not logged there)."""
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def navigate(self, url):
        self.call("Page.navigate", {"url": url})

    def wait_for(self, expression, timeout=120, step=0.2):
        """Polls EXPRESSION until it is truthy; returns its value, or None after TIMEOUT seconds (a
        hang's bound, not a slow machine's)."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.eval(expression)
            if v or time.monotonic() > deadline:
                return v or None
            self.pump(step)

    def viewport(self, width, height, mobile=False):
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})

    def screenshot(self, path):
        data = base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])
        pathlib.Path(path).write_bytes(data)
        return data


class Browser:
    """Headless Chromium with a DevTools port; page() is its one tab."""

    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="tarmac-chromium-")
        self.log = tempfile.TemporaryFile()  # not a pipe: nobody reads it while the page runs
        self._page = None
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "--window-size=1280,1800",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=self.log)
        active = pathlib.Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (active.exists() and len(active.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise AssertionError(f"chromium did not open its DevTools port: {self.stderr()[-2000:]}")
            time.sleep(0.05)
        self.port = int(active.read_text().splitlines()[0])

    def stderr(self):
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def page(self):
        if self._page is None:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as r:
                targets = json.load(r)
            tab = next(t for t in targets if t.get("type") == "page")
            self._page = Page(tab["webSocketDebuggerUrl"])
        return self._page

    def close(self):
        if self._page is not None:
            self._page.ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)
