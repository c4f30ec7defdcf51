"""scripts/peers.sh against a fake apt-get: it takes the archive from this machine's apt sources
(deb822 first, then sources.list; TARMAC_DEBIAN_MIRROR overrides), falls back to Debian's when that
archive lacks a suite, and a second run downloads nothing, not even the package lists."""
import os
import pathlib
import shutil
import subprocess
import tempfile
import textwrap
import unittest

SOURCE_DIR = pathlib.Path(os.environ.get("TARMAC_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
PEERS = SOURCE_DIR / "scripts" / "peers.sh"
DEBIAN = "http://deb.debian.org/debian"

# Logs every call; `update` fails for a mirror named in FAKE_APT_NO_TRIXIE when the suite is trixie;
# `download PKG[=VER]` builds a tiny PKG_VER_all.deb in the current folder, as apt-get does.
FAKE_APT_GET = r"""#!/bin/bash
set -eu
printf '%s\n' "$*" >>"$FAKE_APT_LOG"
list=
for a in "$@"; do [[ $a == Dir::Etc::SourceList=* ]] && list=${a#*=}; done
case " $* " in
  *" update "*)
    line=$(cat "$list")
    echo "update $line" >>"$FAKE_APT_LOG"
    if [[ -n ${FAKE_APT_NO_TRIXIE:-} && $line == *"$FAKE_APT_NO_TRIXIE trixie"* ]]; then
      echo "E: The repository '$FAKE_APT_NO_TRIXIE trixie Release' does not have a Release file." >&2
      exit 100
    fi
    exit 0;;
  *" download "*)
    spec=${@: -1}; pkg=${spec%%=*}; ver=1.0-1
    [[ $spec == *=* ]] && ver=${spec#*=}
    tree=$(mktemp -d)
    mkdir -p "$tree/DEBIAN" "$tree/usr/share/$pkg"
    printf 'Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: t <t@t>\nDescription: t\n' \
      "$pkg" "$ver" >"$tree/DEBIAN/control"
    echo "$pkg $ver" >"$tree/usr/share/$pkg/marker"
    dpkg-deb -Zgzip --build "$tree" "${pkg}_${ver}_all.deb" >/dev/null
    rm -rf "$tree"
    exit 0;;
esac
exit 0
"""


class Peers(unittest.TestCase):
    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tarmac-peers-test-"))
        bin_dir = self.dir / "bin"
        bin_dir.mkdir()
        fake = bin_dir / "apt-get"
        fake.write_text(FAKE_APT_GET)
        fake.chmod(0o755)
        self.etc = self.dir / "etc"
        (self.etc / "sources.list.d").mkdir(parents=True)
        (self.dir / "apt.conf").write_text(f'Dir::Etc::sourcelist "{self.etc}/sources.list";\n'
                                           f'Dir::Etc::sourceparts "{self.etc}/sources.list.d";\n')
        self.log = self.dir / "apt.log"
        self.cache = self.dir / "cache"
        self.env = {k: v for k, v in os.environ.items() if k != "TARMAC_DEBIAN_MIRROR"}
        self.env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", APT_CONFIG=str(self.dir / "apt.conf"),
                        FAKE_APT_LOG=str(self.log), TARMAC_PEERS=str(self.cache))

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def peers(self, *args, **env):
        r = subprocess.run(["bash", str(PEERS), *args], capture_output=True, text=True, timeout=120,
                           env={**self.env, **env}, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def apt_calls(self):
        calls = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.unlink(missing_ok=True)
        return calls

    def test_mirror_from_deb822_sources(self):
        (self.etc / "sources.list.d" / "debian.sources").write_text(textwrap.dedent("""\
            Types: deb
            URIs: http://mirror.example/debian-security
            Suites: bookworm-security
            Components: main

            Types: deb
            Enabled: no
            URIs: http://disabled.example/debian
            Suites: bookworm

            Types: deb-src deb
            # a comment inside the stanza
            URIs: http://mirror.example/debian
             http://second.example/debian
            Suites: bookworm bookworm-updates
            Components: main
            """))
        (self.etc / "sources.list").write_text("deb http://older.example/debian bookworm main\n")
        self.assertEqual(self.peers("--mirrors").stdout.split(), ["http://mirror.example/debian", DEBIAN])

    def test_mirror_from_sources_list(self):
        (self.etc / "sources.list").write_text(textwrap.dedent("""\
            # deb http://commented.example/debian bookworm main
            deb http://security.debian.org/debian-security bookworm-security main
            deb-src http://src.example/debian bookworm main
            deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://proxy.example:3142/debian bookworm main
            """))
        self.assertEqual(self.peers("--mirrors").stdout.split(), ["http://proxy.example:3142/debian", DEBIAN])

    def test_no_sources_and_the_override(self):
        self.assertEqual(self.peers("--mirrors").stdout.split(), [DEBIAN])
        self.assertEqual(self.peers("--mirrors", TARMAC_DEBIAN_MIRROR="http://local.example/d").stdout.split(),
                         ["http://local.example/d"])

    def test_second_run_downloads_nothing(self):
        (self.etc / "sources.list").write_text("deb http://local.example/debian bookworm main\n")
        r = self.peers()
        self.assertEqual(r.stdout.strip(), str(self.cache))
        calls = self.apt_calls()
        updates = [c for c in calls if c.startswith("update ")]
        self.assertEqual(len(updates), 2, calls)
        self.assertTrue(all("http://local.example/debian" in u for u in updates), updates)
        self.assertEqual(sum(" download " in f" {c} " for c in calls), 10, calls)  # the WANT list of scripts/peers.sh
        self.assertEqual((self.cache / "x" / "nvtop" / "usr" / "share" / "nvtop" / "marker").read_text(),
                         "nvtop 3.0.1-1\n")
        marker = self.cache / "x" / "nvidia-smi" / "usr" / "share" / "nvidia-smi" / "marker"
        unpacked_at = marker.stat().st_mtime_ns

        # Complete: nothing runs. Interrupted after the downloads (no .complete): still no apt-get
        # at all, not even an update of the package lists, and nothing is unpacked again.
        self.peers()
        (self.cache / ".complete").unlink()
        r = self.peers()
        self.assertEqual(self.apt_calls(), [])
        self.assertIn("nothing downloaded", r.stderr)
        self.assertEqual(marker.stat().st_mtime_ns, unpacked_at)

        # A lost .deb is fetched again, alone, after one update of its suite's lists.
        (self.cache / ".complete").unlink()
        next((self.cache / "debs").glob("gpustat_*.deb")).unlink()
        self.peers()
        calls = self.apt_calls()
        self.assertEqual([c.split()[-1] for c in calls if " download " in f" {c} "], ["gpustat=1.1.1-2"], calls)
        self.assertEqual(len([c for c in calls if c.startswith("update ")]), 1, calls)

    def test_suite_missing_from_the_local_mirror_comes_from_debian(self):
        (self.etc / "sources.list").write_text("deb http://local.example/debian bookworm main\n")
        self.peers(FAKE_APT_NO_TRIXIE="http://local.example/debian")
        updates = [c for c in self.apt_calls() if c.startswith("update ")]
        self.assertEqual(len(updates), 3, updates)
        self.assertIn("http://local.example/debian bookworm", updates[0])
        self.assertIn(f"{DEBIAN} trixie", updates[2])
        self.assertTrue((self.cache / "x" / "gpustat" / "usr" / "share" / "gpustat" / "marker").exists())


if __name__ == "__main__":
    unittest.main()
