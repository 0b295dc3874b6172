#!/usr/bin/env bash
# Device call 1 (session of 2026-11-27, 05:55 UTC on): correctness of the tree that closes issue 14
# (chapter 8's step 6 with c5-c7, tc::load_tile's cp.async zero fill, which chapters 7, 8 and 10
# share). Builds the test binaries of chapters 7-10, then, side by side until the deadline:
# tools/sanitize.sh (memcheck, racecheck, synccheck, initcheck; one [gpu] test case per process)
# over chapters 8, 7 and 10 on the small grid; the [gpu] tests of chapters 8, 7 and 10 at full
# size; chapter 9's on the small grid. Nothing here is a timing. Logs go straight to $OUT.
set -u -o pipefail
CI=$PWD/.deps/include
T0=$SECONDS; DEADLINE=570
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; compute-sanitizer --version | tail -n 1; date -u; } > $OUT/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI build/tests/chapter07_test build/tests/chapter08_test \
  build/tests/chapter09_test build/tests/chapter10_test > /tmp/build.txt 2>&1; rc=$?
{ echo "### build rc=$rc"; grep -iE "warning|error" /tmp/build.txt; } >> $OUT/env.txt
log "build rc=$rc, warnings: $(grep -ci warning /tmp/build.txt)"
( SANITIZE_JOBS=10 timeout $(left) tools/sanitize.sh build/tests/chapter08_test build/tests/chapter07_test \
    build/tests/chapter10_test > $OUT/sanitize.txt 2>&1; log "sanitize rc=$?: $(tail -n 1 $OUT/sanitize.txt)" ) &
for ch in 08 07 10; do
  ( timeout $(left) build/tests/chapter${ch}_test "[gpu]" > $OUT/ch$ch-gpu-full.txt 2>&1
    log "ch$ch [gpu] full size rc=$?: $(grep -E '^(All tests|test cases:|test-summary)' $OUT/ch$ch-gpu-full.txt | tr '\n' ' ')" ) &
done
( FA_TEST_SMALL=1 timeout $(left) build/tests/chapter09_test "[gpu]" > $OUT/ch09-gpu-small.txt 2>&1
  log "ch09 [gpu] small rc=$?: $(grep -E '^(All tests|test cases:|test-summary)' $OUT/ch09-gpu-small.txt | tr '\n' ' ')" ) &
wait
log "end"
