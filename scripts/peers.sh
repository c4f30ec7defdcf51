#!/usr/bin/env bash
# Fetches the third-party NVML clients used by tests/abi and tests/compat (nvidia-smi 535, nvtop
# 3.0.1, pynvml + gpustat 1.1.1, NVIDIA's nvml.h) from Debian's contrib/non-free sections through a
# private apt configuration, and unpacks them with dpkg -x into a cache folder. Nothing is installed
# on the system: the real driver library must never shadow the simulator.
# Idempotent: a completed cache (marker file) is left as it is. Prints the cache folder.
set -euo pipefail
P=${TARMAC_PEERS:-$HOME/.cache/tarmac-peers}
if [[ -f $P/.complete ]]; then echo "$P"; exit 0; fi
mkdir -p "$P/debs" "$P/apt/b/lists/partial" "$P/apt/t/lists/partial"
echo 'deb http://deb.debian.org/debian bookworm main contrib non-free' >"$P/apt/b/sources.list"
echo 'deb http://deb.debian.org/debian trixie main contrib non-free' >"$P/apt/t/sources.list"
opt() { echo "-o Dir::Etc::SourceList=$P/apt/$1/sources.list -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists=$P/apt/$1/lists -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Architecture=amd64"; }
# shellcheck disable=SC2046
apt-get $(opt b) -qq update >&2
# shellcheck disable=SC2046
apt-get $(opt t) -qq update >&2
cd "$P/debs"
# shellcheck disable=SC2046
apt-get $(opt b) -qq download nvtop=3.0.1-1 nvidia-smi=535.261.03-1 libnvidia-ml-dev \
  python3-psutil python3-blessed python3-wcwidth >&2
# shellcheck disable=SC2046
apt-get $(opt t) -qq download gpustat=1.1.1-2 python3-pynvml=12.550.89-3 >&2
for d in *.deb; do
  n=${d%%_*}
  rm -rf "../x/$n"; mkdir -p "../x/$n"; dpkg -x "$d" "../x/$n"
done
touch "$P/.complete"
echo "$P"
