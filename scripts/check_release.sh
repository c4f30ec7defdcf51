#!/usr/bin/env bash
# scripts/check_release.sh BINARY: the release binary needs glibc alone (PRODUCT.md §2: copied to any
# GPU node). Checks that its dynamic section names no library but libc, libm and the dynamic
# loader (every other one is linked from its static archive: TARMAC_STATIC_LIBS; libcurl and NVML
# are loaded at run time), prints the newest glibc symbol version it requires, that it is no newer
# than TARMAC_MAX_GLIBC (default 2.36: Debian 12's, where CI builds it), and that it runs and names
# its commit. With SIM_BUILD (a dev tree, for its simulator), also that its agent serves HTTPS with
# passwords and client certificates (tests/integration/test_web_config.py): OpenSSL is loaded at
# run time (src/tarmac/serve/openssl.hpp), which only a run of the shipped binary shows works (the
# dev build has libssl linked in through gRPC). scripts/test.sh runs it on the release preset's build.
set -euo pipefail
binary=${1:?usage: check_release.sh BINARY [SIM_BUILD]}
sim_build=${2:-}
max=${TARMAC_MAX_GLIBC:-2.36}
fail=0
needed=$(readelf -d "$binary" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p' | sort)
echo "NEEDED: $(paste -sd' ' <<<"$needed")"
extra=$(grep -vxE 'libc\.so\.6|libm\.so\.6|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1' <<<"$needed" || true)
if [[ -n $extra ]]; then
  echo "check_release: needs more than glibc: $(paste -sd' ' <<<"$extra")" >&2
  fail=1
fi
newest=$(objdump -T "$binary" | grep -oE 'GLIBC_[0-9]+\.[0-9]+' | sed 's/GLIBC_//' | sort -V | tail -1)
echo "newest glibc symbol version: $newest (allowed: $max)"
objdump -T "$binary" | grep -E "GLIBC_$newest\b" | awk '{print "  " $NF}' | sort -u
if [[ $(printf '%s\n%s\n' "$newest" "$max" | sort -V | tail -1) != "$max" ]]; then
  echo "check_release: requires glibc $newest, newer than $max" >&2
  fail=1
fi
version=$("$binary" --version)
echo "$version"
[[ $version =~ ^tarmac\ [0-9]+\.[0-9]+\.[0-9]+\ \(git\ [0-9A-Za-z.+_-]+\)$ ]] ||
  { echo "check_release: --version names no commit: $version" >&2; fail=1; }
if [[ -n $sim_build ]]; then
  # The integration tests take a build tree: one whose tarmac is this binary, with the dev tree's
  # simulator.
  tree=$(mktemp -d)
  trap 'rm -rf "$tree"' EXIT
  ln -s "$(realpath "$binary")" "$tree/tarmac"
  ln -s "$(realpath "$sim_build")/sim" "$tree/sim"
  # CI=true: a tool the tests need (openssl, Prometheus) that is missing fails them, not skips them.
  if out=$(cd "$(dirname "$0")/../tests/integration" && CI=true TARMAC_BUILD_DIR=$tree \
      TARMAC_SIM_LAUNCHER=$tree/sim/tarmac-sim python3 -m unittest test_web_config 2>&1); then
    tail -3 <<<"$out"
    echo "the agent serves HTTPS with the OpenSSL it loads"
  else
    tail -40 <<<"$out"
    echo "check_release: the agent's HTTPS tests failed with this binary" >&2
    fail=1
  fi
fi
exit "$fail"
