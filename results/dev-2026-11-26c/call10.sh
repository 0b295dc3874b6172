#!/usr/bin/env bash
# Device call 10 (third session of 2026-11-26): chapter 10's planted bugs again with bug 4's patch
# regenerated against the batched combine_row (same bug), and compute-sanitizer's racecheck over
# chapter 8's [gpu] tests on the small grid (call 9's sanitizer run was cut inside racecheck;
# memcheck, synccheck and initcheck were clean there). Everything lands in $OUT/call10.tar.gz.
set -u -o pipefail
W=/tmp/call10; mkdir -p $W
CI=$PWD/.deps/include
M=(make ARCH=sm_90 CATCH2_INCLUDE=$CI)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call10.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
"${M[@]}" -j16 build/tests/chapter08_test build/tests/chapter10_test > $W/build.txt 2>&1; log "build rc=$?, warnings: $(grep -ci warning $W/build.txt)"
(FA_TEST_SMALL=1 timeout 420 compute-sanitizer --tool racecheck --error-exitcode 99 build/tests/chapter08_test "[gpu]" > $W/ch8-racecheck.txt 2>&1; echo "racecheck rc=$?" >> $W/ch8-racecheck.txt) &
CHECK_EXERCISES_ONLY=10 timeout 200 "${M[@]}" check-exercises > $W/check-exercises.txt 2>&1; log "exercises rc=$?: $(tail -n 1 $W/check-exercises.txt)"
wait; log "racecheck: $(grep -E 'RACECHECK SUMMARY|test-summary|racecheck rc' $W/ch8-racecheck.txt | tr '\n' ' ')"
log "end"
