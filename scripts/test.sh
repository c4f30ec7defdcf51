#!/usr/bin/env bash
# The README's test command: installs what is missing, builds and runs every test, twice:
#   1. dev preset  (build/):      configure, build, ctest (all tests)
#   2. asan preset (build-asan/): AddressSanitizer + UBSan build (while dev's tests run), ctest
#   3. release preset (build-release/): the shipped binary (while asan's tests run), checked by
#      scripts/check_release.sh (glibc alone), counted as one test
# then prints a summary: each step's duration, ccache's hits per build, the slowest tests of each
# preset. Exits non-zero when any step fails; every step runs even after a failure, so one run
# shows everything that is broken. The last line has CTest's form
# ("N% tests passed, F tests failed out of T") summed over both runs; a configure or build step
# that fails counts there as one failed test.
#
# Both builds are configured for speed (docs/ci.md has the measurements): no benchmarks (no test
# runs them), unity builds (CMAKE_UNITY_BUILD: each target's sources compiled in batches, so the
# heavy headers are parsed and their templates generated once per batch rather than once per
# file), and line tables instead of full debug information (TARMAC_DEBUG_LINES: sanitizer stack
# traces keep file:line). The build trees keep these settings for later `cmake --build` runs;
# configure again without them for a debugger's build.
#
# Compilations go through ccache (scripts/deps.sh installs it; cmake/ccache.cmake), its cache in
# ~/.cache/ccache, so that the next run on the same machine, from any clone, compiles little.
#
# Environment: TARMAC_PEERS (cache of third-party clients, llama-server and the ollama JS client, default ~/.cache/tarmac-peers),
# TARMAC_TEST_PRESETS (default "dev asan release"), CTEST_PARALLEL_LEVEL (default: number of CPUs + 1:
# the integration tests spend much of their time waiting on processes they start),
# TARMAC_TEST_TIMEOUT (seconds per test without its own limit, default 120), CCACHE_DIR (default
# ~/.cache/ccache), TARMAC_SLOWEST (how many of the slowest tests to list per preset, default 15),
# TARMAC_TEST_CMAKE_ARGS (the configure options above, replaced when set), TARMAC_TEST_OVERLAP
# (default 1: the next preset builds, at the lowest CPU priority, while this one's tests run; 0:
# one step after another, for timing a single step).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
exec </dev/null

export HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
export TARMAC_PEERS=${TARMAC_PEERS:-$HOME/.cache/tarmac-peers}
export CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-$(($(nproc) + 1))}
# The cache outlives the clone; hash_dir off lets a clone in another folder hit it (these builds'
# debug information is never read, so its compilation directory may name the first clone).
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
presets=${TARMAC_TEST_PRESETS-dev asan release}  # set and empty: dependencies and peers only
timeout=${TARMAC_TEST_TIMEOUT:-120}
slowest=${TARMAC_SLOWEST:-15}
read -r -a cmake_args <<<"${TARMAC_TEST_CMAKE_ARGS--DTARMAC_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON -DTARMAC_DEBUG_LINES=ON -DTARMAC_KUBELET=ON}"

start_all=$SECONDS
summary=()
failed_steps=()
tests_total=0
tests_failed=0

if [[ -t 1 ]]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
note() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }

# step NAME COMMAND...: runs one step, records its result and duration.
step() {
  local name=$1 t0=$SECONDS rc
  shift
  note "$name: $*"
  "$@"
  rc=$?
  if ((rc == 0)); then
    summary+=("$(printf '%-22s ok      %4ds' "$name" $((SECONDS - t0)))")
  else
    summary+=("$(printf '%-22s FAILED  %4ds  (exit %d)' "$name" $((SECONDS - t0)) "$rc")")
    failed_steps+=("$name")
  fi
  return "$rc"
}

# ccache_counts: "HITS MISSES" from ccache's statistics so far (nothing without ccache).
ccache_counts() {
  command -v ccache >/dev/null || return 0
  ccache --print-stats 2>/dev/null | awk -F'\t' '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { hits += $2 }
    $1 == "cache_miss" { misses += $2 }
    END { print hits + 0, misses + 0 }'
}

# build PRESET: the build, and how many of its compilations ccache answered.
build() {
  local preset=$1 before after rc h0 m0 h1 m1
  before=$(ccache_counts)
  cmake --build --preset "$preset"
  rc=$?
  after=$(ccache_counts)
  if [[ -n $before && -n $after ]]; then
    read -r h0 m0 <<<"$before"; read -r h1 m1 <<<"$after"
    ccache_lines+=("$(printf '%-6s ccache: %d hits, %d misses' "$preset:" $((h1 - h0)) $((m1 - m0)))")
  fi
  return "$rc"
}
ccache_lines=()

# slowest_tests PRESET LOG: the slowest tests of one ctest run, from its "Test #N: name ... sec"
# lines, for the summary.
slowest_tests() {
  local preset=$1 log=$2
  slow_lines+=("$preset: the $slowest slowest tests")
  while IFS= read -r line; do slow_lines+=("$line"); done < <(
    sed -nE 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: ([^ ]+) \.* *(.*[^ ]) +([0-9.]+) sec$/\3 \1 \2/p' "$log" |
      sort -rn | head -n "$slowest" | awk '{ printf "  %8.1fs  %-50s %s\n", $1, $2, $3 }')
}
slow_lines=()

# run_ctest PRESET: ctest with its output shown and kept, and its counts added to the totals.
run_ctest() {
  local preset=$1 log rc line
  log=$(mktemp)
  ctest --preset "$preset" --timeout "$timeout" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
  if [[ $line =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
    tests_failed=$((tests_failed + BASH_REMATCH[1]))
    tests_total=$((tests_total + BASH_REMATCH[2]))
    # ctest failing with no failed test (a test not run, a bad preset) still counts as a failure.
    ((rc != 0 && BASH_REMATCH[1] == 0)) && tests_failed=$((tests_failed + 1))
    ctest_lines+=("$(printf '%-6s %s' "$preset:" "$line")")
  else
    tests_failed=$((tests_failed + 1)); tests_total=$((tests_total + 1))
    ctest_lines+=("$(printf '%-6s %s' "$preset:" "ctest did not finish (exit $rc)")")
  fi
  slowest_tests "$preset" "$log"
  rm -f "$log"
  return "$rc"
}
ctest_lines=()

# A step that fails before any test ran counts as one failed test in the closing line.
count_as_failed_test() { tests_failed=$((tests_failed + 1)); tests_total=$((tests_total + 1)); }

configure_and_build() {
  if [[ $1 == release ]]; then
    # The release binary as shipped (static libraries, no tests, no kubelet), only `tarmac`, in
    # unity batches for speed; then scripts/check_release.sh on it (it needs glibc alone).
    step "release configure" cmake --preset release -DCMAKE_UNITY_BUILD=ON &&
      step "release build" cmake --build --preset release --target tarmac
    return
  fi
  step "$1 configure" cmake --preset "$1" "${cmake_args[@]}" && step "$1 build" build "$1"
}

# The next preset is configured and built while this one's tests run: the tests mostly wait on
# processes they start (dev ctest: about 35 s of CPU in 200 s), so the build takes the idle CPU.
# It runs at the lowest priority (nice 19, a CPU weight of 15 against the tests' 1024), so the tests
# get every cycle they ask for; its output is printed once it is done. The subshell's steps are
# handed back through files, since a background job cannot change this shell's arrays.
background_dir=''
background_pid=''
start_background_build() {
  background_dir=$(mktemp -d)
  (
    renice -n 19 -p "$BASHPID" >/dev/null 2>&1
    summary=() failed_steps=() ccache_lines=()
    configure_and_build "$1" >"$background_dir/log" 2>&1
    echo $? >"$background_dir/rc"
    printf '%s\n' "${summary[@]}" >"$background_dir/summary"
    ((${#failed_steps[@]})) && printf '%s\n' "${failed_steps[@]}" >"$background_dir/failed"
    ((${#ccache_lines[@]})) && printf '%s\n' "${ccache_lines[@]}" >"$background_dir/ccache"
  ) &
  background_pid=$!
}
# collect_background DIR WHAT: prints a background job's log and adds its steps to this shell's.
collect_background() {
  local dir=$1 what=$2 line file
  note "($what)"
  cat "$dir/log"
  while IFS= read -r line; do summary+=("$line (in the background)"); done <"$dir/summary"
  for file in failed ccache; do
    [[ -f $dir/$file ]] || continue
    while IFS= read -r line; do
      if [[ $file == failed ]]; then failed_steps+=("$line"); else ccache_lines+=("$line"); fi
    done <"$dir/$file"
  done
}

# Waits for the background build; its status.
finish_background_build() {
  local rc
  wait "$background_pid"
  collect_background "$background_dir" "built in the background while the tests ran"
  rc=$(cat "$background_dir/rc" 2>/dev/null || echo 1)
  rm -rf "$background_dir"
  return "$rc"
}

# llama-server (sid's) and Ollama's JavaScript client (npm), for the backfill tests, are fetched
# while the first preset builds: downloading and unpacking take the network, not the CPU (a cold
# fetch of llama-server took about 110 s). They come after the NVML peers and on their own: a
# failure there (sid moves, no npm) is a failed step, and its tests are skipped, but every other
# test still runs. Collected before the first tests start.
fetch_dir=''
fetch_pid=''
start_backfill_peers() {
  fetch_dir=$(mktemp -d)
  (
    summary=() failed_steps=()
    {
      step llama-server bash scripts/peers.sh --llama-server
      step ollama-js bash scripts/peers.sh --ollama-js
    } >"$fetch_dir/log" 2>&1
    printf '%s\n' "${summary[@]}" >"$fetch_dir/summary"
    ((${#failed_steps[@]})) && printf '%s\n' "${failed_steps[@]}" >"$fetch_dir/failed"
  ) &
  fetch_pid=$!
}
finish_backfill_peers() {
  [[ -n $fetch_pid ]] || return 0
  wait "$fetch_pid"
  collect_background "$fetch_dir" "backfill's peers, fetched while the first preset built"
  rm -rf "$fetch_dir"
  fetch_pid=''
}

if step deps bash scripts/deps.sh --test && step peers bash scripts/peers.sh; then
  start_backfill_peers
  read -r -a preset_list <<<"$presets"
  for ((i = 0; i < ${#preset_list[@]}; i++)); do
    preset=${preset_list[i]}
    next=${preset_list[i + 1]:-}
    if ((i == 0)) || [[ ${TARMAC_TEST_OVERLAP:-1} == 0 ]]; then
      configure_and_build "$preset"
    else
      finish_background_build
    fi
    built=$?
    finish_backfill_peers
    if [[ -n $next && ${TARMAC_TEST_OVERLAP:-1} != 0 ]]; then start_background_build "$next"; fi
    if ((built == 0)) && [[ $preset == release ]]; then
      # No tests in that tree: the binary's check counts as one test.
      tests_total=$((tests_total + 1))
      # With the dev tree's simulator when it was built: the shipped binary's HTTPS is tested too.
      sim_build=''
      if [[ -x build/sim/tarmac-sim ]]; then
        sim_build=build
      else
        echo "release check: no build/sim (the dev preset was not built): its HTTPS is not tested"
      fi
      if step "release check" bash scripts/check_release.sh build-release/tarmac $sim_build; then
        ctest_lines+=("$(printf '%-6s %s' "release:" "scripts/check_release.sh passed")")
      else
        tests_failed=$((tests_failed + 1))
        ctest_lines+=("$(printf '%-6s %s' "release:" "scripts/check_release.sh FAILED")")
      fi
    elif ((built == 0)); then
      step "$preset ctest" run_ctest "$preset"
    else
      count_as_failed_test
      ctest_lines+=("$(printf '%-6s %s' "$preset:" "not run: configure or build failed")")
    fi
  done
  finish_backfill_peers  # with no preset to build (TARMAC_TEST_PRESETS set and empty)
else
  count_as_failed_test
fi

note "summary ($((SECONDS - start_all))s)"
((${#slow_lines[@]})) && printf '  %s\n' "${slow_lines[@]}" ""
printf '  %s\n' "${summary[@]}"
((${#ccache_lines[@]})) && printf '  %s\n' "${ccache_lines[@]}"
printf '  %s\n' "${ctest_lines[@]}"
if ((${#failed_steps[@]})); then
  joined=$(printf '%s, ' "${failed_steps[@]}")
  printf '\ntest.sh: FAILED: %s\n' "${joined%, }"
else
  printf '\ntest.sh: all steps passed\n'
fi
if ((tests_total > 0)); then
  echo "$(((tests_total - tests_failed) * 100 / tests_total))% tests passed, $tests_failed tests failed out of $tests_total"
fi
((${#failed_steps[@]} == 0))
