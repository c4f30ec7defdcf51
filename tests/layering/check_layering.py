#!/usr/bin/env python3
"""The layering check (docs/ARCHITECTURE.md, "Dependencies flow one way"): reads every #include of
src/ (and sim/) and fails naming each include that goes against the dependency rule.

    check_layering.py [ROOT]          check the tree at ROOT (default: this repository)
    python3 -m unittest check_layering  the script's own tests (a forbidden include is caught)

The rule, from docs/ARCHITECTURE.md:

    apps -> cli -> {config, fields, serve, alerts, reap, sched} -> report -> {agent, diagnose}
         -> store -> gpu -> {host, nvml} -> util,   and   cli -> kube -> {host, util}

narrowed by its paragraph: config knows the option structs of agent, alerts, sched, store, diagnose
and gpu, backfill's servers, and checks URLs with net's check_url; sched sits over agent (its log sink, until it includes util/log.hpp), store and gpu and
knows neither alerts nor serve; alerts sits over store, gpu and net (the HTTP client, which sits
over util alone); reap sits over store, gpu and host
alone (the CLI hands it the scheduler's leases); serve over report, store and gpu and
knows neither the agent nor alerts; nothing below cli knows config; nothing outside gpu/ includes
nvml/ (nor gpu/nvml_*, which translate NVML into the model); the simulator (sim/) sees only util/
and nvml/, and the product never includes the simulator.
"""
import os
import pathlib
import re
import sys
import unittest

# What each folder of src/tarmac (and src/apps, sim) may include besides itself: the one table of
# allowed edges. Change it together with docs/ARCHITECTURE.md.
BELOW_STORE = {"gpu", "host", "util"}
ALLOWED = {
    "util": set(),
    "nvml": {"util"},
    "net": {"util"},
    "host": {"util"},
    "kube": {"host", "util"},
    "fleet": {"report", "gpu", "net", "util"},
    "gpu": {"host", "nvml", "util"},
    "store": BELOW_STORE,
    "agent": {"store"} | BELOW_STORE,
    "diagnose": {"store"} | BELOW_STORE,
    "report": {"agent", "diagnose", "store"} | BELOW_STORE,
    "fields": {"report", "agent", "diagnose", "store"} | BELOW_STORE,
    "alerts": {"net", "report", "diagnose", "store"} | BELOW_STORE,
    "reap": {"store"} | BELOW_STORE,
    "sched": {"report", "diagnose", "store"} | BELOW_STORE,
    "serve": {"report", "diagnose", "store"} | BELOW_STORE,
    "backfill": {"sched", "net", "report", "diagnose", "store"} | BELOW_STORE,
    "slurm": {"sched", "report", "diagnose", "store"} | BELOW_STORE,
    "config": {"agent", "alerts", "sched", "backfill", "net", "store", "diagnose", "reap"} | BELOW_STORE,
    "tui": {"net", "diagnose"} | BELOW_STORE,
    "cli": {"config", "fields", "serve", "alerts", "reap", "sched", "slurm", "kube", "fleet", "backfill", "report", "agent", "diagnose", "store", "net",
            "tui"}
    | BELOW_STORE,
    "apps": {"cli"},
    "sim": {"util", "nvml"},
}

# Within gpu/, only these files may include nvml/ (they translate NVML into the model).
NVML_TRANSLATORS = re.compile(r"^nvml_")

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SOURCES = (".cpp", ".hpp", ".h", ".cc", ".in", ".def")


def folder_of(rel):
    """The layer of a file, by its path relative to the repository root, or None."""
    parts = pathlib.PurePosixPath(rel).parts
    if len(parts) >= 3 and parts[:2] == ("src", "tarmac"):
        return parts[2]
    if len(parts) >= 2 and parts[:2] == ("src", "apps"):
        return "apps"
    if parts and parts[0] == "sim":
        return "sim"
    return None


def target_of(include):
    """The layer an include names ("tarmac/gpu/model.hpp" -> "gpu"), "sim" for the simulator's
    headers, or None for a system or third-party header."""
    parts = include.split("/")
    if len(parts) >= 3 and parts[0] == "tarmac":
        return parts[1]
    if parts[0] in ("core", "lib", "launcher", "load") and len(parts) >= 2:
        return "sim"
    return None


def violations(files):
    """(path, line, include, why) for each forbidden include; FILES maps a path relative to the
    root to its text."""
    out = []
    for rel, text in sorted(files.items()):
        src = folder_of(rel)
        if src is None:
            continue
        name = pathlib.PurePosixPath(rel).name
        for m in INCLUDE.finditer(text):
            include = m.group(1)
            dst = target_of(include)
            if dst is None or dst == src:
                continue
            if src == "sim" and dst == "sim":
                continue
            line = text.count("\n", 0, m.start()) + 1
            if src not in ALLOWED:
                out.append((rel, line, include, f"{src}/ is not in the layering table (tests/layering)"))
            elif dst not in ALLOWED and dst != "sim":
                out.append((rel, line, include, f"{dst}/ is not in the layering table (tests/layering)"))
            elif dst == "nvml" and src != "sim" and not (src == "gpu" and NVML_TRANSLATORS.match(name)):
                out.append((rel, line, include, "only gpu/nvml_* may include nvml/: nothing above gpu sees NVML"))
            elif dst not in ALLOWED[src]:
                out.append((rel, line, include, f"{src}/ may not include {dst}/ (docs/ARCHITECTURE.md)"))
            elif src != "gpu" and include.startswith("tarmac/gpu/nvml_"):
                out.append((rel, line, include, "gpu/nvml_* are NVML's side of gpu/: nothing outside gpu includes them"))
    return out


def read_tree(root):
    files = {}
    for top in ("src", "sim"):
        for dirpath, _, names in os.walk(root / top):
            for n in names:
                if n.endswith(SOURCES):
                    p = pathlib.Path(dirpath) / n
                    files[p.relative_to(root).as_posix()] = p.read_text(errors="replace")
    return files


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    files = read_tree(root)
    found = violations(files)
    for rel, line, include, why in found:
        print(f"{rel}:{line}: #include \"{include}\": {why}")
    print(f"layering: {len(files)} files, {len(found)} forbidden include{'s' if len(found) != 1 else ''}")
    return 1 if found else 0


class SelfTest(unittest.TestCase):
    def check(self, rel, include):
        return violations({rel: f'#include <vector>\n#include "{include}"\n'})

    def test_an_include_of_a_folder_above_is_caught(self):
        found = self.check("src/tarmac/store/recorder.cpp", "tarmac/agent/agent.hpp")
        self.assertEqual(found, [("src/tarmac/store/recorder.cpp", 2, "tarmac/agent/agent.hpp",
                                  "store/ may not include agent/ (docs/ARCHITECTURE.md)")])
        self.assertTrue(self.check("src/tarmac/util/fs.cpp", "tarmac/gpu/model.hpp"))
        self.assertTrue(self.check("src/tarmac/gpu/activity.cpp", "tarmac/config/config.hpp"))

    def test_what_the_paragraph_forbids_below_is_caught(self):
        self.assertTrue(self.check("src/tarmac/serve/api.cpp", "tarmac/agent/agent.hpp"))
        self.assertTrue(self.check("src/tarmac/serve/api.cpp", "tarmac/alerts/rules.hpp"))
        self.assertTrue(self.check("src/tarmac/sched/daemon.cpp", "tarmac/alerts/alerter.hpp"))
        self.assertTrue(self.check("src/tarmac/alerts/alerter.cpp", "tarmac/agent/agent.hpp"))
        self.assertTrue(self.check("src/tarmac/sched/daemon.hpp", "tarmac/agent/agent.hpp"))
        self.assertTrue(self.check("src/tarmac/sched/daemon.cpp", "tarmac/config/config.hpp"))
        self.assertTrue(self.check("src/tarmac/reap/gather.cpp", "tarmac/sched/leases.hpp"))
        self.assertTrue(self.check("src/tarmac/reap/kill.cpp", "tarmac/report/report.hpp"))
        self.assertTrue(self.check("src/tarmac/store/reader.cpp", "tarmac/reap/history.hpp"))

    def test_nvml_is_gpus_alone(self):
        found = self.check("src/tarmac/cli/query.cpp", "tarmac/nvml/nvml_types.hpp")
        self.assertEqual(len(found), 1)
        self.assertIn("only gpu/nvml_*", found[0][3])
        self.assertTrue(self.check("src/tarmac/gpu/activity.cpp", "tarmac/nvml/library.hpp"))
        self.assertFalse(self.check("src/tarmac/gpu/nvml_backend.cpp", "tarmac/nvml/library.hpp"))
        self.assertTrue(self.check("src/tarmac/cli/status.cpp", "tarmac/gpu/nvml_device.hpp"))

    def test_the_simulator_and_the_product_stay_apart(self):
        self.assertTrue(self.check("sim/lib/device.cpp", "tarmac/gpu/model.hpp"))
        self.assertFalse(self.check("sim/lib/device.cpp", "tarmac/nvml/nvml_types.hpp"))
        self.assertTrue(self.check("src/tarmac/cli/sim_command.cpp", "core/scenario.hpp"))

    def test_allowed_includes_pass(self):
        for rel, include in [("src/tarmac/cli/status.cpp", "tarmac/gpu/model.hpp"),
                             ("src/tarmac/config/config.cpp", "tarmac/alerts/rules.hpp"),
                             ("src/tarmac/config/config.cpp", "tarmac/reap/rules.hpp"),
                             ("src/tarmac/reap/gather.cpp", "tarmac/store/reader.hpp"),
                             ("src/tarmac/cli/reap_command.cpp", "tarmac/reap/kill.hpp"),
                             ("src/tarmac/sched/daemon.hpp", "tarmac/util/log.hpp"),
                             ("src/tarmac/sched/jobdb.cpp", "tarmac/store/sqlite.hpp"),
                             ("src/tarmac/serve/api.cpp", "tarmac/report/report.hpp"),
                             ("src/apps/main.cpp", "tarmac/cli/app.hpp"),
                             ("src/tarmac/store/recorder.cpp", "tarmac/store/schema.hpp")]:
            with self.subTest(rel=rel):
                self.assertEqual(self.check(rel, include), [])

    def test_a_folder_missing_from_the_table_is_reported(self):
        found = self.check("src/tarmac/tray/view.cpp", "tarmac/util/fs.hpp")
        self.assertEqual(len(found), 1)
        self.assertIn("tray/ is not in the layering table", found[0][3])

    def test_the_tree_today_passes(self):
        root = pathlib.Path(__file__).resolve().parents[2]
        self.assertEqual(violations(read_tree(root)), [])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
