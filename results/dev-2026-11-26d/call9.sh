#!/usr/bin/env bash
# Device call 9 (session of 2026-11-26, 20:12 UTC on): the tree of call 7. Chapter 8's kernels 5
# (c9) and 6 (c4) in bf16 beside PyTorch's FA2 and cuDNN backward in the same call, at the six
# D = 128 shapes of the target (calls 5 and 7 timed them in different calls from PyTorch's).
set -u -o pipefail
W=/tmp/call9; mkdir -p $W
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call9.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
make -j16 ARCH=sm_90 chapter8 > $W/build.txt 2>&1; log "build rc=$?"
{ for N in 2048 4096 8192; do for c in "" "--causal"; do for k in 5 6; do
    a="--dtype bf16 --kernel $k --no-check --dq atomic --seq $N --batch $((16384 / N)) --heads 16 --dim 128 $c --repeat 10"
    echo "### ./chapter8 $a"; timeout 30 ./chapter8 $a 2>&1 | grep -E "^kernel|^  time"
  done; done; done
  echo "### python3 tools/pytorch_backward.py --dtype bf16 --dims 128 --seqs 2048 4096 8192 --causal 0 1"
  timeout 100 python3 tools/pytorch_backward.py --dtype bf16 --dims 128 --seqs 2048 4096 8192 --causal 0 1 2>&1 | grep -v Warning
} > $W/ch8-vs-fa2-d128-bf16.txt 2>&1; log "done"
log "end"
