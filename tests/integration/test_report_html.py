"""End-to-end test of `tarmac report --html`: record a simulated day with the agent, render the
report, and open the page in headless Chromium (Debian's `chromium`) as a person would.

Chromium's console: with --enable-logging=stderr every console message, whatever its level, is
written as a line containing "INFO:CONSOLE"; console.error, console.warn and an uncaught exception
all look alike there (checked by hand with Chromium 131 on a page holding
`<script>console.log("hello");throw new Error("boom-x")</script>`: stderr had
`INFO:CONSOLE:1] "Uncaught Error: boom-x", source: file:///...`). The report has no script, so the
test requires no console line at all; test_a_throwing_page_is_caught re-checks that this detection
still works with the installed Chromium, so the assertion cannot silently pass. A failed load of an
external resource is not logged there, so "fetches nothing" is checked on the file's text instead.
"""
import html
import json
import pathlib
import re
import subprocess
import tempfile
import unittest
from html.parser import HTMLParser

from devtools import CHROMIUM, require_tool
from test_status import BUILD, TARMAC, sim

CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                  "--virtual-time-budget=2000", "--hide-scrollbars"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chromium(page, *args):
    """Runs headless Chromium on PAGE; returns (stdout, the console lines of stderr)."""
    r = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, *args, page.as_uri()], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"chromium exit {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout, [line for line in r.stderr.splitlines() if "CONSOLE" in line]


def need_chromium(test):
    """Skips without Chromium, except under CI, where a missing browser must not pass as a skip."""
    require_tool("chromium", CHROMIUM, hint="Debian: apt-get install chromium")


class Elements(HTMLParser):
    """The tags of a page with their classes and the <svg> (by class) each one is in."""

    def __init__(self):
        super().__init__()
        self.found = []  # (tag, classes, enclosing svg's classes, attributes)
        self._svg = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if tag == "svg":
            self._svg.append(classes)
        self.found.append((tag, classes, self._svg[-1] if self._svg else set(), a))

    def handle_endtag(self, tag):
        if tag == "svg" and self._svg:
            self._svg.pop()

    def select(self, tag, cls, svg):
        return [f for f in self.found if f[0] == tag and cls in f[1] and svg in f[2]]


def parse(text):
    p = Elements()
    p.feed(text)
    return p


class ReportHtml(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = pathlib.Path(cls.tmp.name)
        state = cls.dir / "state"
        # One simulated day of the idle fleet in about 25 s: Monday, GPUs 0-3 pre-train 09:00-17:00.
        r = sim("h100x8-idle-fleet", TARMAC, "agent", "--listen", "off", "--clock", "sim", "--interval", "60s", "--duration", "1d",
                "--state-dir", str(state), extra=["--speed", "3600"], timeout=300)
        if r.returncode != 0:
            raise AssertionError(f"agent exit {r.returncode}: {r.stderr}")
        cls.db = state / "tarmac.db"
        cls.page = cls.dir / "report.html"
        cls.report = subprocess.run([TARMAC, "report", "--db", str(cls.db), "--since", "7d", "--price", "2.5",
                                     "--html", str(cls.page)], capture_output=True, text=True, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def text(self):
        self.assertEqual(self.report.returncode, 0, self.report.stderr)
        return self.page.read_text(encoding="utf-8")

    def test_page_is_written_and_self_contained(self):
        page = self.text()
        self.assertTrue(page.startswith("<!DOCTYPE html>"))
        for ref in ("http://", "https://", "src=", "<link", "@import"):
            self.assertNotIn(ref, page)
        self.assertEqual(page.count("url("), page.count("url(#"), "url() only for the page's own SVG fragments")
        self.assertNotIn("<script", page)

    def test_page_shows_the_recorded_day(self):
        doc = parse(self.text())
        bars = doc.select("g", "bar", "chart-classes")
        self.assertEqual([b[3]["data-gpu"] for b in bars], [str(i) for i in range(8)])
        # The pre-training job: about 8 busy hours on GPUs 0-3, none on 4-7.
        busy = {m.group(1): float(m.group(2))
                for m in re.finditer(r"<title>GPU (\d) Busy: ([0-9.]+) h", self.text())}
        self.assertEqual(sorted(busy), ["0", "1", "2", "3"])
        for gpu, hours in busy.items():
            # Within 1 h: the simulator's process start-up lag at --speed 3600 reaches 25 simulated
            # minutes under the sanitizers (test_agent_week.py checks the hours precisely).
            self.assertAlmostEqual(hours, 8.0, delta=1.0, msg=f"GPU {gpu}")
        cells = doc.select("rect", "cell", "chart-heatmap")
        self.assertEqual(len(cells) % 24, 0)
        filled = [c for c in cells if "empty" not in c[1]]
        self.assertGreaterEqual(len(filled), 24, "every recorded hour has a colour")
        self.assertIn(">Mon 01-06<", self.text())
        self.assertRegex(self.text(), r"Idle cost</div><div class=\"v\">\$[1-9][0-9,]*\.[0-9]{2}<")

    def test_chromium_renders_it_without_console_errors(self):
        need_chromium(self)
        self.text()
        dom, console = chromium(self.page, "--dump-dom")
        self.assertEqual(console, [], "the page must log nothing to the console")
        doc = parse(dom)
        self.assertEqual(len(doc.select("svg", "chart-classes", "chart-classes")), 1)
        self.assertEqual(len(doc.select("g", "bar", "chart-classes")), 8)
        self.assertGreaterEqual(len(doc.select("rect", "cell", "chart-heatmap")), 24)

    def test_layout_fits_a_phone(self):
        need_chromium(self)
        # A copy with a probe script: the page itself has none. Headless Chromium keeps the window
        # at least 500 px wide, still a phone-sized layout. The page must not scroll sideways (the
        # charts and tables scroll inside their own boxes) and every bar must have drawn.
        probe = ("<script>const m = {width: innerWidth, overflow: document.documentElement.scrollWidth - innerWidth,"
                 " bars: [...document.querySelectorAll('svg.chart-classes g.bar')]"
                 ".map(g => g.getBoundingClientRect().width),"
                 " cells: document.querySelectorAll('svg.chart-heatmap rect.cell').length};"
                 " document.body.setAttribute('data-probe', JSON.stringify(m));</script>")
        copy = self.dir / "probe.html"
        copy.write_text(self.text().replace("</body>", probe + "</body>"), encoding="utf-8")
        dom, console = chromium(copy, "--window-size=390,844", "--dump-dom")
        self.assertEqual(console, [])
        found = re.search(r'data-probe="([^"]*)"', dom)
        self.assertIsNotNone(found, "the probe did not run")
        m = json.loads(html.unescape(found.group(1)))
        self.assertLessEqual(m["width"], 500)
        self.assertLessEqual(m["overflow"], 0, f"the page scrolls sideways at {m['width']} px")
        self.assertEqual(len(m["bars"]), 8)
        self.assertTrue(all(w > 100 for w in m["bars"]), m["bars"])

    def test_screenshot_is_kept_as_an_artifact(self):
        need_chromium(self)
        self.text()
        artifacts = BUILD / "test-artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        shot = artifacts / "report.png"
        shot.unlink(missing_ok=True)
        chromium(self.page, f"--screenshot={shot}", "--window-size=1280,2000")
        data = shot.read_bytes()
        self.assertTrue(data.startswith(PNG_SIGNATURE), "not a PNG")
        # A blank 1280x2000 page compresses to a few kB; the charts and tables take far more.
        self.assertGreater(len(data), 20000, "the screenshot looks blank")

    def test_a_throwing_page_is_caught(self):
        # The console check above must be able to fail: a page that throws is seen.
        need_chromium(self)
        bad = self.dir / "throws.html"
        bad.write_text("<!DOCTYPE html><p>x</p><script>throw new Error('report-probe')</script>")
        _, console = chromium(bad, "--dump-dom")
        self.assertTrue(any("report-probe" in line for line in console), console)


if __name__ == "__main__":
    unittest.main()
