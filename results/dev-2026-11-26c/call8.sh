#!/usr/bin/env bash
# Device call 8 (third session of 2026-11-26): chapter 8's new step 6 (the dK/dV kernel in
# FlashAttention-2's warp layout, commit f7d8f11 of branch ch8-warp32, carried as .carry/ch8):
# its [gpu] tests, the sweep of steps 5 and 6 at the shapes where c9 missed FA2 and at two where
# it did not, FA2's backward (tools/pytorch_backward.py) in the same call, and Nsight Compute of
# step 6's dK/dV kernel at D = 128, N = 8192. Everything lands in $OUT/call8.tar.gz.
set -u -o pipefail
W=/tmp/call8; mkdir -p $W
CI=$PWD/.deps/include
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call8.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
cd .carry/ch8
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI chapter8 build/tests/chapter08_test > $W/build.txt 2>&1; log "build rc=$?, warnings: $(grep -ci warning $W/build.txt)"
FA_TEST_SMALL=1 timeout 120 stdbuf -oL build/tests/chapter08_test "[v6]" > $W/ch8-tests-v6-small.txt 2>&1; log "v6 small tests rc=$?: $(tail -n 2 $W/ch8-tests-v6-small.txt | tr '\n' ' ')"
{ for a in "--seq 8192 --batch 2 --heads 16 --dim 128" "--seq 4096 --batch 4 --heads 16 --dim 128" "--seq 2048 --batch 8 --heads 16 --dim 128" \
           "--seq 4096 --batch 4 --heads 16 --dim 128 --causal" "--seq 8192 --batch 2 --heads 32 --dim 64" "--seq 8192 --batch 2 --heads 16 --dim 128 --causal" \
           "--seq 4096 --batch 4 --heads 32 --dim 64"; do
    echo "### ./chapter8 --sweep --no-check --dq atomic $a --repeat 10"
    timeout 60 ./chapter8 --sweep --no-check --dq atomic $a --repeat 10 2>&1 | sed -n '/^kernel  /,$p'
  done
  echo "### python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 2048 4096 8192 --causal 0 1"
  timeout 120 python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 2048 4096 8192 --causal 0 1 2>&1 | grep -v Warning
} > $W/ch8-sweeps.txt 2>&1; log "sweeps done"
timeout 60 ncu --kernel-name regex:dkdv --launch-skip 2 --launch-count 1 \
  --metrics gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,regex:smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio$ \
  ./chapter8 --kernel 6 --dq atomic --no-check --seq 8192 --batch 1 --heads 16 --dim 128 --repeat 3 > $W/ch8-ncu-k6-D128.txt 2>&1; log "ncu k6 rc=$?"
timeout 60 ncu --kernel-name regex:dkdv --launch-skip 2 --launch-count 1 \
  --metrics gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed \
  ./chapter8 --kernel 5 --dq atomic --no-check --seq 8192 --batch 1 --heads 16 --dim 128 --repeat 3 > $W/ch8-ncu-k5-D128.txt 2>&1; log "ncu k5 rc=$?"
log "end"
