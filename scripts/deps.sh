#!/usr/bin/env bash
# Installs the Debian packages tarmac needs to build and test. Idempotent: installs only what is
# missing, so a second run costs a dpkg query. `--test` adds what the test suite needs, `--kubelet`
# only gRPC and protobuf for the kubelet client (the container image's build, docs/kubernetes.md).
set -euo pipefail
build=(cmake ninja-build g++ ccache pkg-config libfmt-dev libcli11-dev nlohmann-json3-dev
       libtomlplusplus-dev libsqlite3-dev libncurses-dev libcurl4-openssl-dev libssl-dev libyaml-dev
       libcrypt-dev)
kubelet=(libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc)
test=(libgtest-dev libgmock-dev libbenchmark-dev tmux python3 procps util-linux chromium prometheus wrk openssl dpkg-dev groff-base
      slurmd slurmctld slurm-client munge python3-yaml
      "${kubelet[@]}")
want=("${build[@]}")
[[ ${1:-} == --test ]] && want+=("${test[@]}")
[[ ${1:-} == --kubelet ]] && want+=("${kubelet[@]}")
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
# systemd-analyze verifies the packaged unit (tests/integration/test_packaging.py skips without it).
# Best effort: a container may refuse systemd's install scripts, and nothing else depends on it.
if [[ ${1:-} == --test ]] && ! command -v systemd-analyze >/dev/null; then
  SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends systemd >&2 ||
    echo "deps: could not install systemd; the unit file's verification will be skipped" >&2
fi
