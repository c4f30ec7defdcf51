"""Shared set-up of the compat tests: unmodified third-party NVML clients run against the simulator.

Where things are (CTest sets these; the defaults fit a `cmake --preset dev` tree):
  TARMAC_SOURCE_DIR    the repository (default: two folders above this file)
  TARMAC_SIM_LAUNCHER  the simulator's launcher (default: <source>/build/sim/tarmac-sim)
  TARMAC_PEERS         the unpacked Debian packages (default: ~/.cache/tarmac-peers); fetched with
                       scripts/peers.sh when missing
  TARMAC_COMPAT_PRELOAD  a sanitizer runtime to preload into the clients (asan builds only)

The expected values are those of issue 2 for the bundled scenario `a100x4-balanced`; only the
identities the issue leaves open (UUIDs, PCI bus ids) are read from the scenario file.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
import tomllib

# What a missing tool means (a skip here, a failure in CI) is said in one place, for every test.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "integration"))
from devtools import require_tool  # noqa: E402,F401 - re-exported for the compat tests

SCENARIO = "a100x4-balanced"
MIB = 1024 * 1024

SOURCE_DIR = pathlib.Path(os.environ.get("TARMAC_SOURCE_DIR")
                          or pathlib.Path(__file__).resolve().parents[2])
SCENARIO_FILE = SOURCE_DIR / "sim" / "scenarios" / f"{SCENARIO}.toml"


@dataclasses.dataclass(frozen=True)
class Gpu:
    """One simulated GPU as a client must show it."""
    index: int
    name: str
    uuid: str
    mem_total_mib: int
    mem_used_mib: int
    util_pct: int
    temp_c: int
    power_w: int
    proc_mem_mib: int   # the one `python` process on this GPU
    pci_bus_id: str | None = None


def expected_gpus() -> list[Gpu]:
    """Issue 2's `a100x4-balanced`, with the UUIDs (and PCI bus ids) of the scenario file."""
    used = [38900, 38850, 39010, 38790]
    util = [96, 94, 95, 93]
    temp = [68, 67, 69, 66]
    power = [250, 248, 251, 247]
    proc = [38500, 38600, 38400, 38700]
    ids = scenario_identities()
    if len(ids) != 4:
        raise AssertionError(f"{SCENARIO_FILE}: expected 4 GPUs with a uuid, found {len(ids)}")
    return [Gpu(i, "NVIDIA A100-SXM4-40GB", ids[i][0], 40960, used[i], util[i], temp[i], power[i],
                proc[i], ids[i][1]) for i in range(4)]


def scenario_identities() -> list[tuple[str, str | None]]:
    """(uuid, pci bus id) of each `[[gpu]]` table of the scenario file (docs/simulator.md), in
    NVML index order, which is PCI bus order (PRODUCT.md §3)."""
    if not SCENARIO_FILE.exists():
        raise AssertionError(f"scenario file missing: {SCENARIO_FILE}")
    with SCENARIO_FILE.open("rb") as f:
        data = tomllib.load(f)
    gpus = [(str(g["uuid"]), g.get("pci_bus_id")) for g in data.get("gpu", [])]
    return sorted(gpus, key=lambda g: (g[1] or "").lower())


def peers_dir() -> pathlib.Path:
    """The unpacked third-party packages; runs scripts/peers.sh first when they are missing."""
    default = pathlib.Path(os.environ.get("HOME", "/root")) / ".cache" / "tarmac-peers"
    p = pathlib.Path(os.environ.get("TARMAC_PEERS") or default)
    needed = [p / "x" / "nvidia-smi", p / "x" / "nvtop", p / "x" / "python3-pynvml",
              p / "x" / "gpustat", p / "x" / "python3-psutil", p / "x" / "python3-six"]
    if not (p / ".complete").exists() or not all(n.exists() for n in needed):
        out = subprocess.run(["bash", str(SOURCE_DIR / "scripts" / "peers.sh")], check=True,
                             stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                             env=dict(os.environ, TARMAC_PEERS=str(p)), timeout=600).stdout
        p = pathlib.Path(out.strip().splitlines()[-1])
    return p


def python_path(peers: pathlib.Path) -> str:
    """PYTHONPATH for pynvml, gpustat and their dependencies as unpacked from Debian."""
    pkgs = ["python3-pynvml", "gpustat", "python3-psutil", "python3-blessed", "python3-wcwidth",
            "python3-six"]
    return os.pathsep.join(str(peers / "x" / k / "usr/lib/python3/dist-packages") for k in pkgs)


def launcher() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("TARMAC_SIM_LAUNCHER")
                        or SOURCE_DIR / "build" / "sim" / "tarmac-sim")
    if not path.exists():
        raise AssertionError(f"simulator launcher missing: {path} (build the tarmac-sim target)")
    return path


def sim_command(cmd: list[str], scenario: str = SCENARIO) -> list[str]:
    """`cmd` run by the simulator's launcher on `scenario`."""
    return [str(launcher()), "run", "--scenario", scenario, "--", *cmd]


def client_env(**extra: str) -> dict[str, str]:
    """The environment for a client: no stray GPU selection or NVML override, the sanitizer
    runtime preloaded when the simulator library is instrumented."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TARMAC_NVML_LIB",
                        "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME")}
    preload = os.environ.get("TARMAC_COMPAT_PRELOAD")
    if preload:
        env["LD_PRELOAD"] = preload
        # Third-party programs (CPython above all) are not ours to leak-check.
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0"
    env.setdefault("LANG", "C.UTF-8")
    env.update(extra)
    return env


def run_under_sim(cmd: list[str], timeout: float = 120, scenario: str = SCENARIO,
                  **env: str) -> subprocess.CompletedProcess:
    """Runs `cmd` under the simulator and returns its result (stdout and stderr as text)."""
    return subprocess.run(sim_command(cmd, scenario), env=client_env(**env), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


def describe(result: subprocess.CompletedProcess) -> str:
    """The command, exit status and output, for assertion messages."""
    return (f"\n$ {' '.join(map(str, result.args))}\nexit status {result.returncode}\n"
            f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}")
