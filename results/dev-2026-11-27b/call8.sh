#!/usr/bin/env bash
# Device call 8 (session of 2026-11-27, 05:55 UTC on): chapters 9 and 10 after their sm_count()
# wrappers became one fa::sm_count() in common/device.h (the SM count sizes chapter 9's
# persistent grid and chapter 10's split heuristic). Their [gpu] tests on the small grid, and each
# program once with its defaults (chapter 9: step 6, the persistent grid; chapter 10: kernel 5's
# split plan). Not timings.
set -u -o pipefail
CI=$PWD/.deps/include
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -n 2; date -u; } > $OUT/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI chapter9 chapter10 build/tests/chapter09_test build/tests/chapter10_test > /tmp/build.txt 2>&1; rc=$?
{ echo "### build rc=$rc"; grep -iE "warning|error" /tmp/build.txt; } >> $OUT/env.txt
log "build rc=$rc, warnings: $(grep -ci warning /tmp/build.txt)"
for ch in 09 10; do
  FA_TEST_SMALL=1 timeout 200 build/tests/chapter${ch}_test "[gpu]" > $OUT/ch$ch-gpu-small.txt 2>&1
  log "ch$ch [gpu] small rc=$?: $(grep -E '^(All tests|test cases:|test-summary)' $OUT/ch$ch-gpu-small.txt | tr '\n' ' ')"
done
timeout 60 ./chapter9 > $OUT/chapter9-default.txt 2>&1; log "./chapter9 rc=$?: $(grep -cE 'PASS' $OUT/chapter9-default.txt) PASS lines, $(grep -cE 'FAIL' $OUT/chapter9-default.txt) FAIL lines"
timeout 60 ./chapter10 > $OUT/chapter10-default.txt 2>&1; log "./chapter10 rc=$?: $(grep -cE 'PASS' $OUT/chapter10-default.txt) PASS lines, $(grep -cE 'FAIL' $OUT/chapter10-default.txt) FAIL lines"
log "end"
