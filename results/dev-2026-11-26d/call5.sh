#!/usr/bin/env bash
# Device call 5 (session of 2026-11-26, 20:12 UTC on): chapter 8 with step 6's new candidates
# (the working tree of this call: c2 Sᵀ of the whole pass, c3/c4 loads one k-step ahead; step 6's
# default c4 at D = 128, c1 at D = 64). `make bench` for chapter 8 (the README results table and
# figure), step 6 in fp16 at the FA2 shapes (the bench's fp16 run times kernel 5 only), PyTorch's
# FA2 and cuDNN backward and training step in bf16 and fp16, and the speedup over chapter 6's fp32
# backward with a training step, checked (2x rule). Everything lands in $OUT/call5.tar.gz.
set -u -o pipefail
W=/tmp/call5; mkdir -p $W
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call5.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
make -j16 ARCH=sm_90 chapter5 chapter8 > $W/build.txt 2>&1; log "build rc=$?, warnings: $(grep -ci warning $W/build.txt)"
timeout 330 make bench ARCH=sm_90 BENCH_CHAPTERS=8 BENCH_OUT=$W/nvidia-h200-2026-11-26-ch8.csv > $W/bench.log 2>&1; log "bench rc=$?: $(tail -n 1 $W/bench.log)"
{ for D in 64 128; do for N in 2048 4096 8192; do for c in "" "--causal"; do
    a="--dtype fp16 --kernel 6 --no-check --dq atomic --seq $N --batch $((16384 / N)) --heads $((2048 / D)) --dim $D $c --repeat 10"
    echo "### ./chapter8 $a"; timeout 30 ./chapter8 $a 2>&1
  done; done; done
} > $W/ch8-k6-fp16.txt 2>&1; log "k6 fp16 done"
for dt in bf16 fp16; do
  timeout 150 python3 tools/pytorch_backward.py --dtype $dt --dims 64 128 --seqs 2048 4096 8192 --causal 0 1 --train 2>&1 | grep -v Warning > $W/pytorch-$dt.txt; log "pytorch $dt rc=$?"
done
for a in "--kernel 6 --seq 8192 --batch 2 --heads 16 --dim 128" "--kernel 5 --seq 8192 --batch 2 --heads 32 --dim 64"; do
  echo "### ./chapter8 $a --fp32 --train --repeat 5"; timeout 120 ./chapter8 $a --fp32 --train --repeat 5 2>&1
done > $W/ch8-vs-ch6-train.txt 2>&1; log "fp32 + train done"
log "end"
