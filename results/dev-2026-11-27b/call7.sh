#!/usr/bin/env bash
# Device call 7 (session of 2026-11-27, 05:55 UTC on): the training step (chapter 7's forward +
# chapter 8's default backward, step 6) beside PyTorch's flash forward + backward in ONE call, at
# both head dims, N = 8192, bf16 (the earlier D = 128 pair came from two calls); also chapter 6's
# fp32 backward beside step 6 (--fp32). Each run alone on the GPU, one after the other.
set -u -o pipefail
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; python3 -c "import torch; print('torch', torch.__version__)"; date -u; } > $OUT/env.txt 2>&1
make -j16 ARCH=sm_90 chapter8 > /tmp/build.txt 2>&1; rc=$?
{ echo "### build rc=$rc"; grep -iE "warning|error" /tmp/build.txt; } >> $OUT/env.txt
log "build rc=$rc, warnings: $(grep -ci warning /tmp/build.txt)"
for D in 128 64; do
  a="--seq 8192 --batch 2 --heads $((2048 / D)) --dim $D --dq atomic --fp32 --train --repeat 10"
  { echo "### ./chapter8 $a"; timeout 120 ./chapter8 $a; } > $OUT/ch8-train-d$D.txt 2>&1
  log "./chapter8 D=$D rc=$?: $(grep -E 'training step|x chapter 6' $OUT/ch8-train-d$D.txt | tr -s ' ' | tr '\n' ' ')"
done
c="python3 tools/pytorch_backward.py --dtype bf16 --dims 128 64 --seqs 8192 --causal 0 --train"
{ echo "### $c"; timeout 150 $c 2>&1 | grep -v Warning; } > $OUT/pytorch-train.txt 2>&1
log "pytorch rc=$?: $(grep flash $OUT/pytorch-train.txt | tr -s ' ' | tr '\n' ' ')"
log "end"
