#!/usr/bin/env bash
# Device call 2 of 2026-11-26 (run from the repo root): the edit-one-kernel loop of chapter 7 after
# the issue 18 refactor and before it (.carry/before = 4f626c7), then make sanitize's runs for
# chapters 7-10 and the tests of chapters 8 (small grid) and 10, each under what time is left.
set -u -o pipefail
CI=$PWD/.deps/include
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
M=(make ARCH=sm_$cc CATCH2_INCLUDE=$CI)
T0=$SECONDS; END=${END:-570}
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
left() { echo $((END - (SECONDS - T0))); }
timed() { local s=$SECONDS; "$@"; local rc=$?; log "  rc=$rc, $((SECONDS - s)) s: $*"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $OUT/env.txt 2>&1
log "build: after (all tests), before (chapter 7's test binary)"
timed "${M[@]}" -j16 all tests > $OUT/build.txt 2>&1
timed "${M[@]}" -C .carry/before -j16 build/tests/chapter07_test >> $OUT/build.txt 2>&1
log "edit loop: touch the kernel header, rebuild, rerun (after: one variant, then the chapter; before: the chapter)"
{
  touch chapters/07_tensor_cores/kernel/flash_forward.cuh; timed "${M[@]}" -j16 test-chapter7 VARIANT=6
  touch chapters/07_tensor_cores/kernel/flash_forward.cuh; timed "${M[@]}" -j16 test-chapter7 VARIANT=3
  touch chapters/07_tensor_cores/kernel/flash_forward.cuh; timed "${M[@]}" -j16 test-chapter7
  touch .carry/before/chapters/07_tensor_cores/flash_tc.cuh; timed "${M[@]}" -C .carry/before -j16 test-chapter7
} > $OUT/loop.txt 2>&1
grep "rc=" $OUT/loop.txt
log "sanitize chapters 7-10 (tools/sanitize.sh, as make sanitize runs it), $(left) s left"
SANITIZE_JOBS=8 timeout $(($(left) - 90)) tools/sanitize.sh build/tests/chapter07_test build/tests/chapter08_test \
  build/tests/chapter09_test build/tests/chapter10_test > $OUT/sanitize.txt 2>&1
log "  rc=$?"
log "tests: chapter 10, chapter 8 (FA_TEST_SMALL=1), $(left) s left"
{ timeout 40 build/tests/chapter10_test 2>&1 | tail -n 4; FA_TEST_SMALL=1 timeout $(($(left) - 5)) build/tests/chapter08_test 2>&1 | tail -n 30; } > $OUT/tests-8-10.txt 2>&1
log "end"
