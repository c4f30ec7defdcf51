"""End-to-end test of the agent's web dashboard (src/tarmac/serve/dashboard.html) in headless
Chromium, driven through the DevTools protocol (devtools.py) so the page stays open while the GPUs
change under it.

start_dashboard() runs the real thing: `tarmac sim --scenario a100x4-stall-midway --speed 1 --hold`
and `tarmac --config FILE agent` with `[http] listen` on a free loopback port. Only when
TARMAC_DASHBOARD_FAKE=1 is set and the agent serves no HTTP (not built yet, or the binary
missing) does it fall back to fake_agent.py, which serves the page from the source tree and canned
JSON in the same shapes; without that variable such an agent is a failure, not a skip.

The console check is DevTools' own: every console call, uncaught exception and browser log entry
(test_the_console_check_can_fail shows that it sees them).
"""
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

from devtools import CHROMIUM, Browser
from fake_agent import DASHBOARD, FakeAgent
from test_status import BUILD, TARMAC

SCENARIO = "a100x4-stall-midway"  # ~95 % until simulated second 3, then 4 % with memory held
N_GPUS = 4
METRICS = ["util", "mem", "power", "temp"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_real_agent_missing = None  # why the real agent could not serve, once found out (fake mode only)

UTIL_TEXT = "(document.querySelector('[data-gpu=\"{}\"] .mv[data-metric=\"util\"] .val')?.textContent ?? null)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8", "replace")


class RealDashboard:
    """The simulated A100s with `tarmac agent` serving HTTP on them."""
    kind = "agent"

    def __init__(self, wait_s=20):
        from agent_support import HeldSim  # its import needs the build directory
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-dashboard-"))
        self.sim = HeldSim(SCENARIO, speed=1, state=str(self.dir / "sim"))
        self.agent = None
        self.err = None
        try:
            port = free_port()
            config = self.dir / "tarmac.toml"
            config.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
            self.err = open(self.dir / "agent.stderr", "w+")
            self.agent = subprocess.Popen(
                [TARMAC, "--config", str(config), "agent", "--state-dir", str(self.dir / "state"),
                 "--interval", "500ms", "--process-interval", "1s"],
                env=self.sim.env(), stdout=subprocess.DEVNULL, stderr=self.err, text=True)
            self.url = f"http://127.0.0.1:{port}/"
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    if http_get(self.url + "healthz")[1].strip() == "ok":
                        break
                except OSError:
                    pass
                # Today's agent warns about [http] and serves nothing: no need to wait for it.
                unserved = "unknown section 'http'" in self.stderr()
                if unserved or self.agent.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the agent served no /healthz on {self.url} "
                                       f"(exit {self.agent.poll()}): {self.stderr()[-1500:]}")
                time.sleep(0.05)
        except BaseException:
            self.close()
            raise

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def sim_seconds(self):
        """The simulation's clock, from `tarmac sim status`."""
        out = subprocess.run([TARMAC, "sim", "status", "--state", self.sim.state], capture_output=True, text=True,
                             timeout=30).stdout
        m = re.search(r"simulated time ([0-9.]+) s", out)
        return float(m.group(1)) if m else None

    def stall(self):
        """Nothing to do: the scenario stalls by itself at simulated second 3."""

    def go_down(self):
        self.agent.terminate()
        self.agent.wait(timeout=10)

    def close(self):
        if self.agent is not None and self.agent.poll() is None:
            self.agent.terminate()
            try:
                self.agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()
        self.sim.close()
        self.sim.proc.stdout.close()
        self.sim.proc.stderr.close()
        if self.err is not None:
            self.err.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class FakeDashboard:
    """fake_agent.py: the same page and API shapes, switched by hand."""
    kind = "fake"

    def __init__(self):
        self.fake = FakeAgent(N_GPUS).start()
        self.url = self.fake.url

    def sim_seconds(self):
        return 0.0  # before the switch, always

    def stall(self):
        self.fake.switch()

    def go_down(self):
        self.fake.set_down(True)

    def close(self):
        self.fake.stop()


def start_dashboard():
    """The real agent on the stall scenario; the fake only under TARMAC_DASHBOARD_FAKE=1 when the agent
    serves no HTTP yet."""
    global _real_agent_missing
    fake_allowed = os.environ.get("TARMAC_DASHBOARD_FAKE") == "1"
    if fake_allowed and _real_agent_missing is None and not os.access(TARMAC, os.X_OK):
        _real_agent_missing = f"{TARMAC} is not built"
    if _real_agent_missing is None:
        try:
            return RealDashboard()
        except RuntimeError as e:
            if not fake_allowed:
                raise AssertionError(f"{e}\n(TARMAC_DASHBOARD_FAKE=1 tests the page against fake_agent.py)")
            _real_agent_missing = str(e)
            print(f"\ntest_dashboard: using fake_agent.py: {e}", file=sys.stderr)
    return FakeDashboard()


def need_chromium():
    if os.path.exists(CHROMIUM):
        return
    if os.environ.get("CI"):
        raise AssertionError(f"{CHROMIUM} is missing and CI is set: install Debian's chromium package")
    raise unittest.SkipTest(f"{CHROMIUM} not installed (apt-get install chromium); the dashboard is not tested")


class DashboardFile(unittest.TestCase):
    def test_page_is_self_contained(self):
        page = DASHBOARD.read_text(encoding="utf-8")
        self.assertTrue(page.startswith("<!DOCTYPE html>"))
        self.assertIn('name="viewport"', page)
        # The only absolute URL is the SVG namespace; the only <link> is the empty inline icon.
        self.assertEqual(re.findall(r"https?://[^\s\"'`]+", page), ["http://www.w3.org/2000/svg"])
        self.assertEqual(re.findall(r"<link[^>]*>", page), ['<link rel="icon" href="data:,">'])
        for ref in ("src=", "@import", "url(", "console.", "innerHTML", "eval("):
            self.assertNotIn(ref, page)


class Dashboard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        need_chromium()
        cls.browser = Browser()

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()

    def setUp(self):
        # A fresh backend per test: the stall happens once per simulation.
        self.page = self.browser.page()
        self.page.navigate("about:blank")
        self.page.console.clear()
        self.backend = start_dashboard()
        self.addCleanup(self.backend.close)
        self.page.viewport(1280, 1800)
        self.page.navigate(self.backend.url)

    def util_text(self, gpu):
        return self.page.eval(UTIL_TEXT.format(gpu))

    def wait_for_data(self):
        found = self.page.wait_for(
            f"document.querySelectorAll('[data-gpu] .mv[data-metric=\"util\"] .val').length == {N_GPUS} && "
            f"[...document.querySelectorAll('.mv .val')].some(e => /%/.test(e.textContent))", timeout=20)
        self.assertTrue(found, f"no GPU values shown: {self.page.eval('document.body.innerText')!r}")

    def test_cards_charts_and_processes_without_console_messages(self):
        self.wait_for_data()
        self.page.pump(5)  # two more live polls, so that the charts have several points
        cards = self.page.eval("[...document.querySelectorAll('#gpus > [data-gpu]')].map(c => ({gpu: c.dataset.gpu,"
                               " charts: [...c.querySelectorAll('svg.chart')].map(s => s.dataset.metric),"
                               " lines: [...c.querySelectorAll('svg.chart path.line')].map(p => p.getAttribute('d')),"
                               " strip: c.querySelectorAll('svg.strip rect').length}))")
        self.assertEqual([c["gpu"] for c in cards], [str(i) for i in range(N_GPUS)])
        for c in cards:
            with self.subTest(gpu=c["gpu"]):
                self.assertEqual(c["charts"], METRICS)
                for metric, d in zip(METRICS, c["lines"]):
                    # A moved-to point and at least one line-to: the series has drawn.
                    self.assertRegex(d, r"^M[0-9.]+ [0-9.]+L", metric)
                self.assertGreaterEqual(c["strip"], 1, "the activity strip is empty")
        header = self.page.eval("document.querySelector('header.hero').innerText")
        self.assertRegex(header, r"driver 5\d\d\.\d+\.\d+")
        self.assertRegex(header, r"updated \d+ s ago")
        self.assertNotIn("connecting", header)
        rows = self.page.eval("[...document.querySelectorAll('#proc-rows tr')].map(r => "
                              "[...r.cells].map(c => c.textContent))")
        self.assertEqual(sorted(r[0] for r in rows), [str(i) for i in range(N_GPUS)])
        self.assertTrue(all("python train.py" in r[3] for r in rows), rows)
        self.assertTrue(all(re.fullmatch(r"3\d\.\d GiB", r[6]) for r in rows), rows)
        self.assertTrue(self.page.eval("document.getElementById('banner').hidden"))
        link = self.page.eval("document.querySelector('a.report').href")
        self.assertEqual(link, self.backend.url + "report")
        self.assertEqual(self.page.console, [], "the page must log nothing to the console")

    def test_follows_the_stall(self):
        self.wait_for_data()
        first, at = self.util_text(0), self.backend.sim_seconds()
        if at is not None and at < 2.5:
            # Seen before the stall (always with the fake; with the agent when it started in time).
            self.assertGreaterEqual(int(first.split()[0]), 90, first)
        else:
            print(f"\ntest_follows_the_stall: the page first showed {first!r} at simulated {at} s, after the "
                  "stall; only the stalled value is checked", file=sys.stderr)
        self.backend.stall()
        self.assertTrue(self.page.wait_for(UTIL_TEXT.format(0) + " === '4 %'", timeout=15),
                        f"GPU 0 still shows {self.util_text(0)!r}")
        self.assertEqual([self.util_text(i) for i in range(N_GPUS)], ["4 %"] * N_GPUS)
        # The chart moved with the live polls: its last point is near the bottom (4 % of 100).
        last_y = self.page.eval("(() => { const d = document.querySelector('[data-gpu=\"0\"] svg.chart"
                                "[data-metric=\"util\"] path.line').getAttribute('d');"
                                " return parseFloat(d.trim().split(' ').pop()); })()")
        self.assertGreater(last_y, 90, "the utilization line did not drop")
        self.assertEqual(self.page.console, [])

    def test_banner_when_the_agent_goes_away(self):
        self.wait_for_data()
        self.assertTrue(self.page.eval("document.getElementById('banner').hidden"))
        self.backend.go_down()
        self.assertTrue(self.page.wait_for("!document.getElementById('banner').hidden", timeout=15),
                        "no 'agent not reachable' banner")
        self.assertIn("not reachable", self.page.eval("document.getElementById('banner').textContent"))
        # The last values stay on screen, and the page itself logged nothing: only Chromium's own
        # network errors for the failed requests are allowed.
        self.assertRegex(self.util_text(0), r"^\d+ %$")
        own = [m for m in self.page.console if not m.startswith("log.error: Failed to load resource")]
        self.assertEqual(own, [])

    def test_layout_fits_a_phone(self):
        self.page.viewport(390, 844, mobile=True)
        self.wait_for_data()
        self.page.pump(1)
        m = self.page.eval("({width: innerWidth, overflow: document.documentElement.scrollWidth - innerWidth,"
                           " cards: [...document.querySelectorAll('[data-gpu] svg.chart')]"
                           ".map(s => s.getBoundingClientRect().width)})")
        self.assertLessEqual(m["width"], 400)
        self.assertLessEqual(m["overflow"], 0, f"the page scrolls sideways at {m['width']} px")
        self.assertEqual(len(m["cards"]), N_GPUS * len(METRICS))
        self.assertTrue(all(w > 100 for w in m["cards"]), m["cards"])
        self.assertEqual(self.page.console, [])

    def test_screenshot_is_kept_as_an_artifact(self):
        self.wait_for_data()
        self.page.pump(3)
        artifacts = BUILD / "test-artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        shot = artifacts / "dashboard.png"
        shot.unlink(missing_ok=True)
        data = self.page.screenshot(shot)
        self.assertTrue(data.startswith(PNG_SIGNATURE), "not a PNG")
        self.assertGreater(len(data), 20000, "the screenshot looks blank")

    def test_the_console_check_can_fail(self):
        # The empty-console assertions above must be able to fail: what the page logs is seen.
        self.wait_for_data()
        self.page.eval("setTimeout(() => { console.error('dashboard-probe'); throw new Error('dashboard-boom'); })")
        self.page.pump(0.5)
        self.assertTrue(any("dashboard-probe" in m for m in self.page.console), self.page.console)
        self.assertTrue(any("dashboard-boom" in m for m in self.page.console), self.page.console)


if __name__ == "__main__":
    unittest.main()
