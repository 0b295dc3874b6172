#!/usr/bin/env bash
# Device call 5 (third session of 2026-11-26): chapter 10 after the merge of the in-kernel combine
# on every thread, the paged tiles read in runs, and combine_row's batched loads. All [gpu] tests,
# the four sanitizers on the small grid, planted bugs; then before (444675d, built from
# .carry/before) and after, alternately, on the shapes the changes aim at; tools/bench_decoding.sh
# (the ladder, the split sweeps, PyTorch, the targets and the figure); the sweep at B = 64.
# Everything lands in $OUT/call5.tar.gz.
set -u -o pipefail
W=/tmp/call5; mkdir -p $W/bench10
CI=$PWD/.deps/include
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call5.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
log "build after and before"
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI chapter10 build/tests/chapter10_test > $W/build.txt 2>&1; log "  after rc=$?, warnings: $(grep -ci warning $W/build.txt)"
(cd .carry/before && make -j16 ARCH=sm_90 chapter10 > $W/build-before.txt 2>&1); log "  before rc=$?"
cp .carry/before/chapter10 /tmp/ch10_before
log "chapter 10 tests (all)"
timeout 200 stdbuf -oL build/tests/chapter10_test > $W/ch10-tests.txt 2>&1; log "  rc=$?: $(tail -n 2 $W/ch10-tests.txt | tr '\n' ' ')"
log "before/after"
{ for round in 1 2; do for v in before after; do
    bin=./chapter10; [ $v = before ] && bin=/tmp/ch10_before
    for a in "--seq 32768 --page-sizes 16,32,64,256" "--seq 32768 --q-len 4 --page-sizes 64" "--seq 8192 --page-sizes 64" "--seq 131072 --page-sizes 64" "--batch 64 --seq 4096 --page-sizes 64"; do
      echo "### [$v round $round] ladder $a"
      timeout 90 $bin --ladder $a --check-rows 64 2>&1 | sed -n '/^kernel  /,$p'
    done
  done; done; } > $W/ch10-before-after.txt 2>&1; log "  done"
log "bench_decoding"
timeout 200 tools/bench_decoding.sh $W/bench10 > $W/bench-decoding.txt 2>&1; log "  rc=$?"
timeout 60 ./chapter10 --sweep --batch 64 --seq 4096 --no-check > $W/ch10-sweep-b64.txt 2>&1; log "  sweep B=64 rc=$?"
log "sanitizer"
left=$((585 - (SECONDS - T0)))
SANITIZE_JOBS=4 timeout $left tools/sanitize.sh build/tests/chapter10_test > $W/ch10-sanitize.txt 2>&1; log "  rc=$?"
cp build/tests/chapter10_test.*.log $W/ 2>/dev/null
log "end"
