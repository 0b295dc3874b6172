#!/usr/bin/env bash
# Device call 3 (session of 2026-11-26, 20:12 UTC on): chapter 8, step 6 with FA2's order of
# loads and products (mma_prefetched: k-step kk + 1's fragments read before kk's products), an
# experiment on the working tree of afae175 plus call3-prefetch.diff. Step 6's candidates now:
# c0, c1 as before, c2 = c0 with Sᵀ of the whole 32-query pass (call 1), c3 = c0 prefetched,
# c4 = c2 prefetched (the 16-warp candidate of call 1 is gone). Their [gpu] tests on the small
# grid, the sweep beside c9, FA2 in the same call, Nsight Compute of c3 and c4 at D = 128.
set -u -o pipefail
W=/tmp/call3; mkdir -p $W
CI=$PWD/.deps/include
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call3.tar.gz .; cp $W/timeline.txt $OUT/; }
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
for t in 3 4; do
  timeout 60 ncu --kernel-name regex:dkdv --launch-skip 2 --launch-count 1 \
    --metrics gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio$ \
    ./chapter8 --kernel 6 --tiles $t --dq atomic --no-check --seq 8192 --batch 1 --heads 16 --dim 128 --repeat 3 > $W/ch8-ncu-k6-c$t-D128.txt 2>&1; log "ncu k6 c$t rc=$?"
done
log "end"
