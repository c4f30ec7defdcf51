"""End-to-end tests of `tarmac query`: the real binary against NVIDIA's nvidia-smi 535, both under
the same simulator.

The golden comparison: for every field nvidia-smi answers through the simulator (FIELDS below),
`tarmac query --query-gpu=F --format=...` must print exactly what nvidia-smi prints, byte for
byte, with the same exit status; the same for its error messages. The comparisons of one scenario
run one after another under one simulation (`under_one_sim`): starting the simulator and its
scenario processes once per scenario instead of twice per field. Fields nvidia-smi cannot answer
there (it reads them through its internal export table, which the simulator only stubs) are
compared with golden files in golden/ instead; TARMAC_REGEN_GOLDEN=1 rewrites them.

nvidia-smi comes from the peers cache (scripts/peers.sh, TARMAC_PEERS). Without it the comparisons
are skipped on a workstation and fail in CI (CI=true).
"""
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from devtools import require_tool

BUILD = pathlib.Path(os.environ.get("TARMAC_BUILD_DIR", "build")).resolve()
TARMAC = str(BUILD / "tarmac")
LAUNCHER = BUILD / "sim" / "tarmac-sim"
PEERS = pathlib.Path(os.environ.get("TARMAC_PEERS")
                     or pathlib.Path(os.environ.get("HOME", "/root")) / ".cache" / "tarmac-peers")
NVIDIA_SMI = PEERS / "x" / "nvidia-smi" / "usr" / "lib" / "nvidia" / "current" / "nvidia-smi"


def nvidia_smi_cmd():
    """nvidia-smi's command line. Under a sanitizer build the simulator library is instrumented
    and nvidia-smi is not, so the sanitizer runtime has to be preloaded into it."""
    preload = os.environ.get("TARMAC_COMPAT_PRELOAD")
    if preload:
        return ["env", f"LD_PRELOAD={preload}", "ASAN_OPTIONS=detect_leaks=0:abort_on_error=0", str(NVIDIA_SMI)]
    return [str(NVIDIA_SMI)]

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
REGEN = os.environ.get("TARMAC_REGEN_GOLDEN") == "1"

SCENARIOS = ["a100x4-balanced", "mixed-topology-8gpu"]
# Every bundled scenario, for the all-fields-at-once comparison.
ALL_SCENARIOS = SCENARIOS + ["a100x4-dataloader-stall", "a100x4-gpu0-only", "a100x4-near-oom", "a100x4-thermal",
                             "h100x2-log", "h100x8-idle-fleet", "holding-zombie", "h200x8-mig-mixed",
                             "a100x4-mig-idle-slices"]
FORMATS = ["csv", "csv,noheader", "csv,nounits", "csv,noheader,nounits"]

# Every field (canonical name or alias) compared byte for byte with nvidia-smi. `timestamp` is
# left out: it is checked by its format only.
FIELDS = [
    "driver_version", "count", "name", "gpu_name", "serial", "gpu_serial", "uuid", "gpu_uuid",
    "pci.bus_id", "gpu_bus_id", "pci.domain", "pci.bus", "pci.device", "pci.device_id",
    "pci.sub_device_id", "pcie.link.gen.current", "pcie.link.gen.gpucurrent", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max", "index", "display_mode", "display_active",
    "persistence_mode", "driver_model.current", "driver_model.pending", "vbios_version", "fan.speed", "pstate",
    "clocks_event_reasons.supported", "clocks_throttle_reasons.supported",
    "clocks_event_reasons.active", "clocks_throttle_reasons.active",
    "clocks_event_reasons.gpu_idle", "clocks_throttle_reasons.gpu_idle",
    "clocks_event_reasons.applications_clocks_setting",
    "clocks_throttle_reasons.applications_clocks_setting",
    "clocks_event_reasons.sw_power_cap", "clocks_throttle_reasons.sw_power_cap",
    "clocks_event_reasons.hw_slowdown", "clocks_throttle_reasons.hw_slowdown",
    "clocks_event_reasons.hw_thermal_slowdown", "clocks_throttle_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown",
    "clocks_throttle_reasons.hw_power_brake_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown", "clocks_throttle_reasons.sw_thermal_slowdown",
    "clocks_event_reasons.sync_boost", "clocks_throttle_reasons.sync_boost",
    "memory.total", "memory.reserved", "memory.used", "memory.free", "compute_mode", "compute_cap",
    "utilization.gpu", "utilization.memory", "utilization.encoder", "utilization.decoder",
    "ecc.mode.current", "ecc.mode.pending",
    "ecc.errors.corrected.volatile.total", "ecc.errors.corrected.aggregate.total",
    "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.single_bit_ecc.count", "retired_pages.sbe",
    "retired_pages.double_bit.count", "retired_pages.dbe", "retired_pages.pending",
    "temperature.gpu", "power.draw", "power.limit", "power.default_limit",
    "power.min_limit", "power.max_limit",
    "clocks.current.graphics", "clocks.gr", "clocks.current.sm", "clocks.sm",
    "clocks.current.memory", "clocks.mem", "clocks.current.video", "clocks.video",
    "clocks.applications.graphics", "clocks.applications.gr",
    "clocks.applications.memory", "clocks.applications.mem",
    "clocks.max.graphics", "clocks.max.gr", "clocks.max.sm", "clocks.max.memory", "clocks.max.mem",
    "mig.mode.current", "mig.mode.pending",
]

# Fields nvidia-smi cannot answer under the simulator (it prints "[Uninitialized]" for them there):
# compared with golden/<scenario>.<format>.txt.
GOLDEN_FIELDS = ["enforced.power.limit"]

TIMESTAMP = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}$")


def env():
    e = {k: v for k, v in os.environ.items()
         if k not in ("CUDA_VISIBLE_DEVICES", "TARMAC_NVML_LIB", "LD_LIBRARY_PATH", "NO_COLOR")}
    e.setdefault("LANG", "C.UTF-8")
    return e


def under_sim(scenario, *cmd, faults=(), timeout=60):
    """Runs CMD under the simulator's launcher on SCENARIO; returns the CompletedProcess."""
    args = [str(LAUNCHER), "run", "--scenario", scenario]
    for f in faults:
        args += ["--fault", f]
    args += ["--", *cmd]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env(),
                          stdin=subprocess.DEVNULL)


# Runs the commands of a JSON file one after another, inside one simulation, and writes their exit
# statuses and outputs to a second JSON file.
_BATCH = r"""
import json, subprocess, sys
results = []
for argv in json.load(open(sys.argv[1])):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
        results.append([r.returncode, r.stdout, r.stderr])
    except subprocess.TimeoutExpired as e:
        results.append([None, e.stdout or "", f"timed out after 60 s: {e.stderr or ''}"])
json.dump(results, open(sys.argv[2], "w"))
"""


def under_one_sim(scenario, commands):
    """Runs each command (an argv list) in turn under one simulation of SCENARIO, as under_sim runs
    one: the same environment, one launcher and one set of scenario processes for all of them.
    Returns a CompletedProcess per command, in order."""
    with tempfile.TemporaryDirectory(prefix="tarmac-query-") as d:
        todo, done = pathlib.Path(d) / "commands.json", pathlib.Path(d) / "results.json"
        todo.write_text(json.dumps([[str(a) for a in argv] for argv in commands]))
        r = under_sim(scenario, sys.executable, "-c", _BATCH, str(todo), str(done), timeout=60 + 20 * len(commands))
        if r.returncode != 0 or not done.exists():
            raise AssertionError(f"the batch of {len(commands)} commands under {scenario} failed:{describe(r)}")
        return [subprocess.CompletedProcess(argv, rc, out, err)
                for argv, (rc, out, err) in zip(commands, json.loads(done.read_text()))]


def describe(r):
    return (f"\n$ {' '.join(map(str, r.args))}\nexit status {r.returncode}\n"
            f"--- stdout ---\n{r.stdout}--- stderr ---\n{r.stderr}")


def need_simulator(test):
    if not LAUNCHER.exists():
        test.fail(f"simulator launcher missing: {LAUNCHER} (build the tarmac-sim target)")


def need_nvidia_smi(test):
    need_simulator(test)
    require_tool("nvidia-smi", path=str(NVIDIA_SMI), hint="not in the peers cache; scripts/peers.sh fetches it")


class GoldenAgainstNvidiaSmi(unittest.TestCase):
    """tarmac query and nvidia-smi, same arguments, same simulator: the same bytes."""

    def setUp(self):
        need_nvidia_smi(self)

    def assert_results_same(self, theirs, ours, hint=False):
        expected = theirs.stdout
        if hint:  # tarmac points at its own help where nvidia-smi points at its own
            expected = expected.replace("'nvidia-smi -h'", "'tarmac query --help'")
        self.assertEqual((ours.returncode, ours.stdout), (theirs.returncode, expected),
                         f"\n--- nvidia-smi ---{describe(theirs)}\n--- tarmac ---{describe(ours)}")

    def assert_same(self, scenario, *args, hint=False):
        theirs, ours = under_one_sim(scenario, [[*nvidia_smi_cmd(), *args], [TARMAC, "query", *args]])
        self.assert_results_same(theirs, ours, hint)
        return theirs

    def assert_all_same(self, scenario, cases, hint=False):
        """Each case is (subtest labels, query arguments); all of them under one simulation."""
        commands = []
        for _, args in cases:
            commands += [[*nvidia_smi_cmd(), *args], [TARMAC, "query", *args]]
        results = under_one_sim(scenario, commands)
        for i, (labels, _) in enumerate(cases):
            with self.subTest(**labels):
                self.assert_results_same(results[2 * i], results[2 * i + 1], hint)

    def test_every_field_alone_in_every_format(self):
        # Every format on the first scenario, plain csv on the others (all at once covers the rest).
        # The sanitizer run (several times slower per process) looks for memory errors, not text:
        # plain csv on the first scenario is enough there; the dev run covers the whole matrix.
        sanitizer = bool(os.environ.get("TARMAC_COMPAT_PRELOAD"))
        for scenario in SCENARIOS[:1] if sanitizer else SCENARIOS:
            formats = FORMATS[:1] if sanitizer else (FORMATS if scenario == SCENARIOS[0] else FORMATS[:1])
            self.assert_all_same(scenario, [(dict(scenario=scenario, format=fmt, field=field),
                                             [f"--query-gpu={field}", f"--format={fmt}"])
                                            for fmt in formats for field in FIELDS])

    def test_all_fields_at_once(self):
        for scenario in ALL_SCENARIOS:
            self.assert_all_same(scenario, [(dict(scenario=scenario, format=fmt),
                                             ["--query-gpu=" + ",".join(FIELDS), f"--format={fmt}"])
                                            for fmt in FORMATS])

    def test_nvidia_smis_spellings_of_the_options(self):
        self.assert_all_same("a100x4-balanced", [
            (dict(args=1), ["--query-gpu", "index,name", "--format", "csv,noheader"]),
            (dict(args=2), ["--query-gpu=index,uuid", "--format=csv", "-i", "0,2"]),
            (dict(args=3), ["--query-gpu=index", "--format=csv", "--id=1"])])

    def test_gpus_named_by_uuid_and_serial(self):
        r = under_sim("a100x4-balanced", TARMAC, "query", "--query-gpu=uuid,serial", "--format=csv,noheader")
        self.assertEqual(r.returncode, 0, describe(r))
        uuid, serial = r.stdout.splitlines()[2].split(", ")
        self.assert_all_same("a100x4-balanced", [(dict(ids=ids), ["--query-gpu=index", "--format=csv", "-i", ids])
                                                 for ids in [uuid, serial, uuid.lower(), f"3,{uuid}"]])

    def test_driver_failures_say_what_nvidia_smi_says(self):
        # NVML's init fails: nvidia-smi's message on stdout, and its exit code (9, 4, 18, 255).
        base = (pathlib.Path(__file__).resolve().parents[2] / "sim" / "scenarios" / "no-driver-container.toml").read_text()
        with tempfile.TemporaryDirectory() as d:
            for rc in ["DRIVER_NOT_LOADED", "NO_PERMISSION", "LIB_RM_VERSION_MISMATCH", "UNKNOWN"]:
                path = pathlib.Path(d) / f"init-{rc}.toml"
                path.write_text(base.replace('init_error = "DRIVER_NOT_LOADED"', f'init_error = "{rc}"'))
                with self.subTest(init_error=rc):
                    theirs = self.assert_same(str(path), "--query-gpu=index,name", "--format=csv")
                    self.assertNotEqual(theirs.returncode, 0)

    def test_missing_library_says_what_nvidia_smi_says(self):
        e = env()
        e.pop("LD_LIBRARY_PATH", None)
        theirs = subprocess.run([*nvidia_smi_cmd(), "--query-gpu=index", "--format=csv"], capture_output=True,
                                text=True, timeout=30, env=e)
        ours = subprocess.run([TARMAC, "--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "query", "--query-gpu=index",
                               "--format=csv"], capture_output=True, text=True, timeout=30, env=e)
        self.assertEqual(theirs.returncode, 12, describe(theirs))
        self.assertEqual((ours.returncode, ours.stdout), (theirs.returncode, theirs.stdout), describe(ours))

    def test_unknown_fields(self):
        self.assert_all_same("a100x4-balanced", [
            (dict(fields=fields), [f"--query-gpu={fields}", "--format=csv"])
            for fields in ["foo", "index,foo,bar", "index,", "", "index,,name", "Name", "INDEX", "index, name",
                           "clocks", "clocks.current", "pcie.link"]])

    def test_section_names_fail_after_the_header(self):
        self.assert_all_same("a100x4-balanced", [
            (dict(fields=fields, format=fmt), [f"--query-gpu={fields}", f"--format={fmt}"])
            for fields in ["memory", "index,memory", "memory.used,clocks_event_reasons,name", "utilization",
                           "clocks.max", "ecc.errors", "retired_pages", "mig.mode", "encoder.stats"]
            for fmt in ["csv", "csv,noheader"]])

    def test_bad_formats(self):
        self.assert_all_same("a100x4-balanced", [
            (dict(format=fmt), ["--query-gpu=index", f"--format={fmt}"])
            for fmt in ["xml", "csv,foo", "noheader", "CSV", "", "csv,,noheader"]])
        self.assert_all_same("a100x4-balanced", [(dict(format=None), ["--query-gpu=index"])], hint=True)

    def test_bad_options(self):
        self.assert_all_same("a100x4-balanced", [
            (dict(args=args), ["--query-gpu=index", "--format=csv", *args])
            for args in [["--bogus"], ["-l", "0"], ["-lms", "0"], ["--loop=0"], ["-i"], ["-f"]]], hint=True)

    def test_file_output(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            theirs_path, ours_path = os.path.join(d, "smi.csv"), os.path.join(d, "tarmac.csv")
            args = ["--query-gpu=index,name,memory.used", "--format=csv"]
            theirs = under_sim("a100x4-balanced", *nvidia_smi_cmd(), *args, "-f", theirs_path)
            ours = under_sim("a100x4-balanced", TARMAC, "query", *args, "-f", ours_path)
            self.assertEqual((ours.returncode, ours.stdout), (theirs.returncode, theirs.stdout), describe(ours))
            self.assertEqual(pathlib.Path(ours_path).read_text(), pathlib.Path(theirs_path).read_text())

    def test_ids(self):
        self.assert_all_same("a100x4-balanced", [
            (dict(ids=ids), ["--query-gpu=index", "--format=csv", "-i", ids])
            for ids in ["9", "GPU-00000000-0000-0000-0000-000000000000", "0,9", "9,0", "zz", "0,zz", "2,0", "1,1",
                        " 1", "01", "+1", "1.0", "-1", ",", "", ",,", " ", "0,,1", "a,,"]])


class Golden(unittest.TestCase):
    """Fields nvidia-smi cannot answer under the simulator, against files written by hand review."""

    def setUp(self):
        need_simulator(self)
        if not GOLDEN_FIELDS:
            self.skipTest("no field needs a golden file: nvidia-smi answers every field tarmac has")

    def test_golden_files(self):
        for scenario in SCENARIOS:
            results = under_one_sim(scenario, [[TARMAC, "query", "--query-gpu=" + ",".join(GOLDEN_FIELDS),
                                                f"--format={fmt}"] for fmt in FORMATS])
            for fmt, r in zip(FORMATS, results):
                path = GOLDEN / f"{scenario}.{fmt.replace(',', '-')}.txt"
                self.assertEqual(r.returncode, 0, describe(r))
                if REGEN:
                    path.write_text(r.stdout)
                with self.subTest(scenario=scenario, format=fmt):
                    self.assertEqual(r.stdout, path.read_text(), describe(r))


class QueryOnItsOwn(unittest.TestCase):
    """What needs no oracle: timestamps, typed forms, loops, help, bad input."""

    def setUp(self):
        need_simulator(self)

    def query(self, *args, scenario="a100x4-balanced", faults=()):
        return under_sim(scenario, TARMAC, "query", *args, faults=faults)

    def test_timestamp_format(self):
        r = self.query("--query-gpu=timestamp,index", "--format=csv")
        self.assertEqual(r.returncode, 0, describe(r))
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "timestamp, index")
        self.assertEqual(len(lines), 5)
        for line in lines[1:]:
            stamp, _ = line.split(", ")
            self.assertRegex(stamp, TIMESTAMP)

    def test_json_and_ndjson_are_typed(self):
        r = self.query("--query-gpu=index,name,memory.used,power.draw,persistence_mode,fan.speed", "--format=json")
        self.assertEqual(r.returncode, 0, describe(r))
        gpus = json.loads(r.stdout)
        self.assertEqual(len(gpus), 4)
        self.assertEqual(gpus[0]["index"], 0)
        self.assertEqual(gpus[0]["name"], "NVIDIA A100-SXM4-40GB")
        self.assertEqual(gpus[0]["memory.used"], 38900)
        self.assertIsInstance(gpus[0]["power.draw"], float)
        self.assertIsInstance(gpus[0]["persistence_mode"], bool)
        r = self.query("--query-gpu=gpu_name,utilization.gpu", "--format=ndjson", "-i", "1,3")
        self.assertEqual(r.returncode, 0, describe(r))
        rows = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual([row["utilization.gpu"] for row in rows], [94, 93])
        self.assertEqual(set(rows[0]), {"name", "utilization.gpu"})

    def test_gpus_named_by_pci_bus_id(self):
        # Not compared with nvidia-smi: under the simulator it answers every bus id with "Invalid
        # PCI bus id format" (exit 255), a gap of the simulator's nvmlDeviceGetHandleByPciBusId.
        for ids in ["00000000:47:00.0", "0000:47:00.0", "47:00.0", "00000000:47:00.0,0"]:
            with self.subTest(ids=ids):
                r = self.query("--query-gpu=index", "--format=csv,noheader", "-i", ids)
                self.assertEqual(r.returncode, 0, describe(r))
                self.assertEqual(r.stdout, "0\n2\n" if ids.endswith(",0") else "2\n")

    def test_lost_gpu_shows_the_marker(self):
        # nvidia-smi gives up on the whole query when one GPU is lost ("Unable to determine the
        # device handle for GPU2: GPU is lost. ...", exit 15); tarmac prints the other GPUs and
        # nvidia-smi's marker in place of every value the lost one cannot give.
        r = self.query("--query-gpu=index,memory.used,driver_version", "--format=csv,noheader", faults=["gpu=2,lost"])
        self.assertEqual(r.returncode, 0, describe(r))
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 4, describe(r))
        self.assertTrue(lines[2].startswith("2, [GPU is lost], "), describe(r))
        self.assertRegex(lines[0], r"^0, \d+ MiB, ")

    def test_one_query_kind_at_a_time(self):
        # --query-gpu and --query-compute-apps together, or neither: a usage error, nothing printed.
        for args in [["--query-gpu=index", "--query-compute-apps=pid"], []]:
            with self.subTest(args=args):
                r = self.query(*args, "--format=csv")
                self.assertEqual((r.returncode, r.stdout), (2, ""), describe(r))
                self.assertIn("--query-compute-apps", r.stderr)

    def test_help_lists_both_field_tables(self):
        r = subprocess.run([TARMAC, "query", "--help"], capture_output=True, text=True, env=env(), timeout=30)
        self.assertEqual(r.returncode, 0, describe(r))
        gpu_part, apps_part = r.stdout.split("Fields of --query-compute-apps:")
        self.assertIn("memory.used [MiB]", gpu_part)
        self.assertIn("used_gpu_memory or used_memory [MiB]", apps_part)
        self.assertIn("process_name or name", apps_part)

    def test_loop_prints_the_header_once_and_stops_on_sigint(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(signal=sig):
                p = subprocess.Popen([str(LAUNCHER), "run", "--scenario", "a100x4-balanced", "--", TARMAC, "query",
                                      "--query-gpu=index,utilization.gpu", "--format=csv", "-lms", "100"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                                     start_new_session=True)
                # Wait for the header and eight rows (start-up under the sanitizers on a loaded
                # machine can take longer than the loop takes to print them), then interrupt.
                first = []
                deadline = time.monotonic() + 60
                while len(first) < 9 and time.monotonic() < deadline:
                    line = p.stdout.readline()
                    if not line:
                        break
                    first.append(line)
                os.killpg(p.pid, sig)  # as a terminal's Ctrl-C reaches the whole foreground group
                rest, err = p.communicate(timeout=10)
                out = "".join(first) + rest
                self.assertIn(p.returncode, (0, -sig, 128 + sig), err)
                lines = out.splitlines()
                self.assertEqual(lines.count("index, utilization.gpu [%]"), 1, out)
                rows = lines[1:]
                self.assertGreaterEqual(len(rows), 8, out)
                self.assertTrue(all(re.match(r"^[0-3], \d+ %$", row) for row in rows), out)

    def test_file_output(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "q.csv")
            r = self.query("--query-gpu=index", "--format=csv,noheader", "-f", path)
            self.assertEqual(r.returncode, 0, describe(r))
            self.assertEqual(r.stdout, "")
            self.assertEqual(pathlib.Path(path).read_text(), "0\n1\n2\n3\n")

    def test_help_lists_every_field(self):
        r = subprocess.run([TARMAC, "query", "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, describe(r))
        for field in FIELDS + ["timestamp"]:
            self.assertRegex(r.stdout, rf"(^|\s){re.escape(field)}(\s|$)", field)

    def test_unknown_field_needs_no_gpu(self):
        r = subprocess.run([TARMAC, "--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "query", "--query-gpu=foo",
                            "--format=csv"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, describe(r))
        self.assertTrue(r.stdout.startswith('Field "foo" is not a valid field to query.\n'), describe(r))

    def test_random_field_lists_and_formats_never_crash(self):
        names = FIELDS + ["timestamp"]
        junk = ["", "foo", ",", "index,", " index", "näme", "x" * 300, "%s%n", "memory", "clocks.", "\\", "-i"]
        modifiers = ["csv", "noheader", "nounits", "json", "ndjson", "", "xml", "CSV", "csv ", "%n"]
        rng = random.Random(1234)
        cases = []
        for _ in range(40):
            picked = [rng.choice(names if rng.random() < 0.8 else junk) for _ in range(rng.randint(1, 8))]
            fmt = ",".join(rng.choice(modifiers) for _ in range(rng.randint(1, 4)))
            cases.append([f"--query-gpu={','.join(picked)}", f"--format={fmt}"])
        results = under_one_sim("a100x4-balanced", [[TARMAC, "query", *args] for args in cases])
        for args, r in zip(cases, results):
            with self.subTest(args=args):
                self.assertIn(r.returncode, (0, 2), describe(r))


if __name__ == "__main__":
    unittest.main()
