#!/usr/bin/env bash
# compute-sanitizer over the GPU tests of every chapter, on small shapes (FA_TEST_SMALL=1).
#   tools/sanitize.sh TEST-BINARY...
#   SANITIZE_ONLY=TEXT tools/sanitize.sh TEST-BINARY...   only the [gpu] cases whose names contain TEXT
# Each [gpu] test case of each binary runs in a process of its own under memcheck, racecheck,
# synccheck and initcheck, several processes at a time (SANITIZE_JOBS, default 4): one long
# racecheck no longer holds up the rest. A line is printed as each one finishes. A case fails when
# the sanitizer reports an error, the test fails, or the case did not run exactly once. Cases
# tagged [nccl] are listed as not run. Without a GPU it says so and exits 1: nothing was checked.
# Logs: <binary>.sanitize/<tool>.<case>.log.
set -u
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "make sanitize: no CUDA device on this machine; nothing was checked."
  exit 1
fi
if ! command -v compute-sanitizer >/dev/null; then
  echo "make sanitize: compute-sanitizer not found (it ships with the CUDA Toolkit, in \$CUDA_HOME/bin)."
  exit 1
fi
export FA_TEST_SMALL=1
jobs_max=${SANITIZE_JOBS:-4}

# Catch2 reads ',', '[', ']' and '\' in a test spec as syntax; a backslash makes each literal, so
# the spec matches the one test case of that exact name.
spec_of() { sed 's/[][\\,]/\\&/g' <<<"$1"; }

# Runs test case number $3 (named $4) of binary $1 under tool $2 and prints its verdict line.
check() {
  local bin=$1 tool=$2 i=$3 name=$4 start=$SECONDS status summary tests verdict
  local log="$bin.sanitize/$tool.$i.log"
  compute-sanitizer --tool "$tool" --error-exitcode 99 "$bin" "$(spec_of "$name")" >"$log" 2>&1
  status=$?
  summary=$(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$log" | tail -n 1 | sed 's/^========= //')
  tests=$(grep '^test-summary:' "$log" | tail -n 1 | sed 's/^test-summary: //')
  if [ "$status" -ne 0 ]; then verdict="FAILED (exit $status)"
  elif [ "$tests" != "passed=1 failed=0 gpu-not-run=0" ]; then verdict="FAILED (ran ${tests:-nothing})"; status=1
  else verdict=clean; fi
  printf '%-16s %-10s %-18s %-34s [%3d s] %s\n' "$(basename "$bin")" "$tool" "$verdict" \
    "${summary:-no summary}" $((SECONDS - start)) "$name"
  if [ "$status" -ne 0 ]; then grep -E '^=========' "$log" | head -n 20 | sed 's/^/    /'; fi
  return "$status"
}

bad=0
not_run=0
running=0
total=0
# racecheck first: its cases are the longest, so the pool ends with the short ones.
for tool in racecheck memcheck synccheck initcheck; do
  for bin in "$@"; do
    mkdir -p "$bin.sanitize"
    mapfile -t names < <("$bin" --list-test-names-only "[gpu]~[nccl]" 2>/dev/null | sed '/^$/d' |
                         grep -F -e "${SANITIZE_ONLY:-}")
    if [ "$tool" = racecheck ]; then
      while read -r skipped; do
        [ -z "$skipped" ] && continue
        not_run=$((not_run + 1))
        printf '%-16s %-10s %-18s %s\n' "$(basename "$bin")" all "not run" \
          "$skipped (its ranks talk through NCCL, whose own kernels and peer-to-peer writes the tools do not follow; the virtual-rank cases run the same code under them)"
      done < <("$bin" --list-test-names-only "[gpu][nccl]" 2>/dev/null)
    fi
    if [ "${#names[@]}" -eq 0 ]; then
      echo "$(basename "$bin"): no [gpu] test case to run"
      bad=1
    fi
    for i in "${!names[@]}"; do
      check "$bin" "$tool" "$i" "${names[$i]}" &
      running=$((running + 1))
      total=$((total + 1))
      if [ "$running" -ge "$jobs_max" ]; then
        wait -n || bad=1
        running=$((running - 1))
      fi
    done
  done
done
while [ "$running" -gt 0 ]; do
  wait -n || bad=1
  running=$((running - 1))
done
echo
if [ "$bad" -eq 0 ]; then echo "sanitize: all clean ($total runs: $# binaries, 4 tools, one [gpu] test case each; $not_run [nccl] case(s) not run)"
else echo "sanitize: FAILED (see the lines above and the logs)"; fi
exit "$bad"
