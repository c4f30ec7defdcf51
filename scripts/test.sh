#!/usr/bin/env bash
# The README's test command: installs what is missing, builds and runs every test, twice:
#   1. dev preset  (build/):      configure, build, ctest (all tests)
#   2. asan preset (build-asan/): AddressSanitizer + UBSan build, ctest (all tests)
# then prints a summary. Exits non-zero when any step fails; every step runs even after a failure,
# so one run shows everything that is broken. The last line has CTest's form
# ("N% tests passed, F tests failed out of T") summed over both runs; a configure or build step
# that fails counts there as one failed test.
#
# Environment: TARMAC_PEERS (cache of third-party clients, default ~/.cache/tarmac-peers),
# TARMAC_TEST_PRESETS (default "dev asan"), CTEST_PARALLEL_LEVEL (default: number of CPUs),
# TARMAC_TEST_TIMEOUT (seconds per test without its own limit, default 120).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
exec </dev/null

export HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
export TARMAC_PEERS=${TARMAC_PEERS:-$HOME/.cache/tarmac-peers}
export CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-$(nproc)}
presets=${TARMAC_TEST_PRESETS:-dev asan}
timeout=${TARMAC_TEST_TIMEOUT:-120}

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
  rm -f "$log"
  return "$rc"
}
ctest_lines=()

# A step that fails before any test ran counts as one failed test in the closing line.
count_as_failed_test() { tests_failed=$((tests_failed + 1)); tests_total=$((tests_total + 1)); }

if step deps bash scripts/deps.sh --test && step peers bash scripts/peers.sh; then
  for preset in $presets; do
    if step "$preset configure" cmake --preset "$preset" &&
       step "$preset build" cmake --build --preset "$preset"; then
      step "$preset ctest" run_ctest "$preset"
    else
      count_as_failed_test
      ctest_lines+=("$(printf '%-6s %s' "$preset:" "not run: configure or build failed")")
    fi
  done
else
  count_as_failed_test
fi

note "summary ($((SECONDS - start_all))s)"
printf '  %s\n' "${summary[@]}"
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
