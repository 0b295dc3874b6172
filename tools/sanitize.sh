#!/usr/bin/env bash
# compute-sanitizer over the GPU tests of every chapter, on small shapes (FA_TEST_SMALL=1).
#   tools/sanitize.sh TEST-BINARY...
# Each binary runs its [gpu] test cases under memcheck, racecheck, synccheck and initcheck. Any
# error the sanitizer reports, or any failed test, makes the run fail. Without a GPU it says so and
# exits 0 without claiming anything was checked.
set -u
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "make sanitize: no CUDA device on this machine; nothing was checked."
  exit 0
fi
if ! command -v compute-sanitizer >/dev/null; then
  echo "make sanitize: compute-sanitizer not found (it ships with the CUDA Toolkit, in \$CUDA_HOME/bin)."
  exit 1
fi
export FA_TEST_SMALL=1
results=() bad=0
for bin in "$@"; do
  for tool in memcheck racecheck synccheck initcheck; do
    log="$bin.$tool.log"
    start=$SECONDS
    compute-sanitizer --tool "$tool" --error-exitcode 99 "$bin" "[gpu]" >"$log" 2>&1
    status=$?
    summary=$(grep -E '^========= (ERROR SUMMARY|RACECHECK SUMMARY)' "$log" | tail -n 1 | sed 's/^========= //')
    tests=$(grep '^test-summary:' "$log" | tail -n 1 | sed 's/^test-summary: //')
    if [ "$status" -eq 0 ]; then verdict=clean; else verdict="FAILED (exit $status)"; bad=1; fi
    results+=("$(printf '%-32s %-10s %-18s %-40s %s' "$(basename "$bin")" "$tool" "$verdict" "${summary:-no summary}" "${tests:-}") [$((SECONDS - start)) s]")
    if [ "$status" -ne 0 ]; then grep -E '^=========' "$log" | head -n 30; fi
  done
done
echo
printf '%s\n' "${results[@]}"
echo
if [ "$bad" -eq 0 ]; then echo "sanitize: all clean"; else echo "sanitize: FAILED (logs: build/tests/*.log)"; fi
exit "$bad"
