#!/usr/bin/env bash
# Device call 8 (second session of 2026-11-26): chapter 8's new candidates (dQ with 2 m-tiles per
# warp: c10 at D = 64, c10 and c11 at D = 128) swept beside c9 at N = 8192 and 4096, FA2's backward
# in the same call, chapter 8's [gpu] tests on the small grid and its sanitizer; chapter 10 with the
# split floor taken back (tools/bench_decoding.sh). Everything lands in $OUT/call8.tar.gz.
set -u -o pipefail
W=/tmp/call8; mkdir -p $W/bench10
CI=$PWD/.deps/include
M=(make ARCH=sm_90 CATCH2_INCLUDE=$CI)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call8.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
log "build"
"${M[@]}" -j16 chapter8 chapter10 build/tests/chapter08_test build/tests/chapter10_test > $W/build.txt 2>&1; log "  rc=$?, warnings: $(grep -ci warning $W/build.txt)"
log "chapter 8 sweeps"
{ for a in "--seq 8192 --batch 2 --heads 16 --dim 128" "--seq 8192 --batch 2 --heads 32 --dim 64" "--seq 4096 --batch 4 --heads 16 --dim 128" "--seq 8192 --batch 2 --heads 16 --dim 128 --causal"; do
    echo "### ./chapter8 --sweep --no-check $a --repeat 10"
    timeout 60 ./chapter8 --sweep --no-check $a --repeat 10 2>&1 | sed -n '/^kernel  /,$p'
  done
  echo "### python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 4096 8192 --causal 0 1"
  timeout 60 python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 4096 8192 --causal 0 1 2>&1 | grep -v Warning
} > $W/ch8-sweeps.txt 2>&1; log "  done"
log "chapter 10 bench"
timeout 120 tools/bench_decoding.sh $W/bench10 > $W/bench-decoding.txt 2>&1; log "  rc=$?"
log "chapter 8 [gpu] tests, small grid"
FA_TEST_SMALL=1 timeout 150 stdbuf -oL build/tests/chapter08_test "[gpu]" > $W/ch8-tests-small.txt 2>&1; log "  rc=$?: $(tail -n 2 $W/ch8-tests-small.txt | tr '\n' ' ')"
log "chapter 8 sanitizer"
SANITIZE_JOBS=4 timeout 220 tools/sanitize.sh build/tests/chapter08_test > $W/ch8-sanitize.txt 2>&1; log "  rc=$?"
log "chapter 10 tests (what time is left)"
left=$((592 - (SECONDS - T0)))
timeout $left stdbuf -oL build/tests/chapter10_test > $W/ch10-tests.txt 2>&1; log "  rc=$?: $(tail -n 2 $W/ch10-tests.txt | tr '\n' ' ')"
log "end"
