#!/usr/bin/env bash
# compute-sanitizer over the GPU tests of every chapter, on small shapes (FA_TEST_SMALL=1).
#   tools/sanitize.sh TEST-BINARY...
# Each binary runs its [gpu] test cases under memcheck, racecheck, synccheck and initcheck, several
# at a time (SANITIZE_JOBS, default 4); a line is printed as each one finishes. Any error the
# sanitizer reports, or any failed test, makes the run fail. Without a GPU it says so and exits 1:
# nothing was checked. Logs: <binary>.<tool>.log next to each binary.
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

# Runs one (binary, tool) pair and prints its verdict line.
check() {
  local bin=$1 tool=$2 log="$1.$2.log" start=$SECONDS status summary tests verdict
  compute-sanitizer --tool "$tool" --error-exitcode 99 "$bin" "[gpu]" >"$log" 2>&1
  status=$?
  summary=$(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$log" | tail -n 1 | sed 's/^========= //')
  tests=$(grep '^test-summary:' "$log" | tail -n 1 | sed 's/^test-summary: //')
  if [ "$status" -eq 0 ]; then verdict=clean; else verdict="FAILED (exit $status)"; fi
  printf '%-24s %-10s %-18s %-34s %s [%d s]\n' "$(basename "$bin")" "$tool" "$verdict" \
    "${summary:-no summary}" "${tests:-no test summary}" $((SECONDS - start))
  if [ "$status" -ne 0 ]; then grep -E '^=========' "$log" | head -n 20 | sed 's/^/    /'; fi
  return "$status"
}

bad=0
running=0
for bin in "$@"; do
  for tool in memcheck racecheck synccheck initcheck; do
    check "$bin" "$tool" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs_max" ]; then
      wait -n || bad=1
      running=$((running - 1))
    fi
  done
done
while [ "$running" -gt 0 ]; do
  wait -n || bad=1
  running=$((running - 1))
done
echo
if [ "$bad" -eq 0 ]; then echo "sanitize: all clean"; else echo "sanitize: FAILED (see the lines above and the logs)"; fi
exit "$bad"
