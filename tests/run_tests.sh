#!/usr/bin/env bash
# Runs the test cases of test binaries, side by side, and adds up what they report.
#   tests/run_tests.sh BIN... [-- CATCH2-ARGS...]
# Each binary first lists what the arguments select (FA_TEST_PLAN=1, tests/main.cpp). Its CPU test
# cases then run a process each, TEST_JOBS at a time (default: every core), and a line is printed as
# each one ends; its GPU test cases run in one process per binary, one binary after the other, so
# that they never share the GPU. With Catch2 options among the arguments (-s, -d yes, ...) each
# binary runs whole instead, one after the other. A process ends with "test-summary: passed=P failed=F
# gpu-not-run=K"; one that dies before printing it (crash, CUDA error exit) counts as one failed
# test case, and its whole output is printed at the end with every failure's. The last line is
# always "N passed, M failed". Exit status, as the programs' (README: exit statuses): 0 when every
# test case that ran passed, 1 when M > 0; when no test case ran at all (N = M = 0: nothing was
# checked, which is not a pass) 2 if the spec matches no test case, 3 if every one it selects needs
# a GPU this machine lacks.
set -u
bins=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do bins+=("$1"); shift; done
[ $# -gt 0 ] && shift
jobs_max=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Catch2 options among the arguments (-s, -d yes, -r ...): a binary at a time, whole, as they ask.
whole=0
for a in "$@"; do case "$a" in -*) whole=1 ;; esac; done

# Catch2 reads ',', '[', ']' and '\' in a test spec as syntax; a backslash makes each literal, so
# the spec matches the one test case of that exact name.
spec_of() { sed 's/[][\\,]/\\&/g' <<<"$1"; }

# ---- the plan: what each binary's arguments select -----------------------------------------------
passed=0 failed=0 not_run=0
runs=()  # "binary<TAB>cpu|gpu|whole<TAB>spec" for run i
for bin in "${bins[@]}"; do
  if [ "$whole" = 1 ]; then runs+=("$bin"$'\t'whole$'\t'); continue; fi
  if ! plan=$(FA_TEST_PLAN=1 "$bin" "$@" 2>"$work/plan-err"); then
    echo "*** $bin could not list its test cases: counted as 1 failed test case"
    cat "$work/plan-err"
    failed=$((failed + 1))
    continue
  fi
  gpu_spec=""
  while IFS=$'\t' read -r kind name; do
    case "$kind" in
      cpu) runs+=("$bin"$'\t'cpu$'\t'"$(spec_of "$name")") ;;
      gpu) gpu_spec+="${gpu_spec:+,}$(spec_of "$name")" ;;
      not-run) not_run=$((not_run + name)) ;;
    esac
  done <<<"$plan"
  [ -n "$gpu_spec" ] && runs+=("$bin"$'\t'gpu$'\t'"$gpu_spec")
done

# ---- running: run i writes $work/i.log, then its line ---------------------------------------------
# Prints "passed", "FAILED" or "stopped" (no summary: it died), the seconds and what ran.
run_one() {  # index binary kind spec (CATCH2-ARGS for kind "whole")
  local i=$1 bin=$2 kind=$3 spec=$4 start=$SECONDS status summary verdict what
  shift 4
  if [ "$kind" = whole ]; then "$bin" "$@" >"$work/$i.log" 2>&1; else "$bin" "$spec" >"$work/$i.log" 2>&1; fi
  status=$?
  echo "$status" >"$work/$i.status"
  summary=$(grep '^test-summary:' "$work/$i.log" | tail -n 1)
  if [ -z "$summary" ]; then verdict=stopped
  elif [ "$status" -ne 0 ] || ! grep -q 'failed=0 ' <<<"$summary"; then verdict=FAILED
  else verdict=passed; fi
  case "$kind" in
    gpu) what="its selected [gpu] test cases (${summary#test-summary: })" ;;
    whole) what="$* (${summary#test-summary: })" ;;
    *) what=$(sed 's/\\\(.\)/\1/g' <<<"$spec") ;;
  esac
  printf '%-7s %4d s  %s  %s\n' "$verdict" $((SECONDS - start)) "$(basename "$bin")" "$what"
}

gpu_chain() {  # the GPU runs (and whole binaries), one after the other
  local i
  for i in "${gpu_runs[@]}"; do
    IFS=$'\t' read -r bin kind spec <<<"${runs[$i]}"
    run_one "$i" "$bin" "$kind" "$spec" "$@"
  done
}

echo "=== ${#runs[@]} runs of ${#bins[@]} test binaries${*:+ ($*)}, $jobs_max at a time"
gpu_runs=()
for i in "${!runs[@]}"; do
  IFS=$'\t' read -r bin kind spec <<<"${runs[$i]}"
  if [ "$kind" != cpu ]; then gpu_runs+=("$i"); continue; fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  run_one "$i" "$bin" "$kind" "$spec" &
done
if [ ${#gpu_runs[@]} -gt 0 ]; then
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  gpu_chain "$@" &
fi
wait

# ---- adding up --------------------------------------------------------------------------------
for i in "${!runs[@]}"; do
  IFS=$'\t' read -r bin kind spec <<<"${runs[$i]}"
  status=$(cat "$work/$i.status" 2>/dev/null || echo 255)
  summary=$(grep '^test-summary:' "$work/$i.log" | tail -n 1)
  if [ "$kind" = whole ]; then
    echo; echo "=== $bin $*"; cat "$work/$i.log"
    k=$(sed -n 's/.*gpu-not-run=\([0-9]*\).*/\1/p' <<<"$summary")
    not_run=$((not_run + ${k:-0}))
  fi
  if [ -z "$summary" ]; then
    echo; echo "*** $(basename "$bin") stopped (exit status $status) before reporting: counted as 1 failed test case"
    cat "$work/$i.log"
    failed=$((failed + 1))
    continue
  fi
  p=$(sed -n 's/.*passed=\([0-9]*\).*/\1/p' <<<"$summary")
  f=$(sed -n 's/.*failed=\([0-9]*\).*/\1/p' <<<"$summary")
  passed=$((passed + p)); failed=$((failed + f))
  if [ "$f" -gt 0 ]; then
    [ "$kind" = whole ] || { echo; echo "*** $(basename "$bin"): $f failed:"; cat "$work/$i.log"; }
  elif [ "$status" -ne 0 ]; then
    echo; echo "*** $(basename "$bin") exited with status $status after reporting no failure: counted as 1 failed test case"
    cat "$work/$i.log"
    failed=$((failed + 1))
  fi
done
echo
if [ "$not_run" -gt 0 ]; then echo "$not_run GPU test cases not run: no CUDA device, or not the compute capability, the number of GPUs or the libraries they need"; fi
if [ $((passed + failed)) -eq 0 ]; then
  # a run that checked nothing is not a pass: a test spec (VARIANT, TEST_ARGS) that matches no test
  # case, or only GPU test cases on a machine that cannot run them
  if [ "$not_run" -gt 0 ]; then
    echo "nothing was checked on this machine: every test case selected needs a GPU it does not have"
    status=3
  else
    echo "nothing was checked on this machine: no test case matches '$*' (a VARIANT or TEST_ARGS that names none?)"
    status=2
  fi
  echo "$passed passed, $failed failed"
  exit $status
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
