#!/usr/bin/env bash
# Checks the course on this machine's GPU, part by part, each part's output in its own log:
#   tools/gpu_verify.sh OUTDIR [PART...]        parts: build tests sanitize exercises (default: all)
# build      every program and test binary for this GPU (ARCH=sm_XY from nvidia-smi), warnings listed
# tests      each GPU chapter's test binary alone (its [cpu] and [gpu] cases), with the time it took
# sanitize   make sanitize (memcheck, racecheck, synccheck, initcheck on small shapes)
# exercises  make check-exercises (every planted bug, the GPU ones included, must be caught)
# Each part runs under a time limit (GPU_VERIFY_LIMIT seconds, default 540 for all parts together,
# shared in order), so a run on a lent machine returns what it finished. OUTDIR gets env.txt, one
# <part>.txt per part and summary.txt (one line per part: its exit status and seconds).
# TESTS="7 9" picks the chapters whose tests run; TEST_ARGS="[v6]" narrows them; FA_TEST_SMALL=1
# (the environment) uses the small shape grid. CATCH2_INCLUDE as for make.
set -u -o pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/gpu_verify.sh OUTDIR [build|tests|sanitize|exercises ...]}
shift
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(build tests sanitize exercises)
mkdir -p "$out"
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
if [ -z "$cc" ]; then
  echo "gpu_verify: no CUDA device on this machine (nvidia-smi lists none); nothing was checked." >&2
  exit 2
fi
mk=(make ARCH="sm_$cc" ${CATCH2_INCLUDE:+CATCH2_INCLUDE="$CATCH2_INCLUDE"})
limit=${GPU_VERIFY_LIMIT:-540}
start=$SECONDS
{
  nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.max.sm --format=csv
  nvcc --version | tail -n 2
  echo "git: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (uncommitted changes)')"
  date -u
} > "$out/env.txt" 2>&1

: > "$out/summary.txt"
left() { echo $((limit - (SECONDS - start))); }

# The GPU chapters that have tests, or those TESTS names.
test_chapters() {
  if [ -n "${TESTS:-}" ]; then echo "$TESTS"; return; fi
  "${mk[@]}" -s -f Makefile -f <(printf 'print-gpu:\n\t@echo $(GPU_CHAPTERS)\n') print-gpu
}

run_part() {
  case $1 in
    build) "${mk[@]}" -j"$(nproc)" all tests 2>&1 | grep -v '^nvcc \|^g++ \|^mkdir ' ;;
    tests)
      local n status bad=0
      for n in $(test_chapters); do
        local t0=$SECONDS
        "${mk[@]}" test-chapter"$n" ${TEST_ARGS:+TEST_ARGS="$TEST_ARGS"} 2>&1 | grep -v '^$' | tail -n 40
        status=${PIPESTATUS[0]}
        echo "--- chapter $n: exit $status, $((SECONDS - t0)) s"
        [ "$status" -eq 0 ] || bad=1
      done
      return $bad
      ;;
    sanitize) "${mk[@]}" sanitize 2>&1 ;;
    exercises) "${mk[@]}" check-exercises 2>&1 | tail -n 80 ;;
    *) echo "gpu_verify: unknown part '$1' (build, tests, sanitize, exercises)"; return 2 ;;
  esac
}

for part in "${parts[@]}"; do
  t0=$SECONDS
  budget=$(left)
  if [ "$budget" -le 10 ]; then
    echo "$part: not run (time limit reached)" >> "$out/summary.txt"
    continue
  fi
  timeout "$budget" bash -c "$(declare -f run_part test_chapters); mk=(${mk[*]@Q}); run_part $part" \
    > "$out/$part.txt" 2>&1
  status=$?
  [ $status -eq 124 ] && note=" (stopped at the time limit)" || note=""
  echo "$part: exit $status, $((SECONDS - t0)) s$note" >> "$out/summary.txt"
done
cat "$out/summary.txt"
