#!/usr/bin/env bash
# Fetches the third-party NVML clients used by tests/abi and tests/compat (nvidia-smi 535, nvtop
# 3.0.1, pynvml + gpustat 1.1.1 with their Python dependencies, NVIDIA's nvml.h, and Slurm's
# gpu/nvml plugin for tests/integration/test_slurm_real.py) from Debian's
# contrib/non-free sections through a private apt configuration, and unpacks them with dpkg -x
# into a cache folder (${TARMAC_PEERS:-~/.cache/tarmac-peers}/x/<package>/). Nothing is installed
# on the system: the real driver library must never shadow the simulator.
#
# The archive is the one this machine's apt already uses (its first deb822 .sources stanza of a
# release suite, else its first sources.list line of one), so a local mirror works, and so does a
# proxy set in apt's configuration (the private configuration keeps the system's apt.conf);
# TARMAC_DEBIAN_MIRROR overrides it; http://deb.debian.org/debian is the last resort.
#
# Idempotent and cached: every .deb fetched is kept (debs/, with a manifest of which request it
# answers), so a second run downloads nothing and does not even refresh the package lists; a
# changed package list fetches only what is new, and unpacks only what changed. A cache completed
# for the same list is left as it is (a second run costs a file comparison). Concurrent runs wait
# for each other. Needs apt-get and dpkg (any Debian 12 machine). Works as root or as a user.
# Prints the cache folder on stdout; progress goes to stderr. `peers.sh --mirrors` only prints the
# archives it would try, one a line.
set -euo pipefail

P=${TARMAC_PEERS:-$HOME/.cache/tarmac-peers}

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
  bookworm:slurm-wlm-nvml-plugin
  trixie:gpustat=1.1.1-2
  trixie:python3-pynvml=12.550.89-3
)
# `peers.sh --llama-server`: llama.cpp's llama-server (a real OpenAI-compatible LLM server that runs
# on CPU, for the backfill tests) instead, in its own cache folder ($P/llama-server). Debian has it
# only in sid, built against a newer glibc than bookworm's: sid's own loader, libc and libraries
# come with it, unpacked beside it (../shared/notes/llama-server.md, route 1), and
# $P/llama-server/bin/llama-server runs it through them. Nothing is installed.
llama=
if [[ ${1:-} == --llama-server ]]; then
  llama=1
  P=$P/llama-server
  WANT=(sid:llama.cpp-tools sid:libllama0 sid:libggml0 sid:libc6 sid:libstdc++6 sid:libgcc-s1 sid:libgomp1
        sid:libssl3t64 sid:libzstd1 sid:zlib1g)
fi
# `peers.sh --ollama-js`: Ollama's official JavaScript client (npm "ollama", pinned), which checks
# the fake Ollama server of the backfill tests (tests/integration/test_fake_ollama.py), into its
# own cache folder ($P/ollama-js) with npm --prefix: nothing global, nothing in the repository.
if [[ ${1:-} == --ollama-js ]]; then
  OLLAMA_JS_VERSION=0.6.3
  dir=$P/ollama-js
  if [[ -f $dir/node_modules/ollama/package.json ]] &&
    grep -q "\"version\": \"$OLLAMA_JS_VERSION\"" "$dir/node_modules/ollama/package.json"; then
    echo "$dir"
    exit 0
  fi
  command -v npm >/dev/null || { echo "peers: npm is needed for the ollama JavaScript client (apt install npm)" >&2; exit 1; }
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --no-save --package-lock=false "ollama@$OLLAMA_JS_VERSION" >&2
  echo "$dir"
  exit 0
fi
spec=$(printf '%s\n' "${WANT[@]}")

# system_mirror: the Debian archive of this machine's apt sources, or nothing. A release suite
# (bookworm, stable, ...) marks the main archive; -security and -updates stanzas are skipped.
system_mirror() {
  local SL=/etc/apt/sources.list SP=/etc/apt/sources.list.d/ f
  eval "$(apt-config shell SL Dir::Etc::sourcelist/f SP Dir::Etc::sourceparts/d 2>/dev/null)"
  for f in "$SP"*.sources; do
    [[ -r $f ]] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
         {
           types = uris = suites = ""; enabled = "yes"; key = ""
           for (i = 1; i <= NF; i++) {
             line = $i
             if (line ~ /^#/) continue
             if (line ~ /^[ \t]/) val = line      # a continuation line
             else {
               p = index(line, ":"); if (!p) continue
               key = tolower(substr(line, 1, p - 1)); val = substr(line, p + 1)
             }
             if (key == "types") types = types " " val
             else if (key == "uris") uris = uris " " val
             else if (key == "suites") suites = suites " " val
             else if (key == "enabled") { enabled = tolower(val); gsub(/[ \t]/, "", enabled) }
           }
           if (enabled == "no" || (types " ") !~ /[ \t]deb[ \t]/) next
           n = split(suites, s, /[ \t]+/)
           for (j = 1; j <= n; j++)
             if (s[j] ~ /^[a-z]+$/) { split(uris, u, /[ \t]+/); print (u[1] != "" ? u[1] : u[2]); exit }
         }' "$f"
  done
  for f in "$SL" "$SP"*.list; do
    [[ -r $f ]] || continue
    awk '$1 == "deb" {
           sub(/^[ \t]*deb[ \t]+(\[[^]]*\][ \t]+)?/, "")
           split($0, w, /[ \t]+/)
           if (w[2] ~ /^[a-z]+$/) { print w[1]; exit }
         }' "$f"
  done
}

# Mirrors to try, in order: TARMAC_DEBIAN_MIRROR alone when set; else the system's, then Debian's.
if [[ -n ${TARMAC_DEBIAN_MIRROR:-} ]]; then
  mirrors=("$TARMAC_DEBIAN_MIRROR")
else
  mirrors=()
  m=$(system_mirror | head -1)
  [[ -n $m ]] && mirrors+=("$m")
  [[ $m == http://deb.debian.org/debian ]] || mirrors+=(http://deb.debian.org/debian)
fi
if [[ ${1:-} == --mirrors ]]; then
  printf '%s\n' "${mirrors[@]}"
  exit 0
fi

# llama_wrapper: bin/llama-server, which runs sid's llama-server through sid's loader with only the
# unpacked libraries; refuses (exit 1) when any library would come from the system instead.
llama_wrapper() {
  local lib=$P/x/libc6/usr/lib/x86_64-linux-gnu path="" d
  for d in "$P"/x/*/usr/lib/x86_64-linux-gnu "$P"/x/*/usr/lib/x86_64-linux-gnu/llama; do
    [[ -d $d ]] && path+=${path:+:}$d
  done
  # ggml looks for its CPU backends next to the executable, which under an explicit loader is the
  # loader's own folder: the variants are linked there, and ggml picks the best one for this CPU.
  for d in "$P"/x/libggml0/usr/lib/x86_64-linux-gnu/ggml/*/libggml-cpu-*.so \
           "$P"/x/libggml0/usr/lib/x86_64-linux-gnu/libggml-cpu-*.so; do
    [[ -f $d ]] && ln -sfn "$d" "$lib/${d##*/}"
  done
  mkdir -p "$P/bin"
  cat >"$P/bin/llama-server" <<WRAP
#!/bin/sh
# Written by scripts/peers.sh --llama-server: sid's llama-server through sid's own loader.
exec "$lib/ld-linux-x86-64.so.2" --library-path "$path" "$P/x/llama.cpp-tools/usr/bin/llama-server" "\$@"
WRAP
  chmod 755 "$P/bin/llama-server"
  local listed outside
  listed=$("$lib/ld-linux-x86-64.so.2" --library-path "$path" --list "$P/x/llama.cpp-tools/usr/bin/llama-server") || {
    echo "peers: sid's loader cannot list llama-server's libraries" >&2; return 1; }
  outside=$(awk '/=>/ && $3 !~ "^'"$P"'/" {print $1}' <<<"$listed")
  if [[ -n $outside ]]; then
    echo "peers: llama-server would load these from outside $P (sid renamed a package?): $outside" >&2
    return 1
  fi
}

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
# update SUITE: fresh package lists for SUITE from the first mirror that has it.
update() {
  local suite=$1 m
  mkdir -p "$P/apt/$suite/lists/partial"
  for m in "${mirrors[@]}"; do
    echo "deb ${signed}$m $suite main contrib non-free" >"$P/apt/$suite/sources.list"
    echo "peers: apt-get update ($suite from $m, private lists under $P/apt)" >&2
    apt_in "$suite" update >&2 && return 0
    echo "peers: $m has no usable $suite main/contrib/non-free" >&2
  done
  echo "peers: no mirror has $suite (set TARMAC_DEBIAN_MIRROR to a Debian mirror)" >&2
  return 1
}

# The manifest maps each request (suite:package[=version]) to the .deb that answered it.
mkdir -p "$P/debs" "$P/x"
manifest=$P/debs/manifest
touch "$manifest"
declare -A have=()
while IFS=$'\t' read -r item deb; do
  [[ -n $item && -f $P/debs/$deb ]] && have[$item]=$deb
done <"$manifest"

declare -A updated=()
for item in "${WANT[@]}"; do
  [[ -n ${have[$item]:-} ]] && continue
  suite=${item%%:*}; pkg=${item#*:}
  if [[ -z ${updated[$suite]:-} ]]; then
    update "$suite"
    updated[$suite]=1
  fi
  rm -rf "$P/debs/.new"; mkdir -p "$P/debs/.new"
  if ! (cd "$P/debs/.new" && apt_in "$suite" download "$pkg" >&2); then
    [[ $pkg == *=* ]] || { echo "peers: cannot download $pkg from $suite" >&2; exit 1; }
    echo "peers: WARNING: $pkg is no longer in $suite; taking its current version" >&2
    (cd "$P/debs/.new" && apt_in "$suite" download "${pkg%%=*}" >&2)
  fi
  new=("$P"/debs/.new/*.deb)
  [[ ${#new[@]} == 1 && -f ${new[0]} ]] || { echo "peers: apt-get download $pkg left no single .deb" >&2; exit 1; }
  mv -f "${new[0]}" "$P/debs/"
  have[$item]=${new[0]##*/}
done
rm -rf "$P/debs/.new"
((${#updated[@]})) || echo "peers: every package is in the cache ($P/debs); nothing downloaded" >&2

# The manifest, then the unpacked trees: x/<package>/ is redone only when its .deb changed
# (x/.<package> names the .deb it holds). Debs no request names any more are removed.
: >"$manifest.tmp"
declare -A keep=()
for item in "${WANT[@]}"; do
  deb=${have[$item]}
  printf '%s\t%s\n' "$item" "$deb" >>"$manifest.tmp"
  keep[$deb]=1
  n=${deb%%_*}
  if [[ ! -d $P/x/$n || $(cat "$P/x/.$n" 2>/dev/null) != "$deb" ]]; then
    echo "peers: unpacking $deb" >&2
    rm -rf "$P/x/$n" "$P/x/.$n"; mkdir -p "$P/x/$n"
    dpkg -x "$P/debs/$deb" "$P/x/$n"
    echo "$deb" >"$P/x/.$n"
  fi
done
mv -f "$manifest.tmp" "$manifest"
for d in "$P"/debs/*.deb; do
  [[ -f $d && -z ${keep[${d##*/}]:-} ]] && rm -f "$d"
done
[[ -z $llama ]] || llama_wrapper
printf '%s\n' "$spec" >"$P/.complete"
echo "$P"
