#!/usr/bin/env bash
# Device call 7 (third session of 2026-11-26): chapter 10's split heuristic without a second wave
# (plan_splits: the smallest chunk of whole tiles whose blocks fit the SMs) against the committed
# one (the HEAD before it, built from .carry/before), alternately, on the shapes whose plan changes
# (N = 131072; the mixed batch 1, 17, 4097, 100000) and on two whose plan does not; then all of
# chapter 10's tests. Everything lands in $OUT/call7.tar.gz.
set -u -o pipefail
W=/tmp/call7; mkdir -p $W
CI=$PWD/.deps/include
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call7.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI chapter10 build/tests/chapter10_test > $W/build.txt 2>&1; log "after rc=$?, warnings: $(grep -ci warning $W/build.txt)"
(cd .carry/before && make -j16 ARCH=sm_90 chapter10 > $W/build-before.txt 2>&1); log "before rc=$?"
cp .carry/before/chapter10 /tmp/ch10_before
{ for round in 1 2 3; do for v in before after; do
    bin=./chapter10; [ $v = before ] && bin=/tmp/ch10_before
    for a in "--kernel 5 --seq 131072" "--kernel 3 --seq 131072" "--kernel 5 --batch 4 --cache-lens 1,17,4097,100000 --check-rows 512" \
             "--kernel 5 --seq 32768" "--kernel 5 --seq 8192"; do
      echo "### [$v round $round] $a"
      timeout 60 $bin $a --repeat 20 2>&1 | grep -E "^kernel |PASS|FAIL|time "
    done
  done; done; } > $W/ch10-heuristic.txt 2>&1; log "runs done"
timeout 60 ./chapter10 --ladder --seq 131072 --check-rows 64 --page-sizes 64 > $W/ch10-ladder-131072.txt 2>&1; log "ladder 131072 rc=$?"
timeout 200 stdbuf -oL build/tests/chapter10_test > $W/ch10-tests.txt 2>&1; log "tests rc=$?: $(tail -n 2 $W/ch10-tests.txt | tr '\n' ' ')"
log "end"
