#!/usr/bin/env bash
# Device call 4 (session of 2026-11-27): chapter 8 as committed after call 3 (step 6's candidates
# c5–c7: c1, c2, c4 with float2 dQ atomics, defaults c5 at D = 64 and c6 at D = 128). The
# numbers of the README: step 6's sweep at five shapes, the comparison with PyTorch (both dtypes,
# every shape of the issue, same call), chapter 6's fp32 backward beside step 6, and `make bench`
# for chapter 8 at the README table's lengths.
set -u -o pipefail
W=/tmp/call4; mkdir -p $W
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call4.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; python3 -c "import torch; print('torch', torch.__version__)"; date -u; } > $W/env.txt 2>&1
make -j16 ARCH=sm_90 chapter5 chapter6 chapter8 > $W/build.txt 2>&1; log "build rc=$?, warnings: $(grep -ci warning $W/build.txt)"
{ for a in "--seq 8192 --batch 2 --heads 16 --dim 128" "--seq 4096 --batch 4 --heads 16 --dim 128" \
           "--seq 8192 --batch 2 --heads 16 --dim 128 --causal" \
           "--seq 8192 --batch 2 --heads 32 --dim 64" "--seq 4096 --batch 4 --heads 32 --dim 64"; do
    echo "### ./chapter8 --sweep --no-check --dq atomic $a --repeat 10"
    timeout 60 ./chapter8 --sweep --no-check --dq atomic $a --repeat 10 2>&1 | sed -n '/^kernel  /,$p'
  done
} > $W/ch8-sweeps.txt 2>&1; log "sweeps rc=$?"
for dt in bf16 fp16; do
  { for D in 64 128; do for N in 2048 4096 8192; do for c in "" "--causal"; do
      a="--dtype $dt --kernel 6 --no-check --dq atomic --seq $N --batch $((16384 / N)) --heads $((2048 / D)) --dim $D $c --repeat 10"
      echo "### ./chapter8 $a"; timeout 30 ./chapter8 $a 2>&1 | grep -E "^kernel|^  time"
    done; done; done
    echo "### python3 tools/pytorch_backward.py --dtype $dt --dims 64 128 --seqs 2048 4096 8192 --causal 0 1 --train"
    timeout 150 python3 tools/pytorch_backward.py --dtype $dt --dims 64 128 --seqs 2048 4096 8192 --causal 0 1 --train 2>&1 | grep -v Warning
  } > $W/ch8-vs-pytorch-$dt.txt 2>&1; log "ratio $dt done"
done
for D in 128 64; do
  timeout 60 ./chapter8 --kernel 6 --seq 8192 --batch 2 --heads $((2048 / D)) --dim $D --fp32 --train --repeat 5 > $W/ch8-vs-ch6-train-d$D.txt 2>&1; log "fp32 + train D=$D rc=$?"
done
timeout 240 make bench ARCH=sm_90 BENCH_CHAPTERS=8 BENCH_N="1024 8192" BENCH_OUT=$W/nvidia-h200-2026-11-27-ch8.csv > $W/bench.log 2>&1; log "bench rc=$?: $(tail -n 1 $W/bench.log)"
log "end"
