#!/usr/bin/env bash
# Device call 2 (third session of 2026-11-26): an experiment, not course code. Chapter 9's step 6
# with part of the softmax's exponentials computed on the FMA pipe (a degree-5 polynomial for
# 2^x, fa::poly_exp2) instead of MUFU.EX2: every FA_POLY_EVERY-th column pair of a thread's
# scores (0: none, the course's kernel). The tree is .carry/exp (main at 444675d plus the
# experiment's two edits). Checked (2x rule) and timed at D = 64 and 128; ncu pipes at D = 64.
set -u -o pipefail
W=/tmp/call2; mkdir -p $W/ncu
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call2.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
cd .carry/exp
for K in 0 4 2 1; do
  make -j16 ARCH=sm_90 BUILD=/tmp/b$K EXTRA_NVCCFLAGS=-DFA_POLY_EVERY=$K chapter9 > $W/build-$K.txt 2>&1; log "build K=$K rc=$?"
  cp chapter9 /tmp/ch9_p$K
done
for round in 1 2; do for K in 0 4 2 1; do
  for a in "--dim 64 --seq 8192 --batch 2 --heads 32 --tiles 4" "--dim 64 --seq 8192 --batch 2 --heads 32 --tiles 5" \
           "--dim 64 --seq 4096 --batch 4 --heads 32 --causal --tiles 4" "--dim 64 --seq 16384 --batch 1 --heads 32 --tiles 4" \
           "--dim 128 --seq 8192 --batch 2 --heads 16"; do
    echo "### K=$K round $round: ./chapter9 --kernel 6 $a --repeat 10"
    timeout 60 /tmp/ch9_p$K --kernel 6 $a --repeat 10 2>&1 | grep -E "PASS|FAIL|TF/s|error|rel" | head -8
  done
done; done > $W/runs.txt 2>&1; log "runs done"
PIPES='sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum'
for K in 0 4 2 1; do
  timeout 60 ncu --kernel-name regex:hopper_forward --launch-skip 2 --launch-count 1 --metrics "$PIPES" \
    /tmp/ch9_p$K --kernel 6 --tiles 4 --no-check --seq 8192 --batch 1 --heads 32 --dim 64 --repeat 3 > $W/ncu/K$K-D64.txt 2>&1
done; log "ncu done"
log "end"
