#!/usr/bin/env bash
# Device call 1 of 2026-11-26 (run from the repo root): build for this GPU, chapter 9's tests and
# ladder (steps 4-6 for the first time on a GPU), chapter 7's ladder after the issue 18 refactor
# beside the tree before it (commit 4f626c7, in .carry/before), alternately, one process at a time.
set -u -o pipefail
CI=$PWD/.deps/include
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
M=(make ARCH=sm_$cc CATCH2_INCLUDE=$CI)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $OUT/env.txt 2>&1
log "build (after): ${M[*]} -j16 all tests"
"${M[@]}" -j16 all tests > $OUT/build.txt 2>&1; log "  rc=$?, warnings: $(grep -ci warning $OUT/build.txt)"
log "chapter 9 tests (all, [cpu] and [gpu])"
timeout 200 build/tests/chapter09_test > $OUT/ch9-tests.txt 2>&1; log "  rc=$?: $(tail -n 2 $OUT/ch9-tests.txt | tr '\n' ' ')"
log "chapter 9 ladder"
for D in 128 64; do for c in "" --causal; do
  b=""; [ "$D$c" = 128 ] && b=--bench
  echo "### ./chapter9 --ladder $b --seq 8192 --batch 4 --heads 16 --dim $D $c --repeat 10"
  timeout 60 ./chapter9 --ladder $b --seq 8192 --batch 4 --heads 16 --dim $D $c --repeat 10 2>&1
done; done > $OUT/ch9-ladder.txt 2>&1; log "  done"
log "build (before, 4f626c7): chapter7"
"${M[@]}" -C .carry/before -j16 chapter7 >> $OUT/build.txt 2>&1; log "  rc=$?"
log "chapter 7 ladder, after and before alternately, two rounds"
for r in 1 2; do for t in after before; do for s in "--dim 128" "--dim 64 --causal"; do
  d=.; [ $t = before ] && d=.carry/before
  echo "### round $r, $t: ./chapter7 --ladder --seq 8192 --batch 4 --heads 16 $s --repeat 10"
  (cd $d && timeout 60 ./chapter7 --ladder --seq 8192 --batch 4 --heads 16 $s --repeat 10 --csv $OUT/ladder-$t.csv 2>&1)
done; done; done > $OUT/ch7-ladder.txt 2>&1; log "  done"
log "end"
