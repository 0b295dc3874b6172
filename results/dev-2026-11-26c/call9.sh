#!/usr/bin/env bash
# Device call 9 (third session of 2026-11-26): main after the merge of chapter 8's step 6 (4c2bbb9
# plus this script): chapter 8 and 10's planted bugs (make check-exercises), chapter 8's [gpu]
# tests of step 6 at full size, chapter 8 under the four sanitizers (small grid), chapter 9's [gpu]
# tests on the small grid (its launch reads the SM count from common/device.h since 444675d).
# Everything lands in $OUT/call9.tar.gz.
set -u -o pipefail
W=/tmp/call9; mkdir -p $W
CI=$PWD/.deps/include
M=(make ARCH=sm_90 CATCH2_INCLUDE=$CI)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call9.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
"${M[@]}" -j16 chapter8 build/tests/chapter08_test build/tests/chapter09_test build/tests/chapter10_test > $W/build.txt 2>&1; log "build rc=$?, warnings: $(grep -ci warning $W/build.txt)"
CHECK_EXERCISES_ONLY="8 10" timeout 240 "${M[@]}" check-exercises > $W/check-exercises.txt 2>&1; log "exercises rc=$?: $(tail -n 1 $W/check-exercises.txt)"
timeout 150 stdbuf -oL build/tests/chapter08_test "[v6]" > $W/ch8-tests-v6.txt 2>&1; log "ch8 v6 full tests rc=$?: $(tail -n 2 $W/ch8-tests-v6.txt | tr '\n' ' ')"
FA_TEST_SMALL=1 timeout 60 stdbuf -oL build/tests/chapter09_test "[gpu]" > $W/ch9-tests-small.txt 2>&1; log "ch9 small tests rc=$?: $(tail -n 2 $W/ch9-tests-small.txt | tr '\n' ' ')"
left=$((590 - (SECONDS - T0)))
SANITIZE_JOBS=4 timeout $left tools/sanitize.sh build/tests/chapter08_test > $W/ch8-sanitize.txt 2>&1; log "ch8 sanitizer rc=$?"
cp build/tests/chapter08_test.*.log $W/ 2>/dev/null
log "end"
