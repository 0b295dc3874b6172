#!/usr/bin/env bash
# Device call 5 (session of 2026-11-27), the last of the session's device time: the final tree
# (call 4's plus the CPU test of the Pᵀ/dSᵀ store offsets). Chapter 8 step 6 against chapter 6's
# fp32 backward at D = 128, N = 8192 (alone on the GPU: a timing), then, side by side until the
# deadline: the [gpu] tests of chapters 8 and 7 on the small grid, step 6's [gpu] tests at full
# size, and compute-sanitizer (memcheck, initcheck, racecheck, synccheck) on step 6's and
# chapter 7's small-grid tests. Logs go straight to $OUT, so a cut call still returns them.
set -u -o pipefail
CI=$PWD/.deps/include
T0=$SECONDS; DEADLINE=245
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $OUT/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI chapter8 build/tests/chapter07_test build/tests/chapter08_test > /tmp/build.txt 2>&1; rc=$?
grep -iE "warning|error" /tmp/build.txt > $OUT/build-warnings.txt; log "build rc=$rc, warnings: $(grep -ci warning /tmp/build.txt)"
timeout 50 ./chapter8 --kernel 6 --seq 8192 --batch 2 --heads 16 --dim 128 --fp32 --train --repeat 5 > $OUT/ch8-vs-ch6-train-d128.txt 2>&1; log "fp32 + train D=128 rc=$?: $(grep 'x chapter 6' $OUT/ch8-vs-ch6-train-d128.txt | tr '\n' ' ')"
( FA_TEST_SMALL=1 timeout $(left) build/tests/chapter08_test "[gpu]" > $OUT/ch8-gpu-small.txt 2>&1; log "ch8 [gpu] small rc=$?: $(tail -n 2 $OUT/ch8-gpu-small.txt | tr '\n' ' ')"
  timeout $(left) build/tests/chapter08_test "[gpu][v6]" > $OUT/ch8-gpu-v6-full.txt 2>&1; log "ch8 [gpu][v6] full rc=$?: $(tail -n 2 $OUT/ch8-gpu-v6-full.txt | tr '\n' ' ')" ) &
( FA_TEST_SMALL=1 timeout $(left) build/tests/chapter07_test "[gpu]" > $OUT/ch7-gpu-small.txt 2>&1; log "ch7 [gpu] small rc=$?: $(tail -n 2 $OUT/ch7-gpu-small.txt | tr '\n' ' ')" ) &
export FA_TEST_SMALL=1
for t in memcheck initcheck synccheck racecheck; do
  for b in "chapter08_test [gpu][v6]" "chapter07_test [gpu]"; do
    ( set -f; set -- $b
      timeout $(left) compute-sanitizer --tool $t --error-exitcode 9 build/tests/$1 "$2" > $OUT/san-$t-$1.txt 2>&1
      log "sanitize $t $1 $2 rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san-$t-$1.txt | tail -n 1) $(grep -E '^test-summary' $OUT/san-$t-$1.txt | tail -n 1)" ) &
  done
done
wait
log "end"
