"""End-to-end test of the agent's web dashboard (src/tarmac/serve/dashboard.html) in headless
Chromium, driven through the DevTools protocol (devtools.py) so the page stays open while the GPUs
change under it.

Each test runs the real thing (agent_support.LiveAgent): `tarmac sim --scenario ... --speed 1 --hold`
and `tarmac agent --listen 127.0.0.1:PORT` on it. test_follows_a_killed_process uses holding-zombie
and makes the change itself: it SIGKILLs GPU 3's notebook kernel while the page is open, so the page
is always seen before and after.

The console check is DevTools' own: every console call, uncaught exception and browser log entry
(test_the_console_check_can_fail shows that it sees them).
"""
import os
import pathlib
import re
import signal
import time
import unittest

from agent_support import LiveAgent, gpu_pids
from devtools import CHROMIUM, Browser, require_tool
from test_status import BUILD

REPO = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "src" / "tarmac" / "serve" / "dashboard.html"
SCENARIO = "a100x4-stall-midway"  # ~95 % until simulated second 3, then 4 % with memory held
N_GPUS = 4
METRICS = ["util", "mem", "power", "temp"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

VALUE_TEXT = ("(document.querySelector('[data-gpu=\"{gpu}\"] .mv[data-metric=\"{metric}\"] .val')"
              "?.textContent ?? null)")
UTIL_TEXT = VALUE_TEXT.replace("{metric}", "util").replace("{gpu}", "{}")
PROC_ROWS = "[...document.querySelectorAll('#proc-rows tr')].map(r => [...r.cells].map(c => c.textContent))"
# Every chart's line has a moved-to point and at least one line-to: its series has drawn.
ALL_LINES_DRAWN = ("(() => { const d = [...document.querySelectorAll('[data-gpu] svg.chart path.line')]"
                   ".map(p => p.getAttribute('d') || ''); return d.length == %d && "
                   "d.every(x => /^M[0-9.]+ [0-9.]+L/.test(x)); })()" % (N_GPUS * len(METRICS)))
KERNEL = "python -m ipykernel_launcher"


def need_chromium():
    require_tool("chromium", CHROMIUM, hint="Debian: apt-get install chromium")


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
        self.page = self.browser.page()
        self.page.navigate("about:blank")
        self.page.console.clear()

    def start(self, scenario=SCENARIO):
        """A fresh simulation and agent for this test, and the page open on it."""
        self.backend = LiveAgent(scenario, speed=1)
        self.addCleanup(self.backend.close)
        self.page.viewport(1280, 1800)
        self.page.navigate(self.backend.url)

    def util_text(self, gpu):
        return self.page.eval(UTIL_TEXT.format(gpu))

    def wait_for_data(self):
        found = self.page.wait_for(
            f"document.querySelectorAll('[data-gpu] .mv[data-metric=\"util\"] .val').length == {N_GPUS} && "
            f"[...document.querySelectorAll('.mv .val')].some(e => /%/.test(e.textContent))", timeout=120)
        self.assertTrue(found, f"no GPU values shown: {self.page.eval('document.body.innerText')!r}")

    def test_cards_charts_and_processes_without_console_messages(self):
        self.start()
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
        rows = self.page.eval(PROC_ROWS)
        self.assertEqual(sorted(r[0] for r in rows), [str(i) for i in range(N_GPUS)])
        self.assertTrue(all("python train.py" in r[3] for r in rows), rows)
        self.assertTrue(all(re.fullmatch(r"3\d\.\d GiB", r[6]) for r in rows), rows)
        self.assertTrue(self.page.eval("document.getElementById('banner').hidden"))
        link = self.page.eval("document.querySelector('a.report').href")
        self.assertEqual(link, self.backend.url + "report")
        self.assertEqual(self.page.console, [], "the page must log nothing to the console")

    def mem_gib(self, gpu):
        """GPU's memory in use as the page shows it, in GiB (None before it shows a number)."""
        text = self.page.eval(VALUE_TEXT.format(gpu=gpu, metric="mem"))
        m = re.fullmatch(r"([0-9.]+) GiB", text or "")
        return float(m.group(1)) if m else None

    def test_follows_a_killed_process(self):
        # holding-zombie: GPUs 0-2 train, GPU 3 is held by an idle notebook kernel (20480 MiB at 0 %).
        self.start("holding-zombie")
        self.wait_for_data()
        kernel_shown = (f"{PROC_ROWS}.some(r => r[0] === '3' && r[3].includes('{KERNEL}')) && "
                        f"/^(19|20|21)\\.[0-9] GiB$/.test({VALUE_TEXT.format(gpu=3, metric='mem')})")
        self.assertTrue(self.page.wait_for(kernel_shown, timeout=120),
                        f"no kernel on GPU 3 shown: rows {self.page.eval(PROC_ROWS)}, GPU 3 {self.mem_gib(3)} GiB")
        pids = gpu_pids(self.backend.sim.state, 3)
        self.assertEqual(len(pids), 1, f"processes on GPU 3: {pids}")
        before = self.page.eval(PROC_ROWS)
        self.assertEqual([r[1] for r in before if r[0] == "3"], [str(pids[0])], before)
        self.assertTrue(all(r[6] == "20.0 GiB" for r in before if r[0] == "3"), before)
        self.assertEqual(sorted({r[0] for r in before}), [str(i) for i in range(N_GPUS)], before)
        mem_before = self.mem_gib(3)

        os.kill(pids[0], signal.SIGKILL)
        killed = time.monotonic()
        gone = (f"!{PROC_ROWS}.some(r => r[3].includes('{KERNEL}')) && "
                f"parseFloat({VALUE_TEXT.format(gpu=3, metric='mem')}) < 1")
        self.assertTrue(self.page.wait_for(gone, timeout=120),  # only a hang reaches the bound
                        f"120 s after the kill: rows {self.page.eval(PROC_ROWS)}, GPU 3 {self.mem_gib(3)} GiB")
        took = time.monotonic() - killed
        after = self.page.eval(PROC_ROWS)
        self.assertNotIn(str(pids[0]), [r[1] for r in after], after)
        self.assertEqual(sorted({r[0] for r in after}), ["0", "1", "2"], after)  # the training goes on
        self.assertLess(self.mem_gib(3), 1.0)
        self.assertGreater(mem_before, 19.0)

        # The screenshot shows live data: every chart has drawn a line (history every 30 s, live
        # polls every 2 s: a few polls after the load).
        self.assertTrue(self.page.wait_for(ALL_LINES_DRAWN, timeout=120), "a chart has no line yet")
        self.page.pump(1)
        artifacts = BUILD / "test-artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        shot = artifacts / "dashboard.png"
        shot.unlink(missing_ok=True)
        data = self.page.screenshot(shot)
        self.assertTrue(data.startswith(PNG_SIGNATURE), "not a PNG")
        self.assertGreater(len(data), 20000, "the screenshot looks blank")
        self.assertEqual(self.page.console, [], "the page must log nothing to the console")
        print(f"\n  GPU 3: {mem_before} GiB and the kernel shown; {took:.1f} s after the kill the page showed "
              f"{self.mem_gib(3)} GiB and no kernel", end=" ")

    def test_banner_when_the_agent_goes_away(self):
        self.start()
        self.wait_for_data()
        self.assertTrue(self.page.eval("document.getElementById('banner').hidden"))
        self.assertEqual(self.backend.stop(), 0, self.backend.stderr()[-1500:])
        self.assertTrue(self.page.wait_for("!document.getElementById('banner').hidden", timeout=120),
                        "no 'agent not reachable' banner")
        self.assertIn("not reachable", self.page.eval("document.getElementById('banner').textContent"))
        # The last values stay on screen, and the page itself logged nothing: only Chromium's own
        # network errors for the failed requests are allowed.
        self.assertRegex(self.util_text(0), r"^\d+ %$")
        own = [m for m in self.page.console if not m.startswith("log.error: Failed to load resource")]
        self.assertEqual(own, [])

    def test_a_batch_on_a_gpu_shows_on_its_card(self):
        # /api/v1/gpus as an agent with backfill writes it (test_backfill_managed.py checks the agent's
        # side): the page's own fetch answers with GPU 1 running a batch whose name is markup.
        self.start()
        self.wait_for_data()
        self.assertTrue(self.page.eval("[...document.querySelectorAll('[data-gpu] p.backfill')].every(p => p.hidden)"))
        self.page.eval("""(() => { const real = window.fetch; window.fetch = async (url, o) => {
            const r = await real(url, o); if (!String(url).includes('api/v1/gpus')) return r;
            const j = await r.json(); j.gpus[1].backfill = [{model: '<img src=x onerror=alert(1)>', server: 'night',
              answered: 120, requests: 200}];
            return new Response(JSON.stringify(j), {status: 200, headers: {'content-type': 'application/json'}});
          }; })()""")
        shown = "document.querySelector('[data-gpu=\"1\"] p.backfill')"
        self.assertTrue(self.page.wait_for(f"!{shown}.hidden", timeout=30), "GPU 1's card shows no batch")
        self.assertEqual(self.page.eval(f"{shown}.textContent"),
                         "Backfill: <img src=x onerror=alert(1)> on night, 120 of 200 answered")
        self.assertEqual(self.page.eval(f"{shown}.querySelectorAll('img').length"), 0, "text, never markup")
        self.assertTrue(self.page.eval("[0, 2, 3].every(i => document.querySelector(`[data-gpu=\"${i}\"] p.backfill`).hidden)"))
        self.assertEqual(self.page.console, [])

    def test_layout_fits_a_phone(self):
        self.start()
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

    def test_the_console_check_can_fail(self):
        self.start()
        # The empty-console assertions above must be able to fail: what the page logs is seen.
        self.wait_for_data()
        self.page.eval("setTimeout(() => { console.error('dashboard-probe'); throw new Error('dashboard-boom'); })")
        self.page.pump(0.5)
        self.assertTrue(any("dashboard-probe" in m for m in self.page.console), self.page.console)
        self.assertTrue(any("dashboard-boom" in m for m in self.page.console), self.page.console)


if __name__ == "__main__":
    unittest.main()
