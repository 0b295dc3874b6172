#!/usr/bin/env bash
# Device call 4 (session of 2026-11-26, 20:12 UTC on): chapter 8, step 6 with FA2's order of the
# products within a pass (c5 = c4 with Sᵀ first: P's exponentials and its store are independent of
# line 13's products, which follow), an experiment on the working tree of afae175 plus
# call4-sfirst.diff. The [gpu] tests of step 6 on the small grid, the sweep beside c9 and FA2 in
# the same call (no Nsight Compute this time).
set -u -o pipefail
W=/tmp/call4; mkdir -p $W
CI=$PWD/.deps/include
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call4.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI chapter8 build/tests/chapter08_test > $W/build.txt 2>&1; log "build rc=$?, warnings: $(grep -ci warning $W/build.txt)"
FA_TEST_SMALL=1 timeout 100 stdbuf -oL build/tests/chapter08_test "[gpu][v6]" > $W/ch8-tests-v6-small.txt 2>&1; log "v6 small gpu tests rc=$?: $(tail -n 2 $W/ch8-tests-v6-small.txt | tr '\n' ' ')"
{ for a in "--seq 8192 --batch 2 --heads 16 --dim 128" "--seq 4096 --batch 4 --heads 16 --dim 128" \
           "--seq 8192 --batch 2 --heads 16 --dim 128 --causal" "--seq 8192 --batch 2 --heads 32 --dim 64" \
           "--seq 4096 --batch 4 --heads 32 --dim 64"; do
    echo "### ./chapter8 --sweep --no-check --dq atomic $a --repeat 10"
    timeout 60 ./chapter8 --sweep --no-check --dq atomic $a --repeat 10 2>&1 | sed -n '/^kernel  /,$p'
  done
  echo "### python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 4096 8192 --causal 0 1"
  timeout 120 python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 4096 8192 --causal 0 1 2>&1 | grep -v Warning
} > $W/ch8-sweeps.txt 2>&1; log "sweeps done"
log "end"
