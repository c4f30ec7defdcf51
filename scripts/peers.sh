#!/usr/bin/env bash
# Fetches the third-party NVML clients used by tests/abi and tests/compat (nvidia-smi 535, nvtop
# 3.0.1, pynvml + gpustat 1.1.1 with their Python dependencies, NVIDIA's nvml.h) from Debian's
# contrib/non-free sections through a private apt configuration, and unpacks them with dpkg -x
# into a cache folder (${TARMAC_PEERS:-~/.cache/tarmac-peers}/x/<package>/). Nothing is installed
# on the system: the real driver library must never shadow the simulator.
#
# Idempotent: a cache completed for the same package list is left as it is (a second run costs a
# file comparison); a changed list or an interrupted run fetches again. Concurrent runs wait for
# each other. Needs apt-get and dpkg (any Debian 12 machine) and http access to a Debian mirror
# (TARMAC_DEBIAN_MIRROR, default http://deb.debian.org/debian). Works as root or as a user.
# Prints the cache folder on stdout; progress goes to stderr.
set -euo pipefail

P=${TARMAC_PEERS:-$HOME/.cache/tarmac-peers}
MIRROR=${TARMAC_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# suite:package[=version]. A pinned version is what the compat tests were written against; when a
# point release replaces it, the suite's current version is taken with a warning.
WANT=(
  bookworm:nvtop=3.0.1-1
  bookworm:nvidia-smi=535.261.03-1
  bookworm:libnvidia-ml-dev
  bookworm:python3-psutil
  bookworm:python3-blessed
  bookworm:python3-wcwidth
  bookworm:python3-six
  trixie:gpustat=1.1.1-2
  trixie:python3-pynvml=12.550.89-3
)
spec=$(printf '%s\n' "$MIRROR" "${WANT[@]}")

mkdir -p "$P"
exec 9>"$P/.lock"
flock 9
if [[ -f $P/.complete && $(cat "$P/.complete") == "$spec" ]]; then
  echo "$P"
  exit 0
fi
rm -f "$P/.complete"

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
signed=; [[ -r $keyring ]] && signed="[signed-by=$keyring] "
# apt_in SUITE ARGS...: apt-get with the private configuration of one suite.
apt_in() {
  local suite=$1
  shift
  apt-get -o "Dir::Etc::SourceList=$P/apt/$suite/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
          -o "Dir::State::Lists=$P/apt/$suite/lists" -o Dir::Cache::pkgcache= \
          -o Dir::Cache::srcpkgcache= -o APT::Architecture=amd64 -o Acquire::Retries=3 \
          -o APT::Sandbox::User=root -qq "$@"
}
for suite in bookworm trixie; do
  mkdir -p "$P/apt/$suite/lists/partial"
  echo "deb ${signed}$MIRROR $suite main contrib non-free" >"$P/apt/$suite/sources.list"
  echo "peers: apt-get update ($suite, private lists under $P/apt)" >&2
  apt_in "$suite" update >&2
done

rm -rf "$P/debs"; mkdir -p "$P/debs"
cd "$P/debs"
for item in "${WANT[@]}"; do
  suite=${item%%:*}; pkg=${item#*:}
  if ! apt_in "$suite" download "$pkg" >&2; then
    [[ $pkg == *=* ]] || { echo "peers: cannot download $pkg from $suite" >&2; exit 1; }
    echo "peers: WARNING: $pkg is no longer in $suite; taking its current version" >&2
    apt_in "$suite" download "${pkg%%=*}" >&2
  fi
done

for d in *.deb; do
  n=${d%%_*}
  echo "peers: unpacking $d" >&2
  rm -rf "../x/$n"; mkdir -p "../x/$n"; dpkg -x "$d" "../x/$n"
done
printf '%s\n' "$spec" >"$P/.complete"
echo "$P"
