"""The Debian package (cmake/package.cmake) installed, removed and purged for real, as root: what
`dpkg -i` puts where, that nothing is enabled or started, that an edited tarmac.toml survives
`dpkg -r` as a conffile, and that `dpkg -P` leaves nothing behind but the agent's store.

It changes the machine it runs on (/usr/bin/tarmac while it runs), so it runs only as root, only
where no tarmac package is installed already, and not under the sanitizers (a package of an ASan
binary is not one anybody installs); CI's fresh machine is all three."""
import gzip
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import unittest

from test_packaging import REAP_UNITS, UNIT, cmake_command
from test_status import BUILD

# Where the package's files go, and where anything it left behind would be.
WATCHED = ["/usr/bin", "/usr/lib/systemd/system", "/lib/systemd/system", "/usr/lib/tmpfiles.d", "/etc/tarmac",
           "/etc/systemd/system", "/usr/share/man/man1", "/usr/share/bash-completion/completions",
           "/usr/share/zsh/vendor-completions", "/usr/share/fish/vendor_completions.d", "/usr/share/tarmac",
           "/usr/share/doc/tarmac"]


def run(*args, check=False, **kw):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=300, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def tarmac_files():
    """Every path under WATCHED whose name says tarmac (the package's, or anything it left)."""
    out = set()
    for top in WATCHED:
        root = pathlib.Path(top)
        if not root.exists():
            continue
        if "tarmac" in str(root):
            out.add(str(root))
        for p in root.rglob("*"):
            if "tarmac" in str(p):
                out.add(str(p))
    return out


def installed():
    r = run("dpkg-query", "-W", "-f=${Status}", "tarmac")
    return r.returncode == 0 and "installed" in r.stdout and "not-installed" not in r.stdout


class DebianPackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("dpkg -i needs root (CI runs as root)")
        if os.environ.get("TARMAC_COMPAT_PRELOAD"):
            raise unittest.SkipTest("not for the sanitizer build")
        for tool in ("dpkg", "dpkg-deb", "dpkg-shlibdeps"):
            if shutil.which(tool) is None:
                raise unittest.SkipTest(f"{tool} is missing (Debian: dpkg, dpkg-dev)")
        if installed():
            raise unittest.SkipTest("a tarmac package is installed on this machine: not replaced by a test")
        # Nor a tarmac installed by other means (cmake --install --prefix /usr): dpkg would overwrite it.
        for path in ("/usr/bin/tarmac", "/etc/tarmac", "/usr/lib/systemd/system/tarmac-agent.service",
                     "/lib/systemd/system/tarmac-agent.service"):
            if os.path.lexists(path):
                raise unittest.SkipTest(f"{path} exists: a tarmac installed here is not replaced by a test")
        cls.dir = tempfile.TemporaryDirectory(prefix="tarmac-deb-")
        cpack = pathlib.Path(cmake_command()).with_name("cpack")
        r = run(str(cpack), "--config", str(BUILD / "CPackConfig.cmake"), "-G", "DEB", "-B", cls.dir.name)
        if r.returncode != 0:
            cls.dir.cleanup()
            raise AssertionError(f"cpack: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
        debs = list(pathlib.Path(cls.dir.name).glob("tarmac_*.deb"))
        if len(debs) != 1:
            cls.dir.cleanup()
            raise AssertionError(f"cpack made {debs}")
        cls.deb = debs[0]

    @classmethod
    def tearDownClass(cls):
        if installed():
            run("dpkg", "-P", "tarmac")
        cls.dir.cleanup()

    def test_install_remove_purge(self):
        info = run("dpkg-deb", "-f", str(self.deb), "Package", "Version", "Depends", "Recommends", check=True).stdout
        self.assertIn("Package: tarmac", info)
        self.assertRegex(info, r"Depends: .*libc6 \(>= 2\.\d+\)")
        # What the features load at run time: OpenSSL required (an HTTPS agent will not start without
        # it), libcurl recommended.
        self.assertRegex(info, r"Depends: .*libssl3 \| libssl3t64")
        self.assertIn("Recommends: libcurl4 | libcurl4t64", info)
        before = tarmac_files()
        store = pathlib.Path("/var/lib/tarmac")
        had_store = store.exists()
        marker = store / f"test-deb-marker-{os.getpid()}"
        try:
            run("dpkg", "-i", str(self.deb), check=True)
            self.assertTrue(installed())
            # The binary, as built.
            r = run("/usr/bin/tarmac", "--version", check=True)
            self.assertEqual(r.stdout, run(str(BUILD / "tarmac"), "--version", check=True).stdout)
            # tarmac.toml is a conffile, and is the defaults.
            conffiles = run("dpkg-query", "-W", "-f=${Conffiles}", "tarmac", check=True).stdout
            self.assertIn("/etc/tarmac/tarmac.toml", conffiles)
            toml = pathlib.Path("/etc/tarmac/tarmac.toml")
            self.assertEqual(toml.read_text(), run(str(BUILD / "tarmac"), "config", "--defaults", check=True).stdout)
            # The units, verified, naming the installed binary; none enabled or started.
            listed = run("dpkg", "-L", "tarmac", check=True).stdout.split("\n")
            units = [p for p in listed if re.search(r"/systemd/system/tarmac-[a-z]+\.(service|timer)$", p)]
            self.assertEqual(sorted(pathlib.Path(u).name for u in units), sorted([UNIT, *REAP_UNITS]))
            agent = pathlib.Path(next(u for u in units if u.endswith(UNIT)))
            self.assertIn("ExecStart=/usr/bin/tarmac agent", agent.read_text())
            analyze = shutil.which("systemd-analyze")
            if analyze:
                r = run(analyze, "verify", "--man=no", *units)
                about = [line for line in (r.stdout + r.stderr).splitlines() if "tarmac-" in line]
                self.assertEqual(about, [], r.stdout + r.stderr)
            self.assertEqual([p for p in pathlib.Path("/etc/systemd/system").rglob("tarmac*")], [],
                             "the package enables nothing")
            # The manual page and completions.
            with gzip.open("/usr/share/man/man1/tarmac.1.gz", "rt") as f:
                self.assertIn('.SS "tarmac status"', f.read())
            for path in ("/usr/share/bash-completion/completions/tarmac", "/usr/share/zsh/vendor-completions/_tarmac",
                         "/usr/share/fish/vendor_completions.d/tarmac.fish",
                         "/usr/share/tarmac/grafana/tarmac.json", "/usr/share/tarmac/prometheus/tarmac-rules.yml"):
                self.assertTrue(pathlib.Path(path).is_file(), path)

            # Removal keeps an edited conffile, and the store.
            toml.write_text(toml.read_text() + "# edited by the administrator\n")
            store.mkdir(parents=True, exist_ok=True)
            marker.write_text("the store\n")
            run("dpkg", "-r", "tarmac", check=True)
            self.assertFalse(pathlib.Path("/usr/bin/tarmac").exists())
            self.assertTrue(toml.read_text().endswith("# edited by the administrator\n"))
            # Purge: nothing left but the store.
            run("dpkg", "-P", "tarmac", check=True)
            self.assertFalse(installed())
            self.assertEqual(tarmac_files() - before, set())
            self.assertTrue(marker.exists(), "the store is kept")
        finally:
            if installed():
                run("dpkg", "-P", "tarmac")
            marker.unlink(missing_ok=True)
            if not had_store:
                shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
