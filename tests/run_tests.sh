#!/usr/bin/env bash
# Runs test binaries one after the other and adds up what they report.
#   tests/run_tests.sh BIN... [-- CATCH2-ARGS...]
# Each binary ends with "test-summary: passed=P failed=F gpu-not-run=K" (tests/main.cpp). A binary
# that dies before printing it (crash, CUDA error exit) counts as one failed test case. The last
# line is always "N passed, M failed"; the exit status is non-zero when M > 0, and when no test case
# ran at all (N = M = 0: nothing was checked, which is not a pass).
set -u
bins=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do bins+=("$1"); shift; done
[ $# -gt 0 ] && shift
passed=0 failed=0 not_run=0
for bin in "${bins[@]}"; do
  echo "=== $bin $*"
  log=$(mktemp)
  "$bin" "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  summary=$(grep '^test-summary:' "$log" | tail -n 1)
  rm -f "$log"
  if [ -z "$summary" ]; then
    echo "*** $bin stopped (exit status $status) before reporting: counted as 1 failed test case"
    failed=$((failed + 1))
    continue
  fi
  p=$(echo "$summary" | sed -n 's/.*passed=\([0-9]*\).*/\1/p')
  f=$(echo "$summary" | sed -n 's/.*failed=\([0-9]*\).*/\1/p')
  k=$(echo "$summary" | sed -n 's/.*gpu-not-run=\([0-9]*\).*/\1/p')
  passed=$((passed + p)); failed=$((failed + f)); not_run=$((not_run + k))
  if [ "$f" -eq 0 ] && [ "$status" -ne 0 ]; then
    echo "*** $bin exited with status $status after reporting no failure: counted as 1 failed test case"
    failed=$((failed + 1))
  fi
done
echo
if [ "$not_run" -gt 0 ]; then echo "$not_run GPU test cases not run: no CUDA device, or not the compute capability they need"; fi
if [ $((passed + failed)) -eq 0 ]; then
  # a run that checked nothing is not a pass: a test spec (VARIANT, TEST_ARGS) that matches no test
  # case, or only GPU test cases on a machine that cannot run them
  if [ "$not_run" -gt 0 ]; then
    echo "nothing was checked on this machine: every test case selected needs a GPU it does not have"
  else
    echo "nothing was checked on this machine: no test case matches '$*' (a VARIANT or TEST_ARGS that names none?)"
  fi
  echo "$passed passed, $failed failed"
  exit 1
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
