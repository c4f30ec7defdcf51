"""End-to-end tests of the install rules (cmake/install.cmake): what `cmake --install` puts where, and
that the installed binary, tarmac.toml and systemd unit work together."""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

from devtools import require_tool
from test_status import BUILD

UNIT = "tarmac-agent.service"
REAP_UNITS = ("tarmac-reap.service", "tarmac-reap.timer")


def cmake_command():
    """The cmake that configured the build (CMakeCache.txt), else the one on PATH."""
    cache = BUILD / "CMakeCache.txt"
    if cache.exists():
        m = re.search(r"^CMAKE_COMMAND:INTERNAL=(.+)$", cache.read_text(), re.M)
        if m:
            return m.group(1)
    return shutil.which("cmake") or "cmake"


def install(prefix, destdir=None):
    """`cmake --install BUILD --prefix PREFIX` (with DESTDIR when given); returns the CompletedProcess."""
    env = dict(os.environ)
    env.pop("DESTDIR", None)
    if destdir is not None:
        env["DESTDIR"] = str(destdir)
    return subprocess.run([cmake_command(), "--install", str(BUILD), "--prefix", str(prefix)],
                          capture_output=True, text=True, timeout=120, env=env)


def unit_settings(text):
    """The unit's KEY=VALUE lines (comments left out), each key with the list of its values."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key, []).append(value)
    return out


def run(*args, env=None):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=full)


class InstallUnderAPrefix(unittest.TestCase):
    """One `cmake --install --prefix TMP`, as a user trying tarmac out without root would run it."""

    @classmethod
    def setUpClass(cls):
        if not (BUILD / "packaging" / "tarmac.toml").exists():
            raise AssertionError(f"{BUILD}/packaging/tarmac.toml is missing: build the tarmac_packaging target "
                                 "(part of the default target)")
        cls.dir = tempfile.TemporaryDirectory()
        cls.prefix = pathlib.Path(cls.dir.name) / "prefix"
        r = install(cls.prefix)
        if r.returncode != 0:
            cls.dir.cleanup()
            raise AssertionError(f"cmake --install failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        cls.output = r.stdout
        cls.tarmac = cls.prefix / "bin" / "tarmac"
        cls.toml = cls.prefix / "etc" / "tarmac" / "tarmac.toml"
        cls.unit = cls.prefix / "lib" / "systemd" / "system" / UNIT

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_the_files_land_under_the_prefix(self):
        self.assertTrue(os.access(self.tarmac, os.X_OK), self.output)
        self.assertTrue(self.toml.is_file(), self.output)
        self.assertTrue(self.unit.is_file(), self.output)
        docs = self.prefix / "share" / "doc" / "tarmac"
        self.assertTrue((docs / "ARCHITECTURE.md").is_file(), self.output)
        self.assertTrue((docs / "configuration.md").is_file(), self.output)
        self.assertEqual((docs / "tarmac.toml.default").read_text(), self.toml.read_text())
        self.assertTrue((docs / "metrics.md").is_file(), self.output)
        dashboard = self.prefix / "share" / "tarmac" / "grafana" / "tarmac.json"
        self.assertTrue(json.loads(dashboard.read_text())["title"].startswith("tarmac"), self.output)

    def test_nothing_else_is_installed_the_simulator_least_of_all(self):
        files = {str(p.relative_to(self.prefix)) for p in self.prefix.rglob("*")
                 if p.is_file() and not p.is_relative_to(self.prefix / "share" / "doc")}
        self.assertEqual(files, {"bin/tarmac", "etc/tarmac/tarmac.toml", f"lib/systemd/system/{UNIT}",
                                 *(f"lib/systemd/system/{u}" for u in REAP_UNITS),
                                 "lib/tmpfiles.d/tarmac.conf", "share/tarmac/grafana/tarmac.json",
                                 "share/tarmac/prometheus/tarmac-rules.yml", "share/man/man1/tarmac.1.gz",
                                 "share/bash-completion/completions/tarmac", "share/zsh/vendor-completions/_tarmac",
                                 "share/fish/vendor_completions.d/tarmac.fish"})

    def test_the_installed_binary_runs(self):
        r = run(str(self.tarmac), "--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("tarmac", r.stdout)
        self.assertEqual(r.stdout, run(str(BUILD / "tarmac"), "--version").stdout)
        # It names the commit it was built from: the checkout's, "+dirty" when files differed.
        m = re.fullmatch(r"tarmac \d+\.\d+\.\d+ \(git ([0-9a-f]{12})(\+dirty)?\)\n", r.stdout)
        self.assertTrue(m, r.stdout)
        source = pathlib.Path(__file__).resolve().parents[2]
        head = subprocess.run(["git", "-C", str(source), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True)
        if head.returncode == 0:
            self.assertEqual(m.group(1), head.stdout.strip())

    def test_the_installed_configuration_is_the_defaults_and_reads_back_clean(self):
        defaults = run(str(self.tarmac), "config", "--defaults")
        self.assertEqual(defaults.returncode, 0, defaults.stderr)
        self.assertEqual(self.toml.read_text(), defaults.stdout)
        r = run(str(self.tarmac), "--config", str(self.toml), "config", "--check")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, f"configuration ok: {self.toml}\n")
        self.assertEqual(r.stderr, "")
        # Read back, it changes no value.
        r = run(str(self.tarmac), "--json", "--config", str(self.toml), "config")
        self.assertEqual(r.returncode, 0, r.stderr)
        read = json.loads(r.stdout)
        self.assertEqual(read["files"], [str(self.toml)])
        self.assertEqual(read["warnings"], [])
        defaults = json.loads(run(str(self.tarmac), "--json", "config", "--defaults").stdout)
        self.assertEqual(read["values"], defaults["values"])

    def test_the_unit_runs_the_installed_binary_with_the_installed_configuration(self):
        s = unit_settings(self.unit.read_text())
        config = f" --config {self.toml}"  # the prefix's sysconfdir is not /etc
        self.assertEqual(s["ExecStart"], [f"{self.tarmac}{config} agent"])
        self.assertEqual(s["ExecStartPre"], [f"{self.tarmac}{config} agent --check-config"])
        self.assertEqual(s["Restart"], ["on-failure"])
        self.assertEqual(s["RestartPreventExitStatus"], ["2"])
        self.assertEqual(s["StateDirectory"], ["tarmac"])
        self.assertEqual(s["RuntimeDirectory"], ["tarmac"])
        self.assertEqual(s["ConfigurationDirectory"], ["tarmac"])
        self.assertEqual(s["ProtectProc"], ["default"])
        self.assertNotIn("User", s)  # root: it must see every process
        self.assertNotRegex(self.unit.read_text(), r"@[A-Z_]+@")  # every placeholder substituted

    def test_the_units_check_command_accepts_the_installed_configuration(self):
        # What systemd runs first, with the environment StateDirectory= gives it.
        state = pathlib.Path(self.dir.name) / "state"
        pre = shlex.split(unit_settings(self.unit.read_text())["ExecStartPre"][0])
        r = run(*pre, env={"STATE_DIRECTORY": str(state)})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"configuration ok: {self.toml}\n", r.stdout)
        self.assertIn(f"store: {state}/", r.stdout)
        self.assertEqual(r.stderr, "")

    def test_systemd_analyze_verify_accepts_the_units(self):
        analyze = require_tool("systemd-analyze", hint="Debian: the systemd package")
        units = [self.unit] + [self.unit.parent / u for u in REAP_UNITS]
        r = subprocess.run([analyze, "verify", "--man=no", *map(str, units)], capture_output=True, text=True,
                           timeout=60)
        about_units = [line for line in (r.stdout + r.stderr).splitlines()
                       if any(u in line for u in (UNIT, *REAP_UNITS))]
        self.assertEqual(about_units, [], r.stdout + r.stderr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_the_hourly_reaper_runs_the_binary_confined(self):
        unit_dir = self.unit.parent
        service = unit_settings((unit_dir / "tarmac-reap.service").read_text())
        self.assertRegex(service["ExecStart"][0], rf"^{re.escape(str(self.tarmac))}( --config \S+)? reap --kill$")
        self.assertEqual(service["Type"], ["oneshot"])
        self.assertEqual(service["SuccessExitStatus"], ["1"])  # candidates left is not a failed pass
        self.assertEqual(service["StateDirectory"], ["tarmac"])  # where it records what it did
        self.assertEqual(service["ProtectSystem"], ["strict"])
        self.assertEqual(service["NoNewPrivileges"], ["yes"])
        self.assertEqual(set(service["CapabilityBoundingSet"][0].split()),
                         {"CAP_KILL", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_DAC_OVERRIDE"})
        self.assertEqual(service["ProtectProc"], ["default"])  # it must see every process
        # It must see the scheduler's real lock directory (a tarmac job's processes are protected by
        # its leases): no private /tmp, and the default directory writable for its .lock.
        self.assertEqual(service["PrivateTmp"], ["no"])
        self.assertEqual(service["ReadWritePaths"], ["-/run/tarmac/locks"])
        # One pidfd per process of a candidate's tree (up to 4096) must fit (L1 of the third review).
        self.assertEqual(service["LimitNOFILE"], ["65536"])
        self.assertNotIn("User", service)
        self.assertNotIn("Install", (unit_dir / "tarmac-reap.service").read_text())  # the timer starts it
        timer = unit_settings((unit_dir / "tarmac-reap.timer").read_text())
        self.assertEqual(timer["OnCalendar"], ["hourly"])
        self.assertEqual(timer["Persistent"], ["true"])
        self.assertEqual(timer["WantedBy"], ["timers.target"])
        for u in REAP_UNITS:
            self.assertNotRegex((unit_dir / u).read_text(), r"@[A-Z_]+@")

    def test_a_second_install_keeps_an_edited_configuration(self):
        dir = tempfile.TemporaryDirectory()
        self.addCleanup(dir.cleanup)
        prefix = pathlib.Path(dir.name)
        self.assertEqual(install(prefix).returncode, 0)
        toml = prefix / "etc" / "tarmac" / "tarmac.toml"
        toml.write_text("[activity]\nbusy_util_pct = 40\n")
        r = install(prefix)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"Keeping: {toml}", r.stdout)
        self.assertEqual(toml.read_text(), "[activity]\nbusy_util_pct = 40\n")


class InstallForAPackage(unittest.TestCase):
    """`DESTDIR=ROOT cmake --install --prefix /usr`, as a distribution package is staged."""

    def test_usr_prefix_puts_the_configuration_in_etc_and_the_unit_needs_no_config_flag(self):
        dir = tempfile.TemporaryDirectory()
        self.addCleanup(dir.cleanup)
        root = pathlib.Path(dir.name)
        r = install("/usr", destdir=root)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue((root / "usr" / "bin" / "tarmac").is_file())
        self.assertTrue((root / "etc" / "tarmac" / "tarmac.toml").is_file())
        self.assertTrue((root / "usr" / "share" / "doc" / "tarmac" / "ARCHITECTURE.md").is_file())
        s = unit_settings((root / "usr" / "lib" / "systemd" / "system" / UNIT).read_text())
        self.assertEqual(s["ExecStart"], ["/usr/bin/tarmac agent"])
        self.assertEqual(s["ExecStartPre"], ["/usr/bin/tarmac agent --check-config"])
        self.assertEqual(s["Documentation"], ["file:/usr/share/doc/tarmac/recorder.md",
                                              "file:/usr/share/doc/tarmac/configuration.md",
                                              "file:/usr/share/doc/tarmac/scheduler.md"])
        self.assertEqual(s["KillMode"], ["process"])  # jobs outlive a restart of the agent


if __name__ == "__main__":
    unittest.main()


def subcommands(*path):
    """The subcommands `tarmac PATH --help` lists (CLI11's own listing of the command line)."""
    r = run(str(BUILD / "tarmac"), *path, "--help")
    if "Subcommands:" not in r.stdout:
        return []
    listing = r.stdout.split("Subcommands:", 1)[1]
    return [line.split()[0] for line in listing.splitlines() if line.startswith("  ") and line.split()]


class GeneratedDocs(unittest.TestCase):
    """The manual page and the completions come from the command line: every subcommand `--help`
    lists, at every depth, has its section in `tarmac man` and is completed by bash."""

    @classmethod
    def setUpClass(cls):
        cls.paths = []
        todo = [()]
        while todo:
            path = todo.pop()
            for sub in subcommands(*path):
                cls.paths.append((*path, sub))
                todo.append((*path, sub))
        cls.page = run(str(BUILD / "tarmac"), "man").stdout

    def test_every_subcommand_has_its_section_in_the_manual_page(self):
        self.assertGreater(len(self.paths), 30)
        for path in self.paths:
            with self.subTest(command=" ".join(path)):
                self.assertIn(f'.SS "tarmac {" ".join(path)}"\n', self.page)
        self.assertNotIn("(no description)", self.page)
        groff = shutil.which("groff")
        if groff:
            r = subprocess.run([groff, "-man", "-ww", "-z"], input=self.page, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual((r.returncode, r.stderr), (0, ""))

    def test_bash_completes_every_subcommand_and_the_options_of_the_one_typed(self):
        script = run(str(BUILD / "tarmac"), "completion", "bash").stdout

        def complete(line):
            words = line.split(" ")
            r = subprocess.run(["bash", "-c", 'eval "$SCRIPT"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _tarmac; '
                                              'printf "%s\\n" "${COMPREPLY[@]}"', "_", *words],
                               env={"SCRIPT": script, "PATH": os.environ["PATH"]}, capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout.split()

        for path in self.paths:
            with self.subTest(command=" ".join(path)):
                self.assertIn(path[-1], complete(" ".join(("tarmac", *path[:-1], path[-1][:2]))))
        self.assertEqual(complete("tarmac pick --mi"), ["--min-free", "--mig"])
        # A global option's value is not taken for a command.
        self.assertIn("--min-free", complete("tarmac --config status pick --m"))

    def test_zsh_and_fish_read_their_scripts(self):
        for shell, check in (("zsh", ["zsh", "-n"]), ("fish", ["fish", "--no-execute"])):
            with self.subTest(shell=shell):
                text = run(str(BUILD / "tarmac"), "completion", shell).stdout
                self.assertIn("status", text)
                if shutil.which(check[0]) is None:
                    continue  # not installed here: the text was made, its syntax is not checked
                r = subprocess.run(check, input=text, capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 0, r.stderr)

    def test_an_unknown_shell_is_a_usage_error(self):
        r = run(str(BUILD / "tarmac"), "completion", "tcsh")
        self.assertEqual(r.returncode, 2)
        self.assertIn("bash, zsh or fish", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
