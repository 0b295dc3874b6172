#!/usr/bin/env bash
# Device call 6 (session of 2026-11-26, 20:12 UTC on): an experiment on the tree of call 5 plus
# call6-dq-width.diff: step 6's c4 (D = 128) with float2 (c5) and scalar (c6) dQ atomics, which
# need no shuffles (call 2's profile: c2 issues 16% more LSU instructions than FA2's kernel, FA2
# adds dQ one float at a time). The sweep at the three D = 128 shapes where step 6 misses FA2,
# FA2 in the same call. Everything lands in $OUT/call6.tar.gz.
set -u -o pipefail
W=/tmp/call6; mkdir -p $W
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call6.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
make -j16 ARCH=sm_90 chapter8 > $W/build.txt 2>&1; log "build rc=$?, warnings: $(grep -ci warning $W/build.txt)"
{ for a in "--seq 8192 --batch 2 --heads 16 --dim 128" "--seq 4096 --batch 4 --heads 16 --dim 128" \
           "--seq 8192 --batch 2 --heads 16 --dim 128 --causal"; do
    echo "### ./chapter8 --sweep --no-check --dq atomic $a --repeat 10"
    timeout 60 ./chapter8 --sweep --no-check --dq atomic $a --repeat 10 2>&1 | sed -n '/^kernel  /,$p'
  done
  for c in 5 6; do
    echo "### ./chapter8 --kernel 6 --tiles $c --dq atomic --seq 1024 --batch 2 --heads 3 --dim 128 --causal (checked)"
    timeout 60 ./chapter8 --kernel 6 --tiles $c --dq atomic --seq 1024 --batch 2 --heads 3 --dim 128 --causal 2>&1 | grep -E "PASS|FAIL"
  done
  echo "### python3 tools/pytorch_backward.py --dtype bf16 --dims 128 --seqs 4096 8192 --causal 0 1"
  timeout 120 python3 tools/pytorch_backward.py --dtype bf16 --dims 128 --seqs 4096 8192 --causal 0 1 2>&1 | grep -v Warning
} > $W/ch8-sweeps.txt 2>&1; log "sweeps done"
log "end"
