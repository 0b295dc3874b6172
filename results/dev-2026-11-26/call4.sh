#!/usr/bin/env bash
# Device call 4 of 2026-11-26 (run from the repo root): chapter 7's edit loop after its kernels were
# split into one file per head dim (instances/, emulator/d*.cpp), chapter 7's tests, chapter 8's
# ladder with the new default (c9), chapter 7's sweeps at D = 32, 96, 256, chapter 8 under the four sanitizers, chapter 8's GPU tests.
set -u -o pipefail
CI=$PWD/.deps/include
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
M=(make ARCH=sm_$cc CATCH2_INCLUDE=$CI)
T0=$SECONDS; END=${END:-580}
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
left() { echo $((END - (SECONDS - T0))); }
timed() { local s=$SECONDS; "$@"; local rc=$?; log "  rc=$rc, $((SECONDS - s)) s: $*"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } >> $OUT/timeline.txt 2>&1
log "build"; timed "${M[@]}" -j16 all tests > $OUT/build.txt 2>&1
log "edit loop: touch kernel/flash_forward.cuh; rebuild alone, then the tests of one variant; then both in one command, one variant and the chapter"
{
  touch chapters/07_tensor_cores/kernel/flash_forward.cuh; timed "${M[@]}" -j16 build/tests/chapter07_test
  timed "${M[@]}" -j16 test-chapter7 VARIANT=6
  touch chapters/07_tensor_cores/kernel/flash_forward.cuh; timed "${M[@]}" -j16 test-chapter7 VARIANT=6
  touch chapters/07_tensor_cores/kernel/flash_forward.cuh; timed "${M[@]}" -j16 test-chapter7
} > $OUT/loop.txt 2>&1
grep "rc=" $OUT/loop.txt
log "chapter 8 ladder (default c9)"
{ for D in 128 64; do h=$((1024 / D)); echo "### ./chapter8 --ladder --train --seq 4096 --batch 4 --heads $h --dim $D --repeat 10"
    timeout 60 ./chapter8 --ladder --train --seq 4096 --batch 4 --heads $h --dim $D --repeat 10 2>&1; done
} > $OUT/ch8-ladder.txt 2>&1; log "  done"
log "chapter 7 sweeps at D = 32, 96, 256"
{ for Dh in "32 64" "96 21" "256 8"; do set -- $Dh; echo "### ./chapter7 --sweep --no-check --dim $1 --seq 8192 --batch 2 --heads $2 --repeat 10"
    timeout 30 ./chapter7 --sweep --no-check --dim $1 --seq 8192 --batch 2 --heads $2 --repeat 10 2>&1; done
} > $OUT/ch7-sweeps.txt 2>&1; log "  done"
log "chapter 8 sanitize, $(left) s left"
SANITIZE_JOBS=4 timeout $(($(left) - 60)) tools/sanitize.sh build/tests/chapter08_test > $OUT/ch8-sanitize.txt 2>&1; log "  rc=$?"
log "chapter 8 GPU tests (FA_TEST_SMALL=1), $(left) s left"
FA_TEST_SMALL=1 timeout $(($(left) - 3)) stdbuf -oL build/tests/chapter08_test "[gpu]" -d yes > $OUT/ch8-tests.txt 2>&1; log "  rc=$?"
log "end"
