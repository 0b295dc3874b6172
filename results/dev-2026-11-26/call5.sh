#!/usr/bin/env bash
# Device call 5 of 2026-11-26 (run from the repo root): chapter 8's tuned backward (default c9) at
# N = 2048, 4096, 8192, D = 64 and 128, causal and not, beside PyTorch's flash and cuDNN backward in
# the same call; chapter 7 at D = 32, 96, 256 (new D = 32 default) beside PyTorch.
set -u -o pipefail
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
M=(make ARCH=sm_$cc)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; python3 -c 'import torch; print("torch", torch.__version__)'; } >> $OUT/timeline.txt 2>&1
log "build chapter7 chapter8"; "${M[@]}" -j16 chapter7 chapter8 > $OUT/build.txt 2>&1; log "  rc=$?"
log "chapter 8 (kernel 5, default tiles, --dq both)"
for D in 64 128; do for n in 2048 4096 8192; do for c in "" --causal; do
  echo "### ./chapter8 --no-check --seq $n --batch $((16384 / n)) --heads $((2048 / D)) --dim $D $c --repeat 10"
  timeout 30 ./chapter8 --no-check --seq $n --batch $((16384 / n)) --heads $((2048 / D)) --dim $D $c --repeat 10 --csv $OUT/ch8.csv 2>&1 | grep -E "^kernel|time"
done; done; done > $OUT/ch8.txt 2>&1; log "  done"
log "PyTorch backward"
PYTHONUNBUFFERED=1 timeout 120 python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 2048 4096 8192 \
  --causal 0 1 > $OUT/ch8-pytorch.txt 2>&1; log "  rc=$?"
log "compare_pytorch chapter 7, D = 32, 96, 256"
PYTHONUNBUFFERED=1 timeout 150 python3 tools/compare_pytorch.py --chapters 7 --dims "32 96 256" --seq 8192 \
  --causal "0 1" --repeat 10 --out $OUT/ch7-pytorch.csv > $OUT/ch7-pytorch.txt 2>&1; log "  rc=$?"
log "end"
