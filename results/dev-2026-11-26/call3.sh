#!/usr/bin/env bash
# Device call 3 of 2026-11-26 (run from the repo root): chapter 10's tests with every failure shown,
# the forward chapters 7 and 9 beside PyTorch (flash, cuDNN, ...) at every head dim chapter 7 takes,
# chapter 8's ladder and sweep beside PyTorch's backward, chapter 8's tests on the small grid.
set -u -o pipefail
CI=$PWD/.deps/include
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
M=(make ARCH=sm_$cc CATCH2_INCLUDE=$CI)
T0=$SECONDS; END=${END:-570}
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
left() { echo $((END - (SECONDS - T0))); }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; python3 -c 'import torch; print("torch", torch.__version__)'; } >> $OUT/timeline.txt 2>&1
log "build"; "${M[@]}" -j16 all tests > /tmp/build.txt 2>&1; log "  rc=$? (warnings: $(grep -ci warning /tmp/build.txt))"
log "chapter 10 tests"
timeout 60 build/tests/chapter10_test > $OUT/ch10-tests.txt 2>&1; log "  rc=$?"
log "compare_pytorch, chapters 7 and 9"
PYTHONUNBUFFERED=1 timeout 200 python3 tools/compare_pytorch.py --chapters "7 9" --dims "128 64 256 96 32" \
  --seq 8192 --causal "0 1" --repeat 10 --out $OUT/pytorch-fwd.csv > $OUT/pytorch-fwd.txt 2>&1; log "  rc=$?"
log "chapter 8: ladder, sweeps"
{ for D in 128 64; do h=$((2048 / D)); echo "### ./chapter8 --ladder --train --seq 4096 --batch 4 --heads $((h / 2)) --dim $D --repeat 10"
    timeout 60 ./chapter8 --ladder --train --seq 4096 --batch 4 --heads $((h / 2)) --dim $D --repeat 10 2>&1 | grep -v "^  "
    echo "### ./chapter8 --sweep --no-check --seq 8192 --batch 2 --heads $h --dim $D --repeat 10"
    timeout 40 ./chapter8 --sweep --no-check --seq 8192 --batch 2 --heads $h --dim $D --repeat 10 2>&1 | grep -v "^  "; done
} > $OUT/ch8-bench.txt 2>&1; log "  done"
log "chapter 8 beside PyTorch's backward"
PYTHONUNBUFFERED=1 timeout 120 python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 2048 8192 \
  --causal 0 1 --train > $OUT/ch8-pytorch.txt 2>&1; log "  rc=$?"
log "chapter 8 tests (FA_TEST_SMALL=1), $(left) s left"
FA_TEST_SMALL=1 timeout $(($(left) - 3)) stdbuf -oL build/tests/chapter08_test -d yes > $OUT/ch8-tests.txt 2>&1; log "  rc=$?"
log "end"
