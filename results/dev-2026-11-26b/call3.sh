#!/usr/bin/env bash
# Device call 3 (second session of 2026-11-26): chapter 8 beside PyTorch's backward at N = 2048,
# 4096, 8192, causal and not (the default c9), with Nsight Compute on its dK/dV kernel; chapter 7 at
# D = 32/96/256 beside PyTorch and its ladder there; chapter 4's M sweep; chapter 7's sanitizer.
# Everything lands in $OUT/call3.tar.gz.
set -u -o pipefail
W=/tmp/call3; mkdir -p $W
CI=$PWD/.deps/include
M=(make ARCH=sm_90 CATCH2_INCLUDE=$CI)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call3.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; git log -1 --format=%h; } > $W/env.txt 2>&1
log "build"
"${M[@]}" -j16 chapter4 chapter7 chapter8 build/tests/chapter07_test > $W/build.txt 2>&1; log "  rc=$?, warnings: $(grep -ci warning $W/build.txt)"
log "chapter 8 beside PyTorch"
{ for D in 64 128; do for n in 2048 4096 8192; do for c in "" --causal; do
  echo "### ./chapter8 --no-check --dq atomic --seq $n --batch $((16384 / n)) --heads $((2048 / D)) --dim $D $c --repeat 10"
  timeout 30 ./chapter8 --no-check --dq atomic --seq $n --batch $((16384 / n)) --heads $((2048 / D)) --dim $D $c --repeat 10 2>&1 | grep -E "TF/s|^kernel|error"
done; done; done
  echo "### python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 2048 4096 8192 --causal 0 1"
  timeout 120 python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 2048 4096 8192 --causal 0 1 2>&1
} > $W/ch8-vs-pytorch.txt 2>&1; log "  done"
log "ncu chapter 8"
timeout 60 ncu --kernel-name regex:dkdv_kernel --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy \
  --section WarpStateStats --metrics "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_op_global_red.sum" \
  ./chapter8 --no-check --dq atomic --seq 8192 --batch 2 --heads 16 --dim 128 --repeat 3 > $W/ch8-ncu-D128.txt 2>&1; log "  rc=$?"
log "chapter 7 beside PyTorch at D = 32/96/256"
timeout 150 python3 tools/compare_pytorch.py --chapters 7 --dims "32 96 256" --seq 8192 --causal "0 1" --repeat 10 \
  --out $W/ch7-dims.csv > $W/ch7-dims-vs-pytorch.txt 2>&1; log "  rc=$?"
log "chapter 7 ladders at D = 32/96/256"
for D in 32 96 256; do
  echo "### ./chapter7 --ladder --bench --seq 8192 --batch 2 --heads $((2048 / D)) --dim $D --repeat 10"
  timeout 45 stdbuf -oL ./chapter7 --ladder --bench --seq 8192 --batch 2 --heads $((2048 / D)) --dim $D --repeat 10 2>&1
done > $W/ch7-ladders.txt 2>&1; log "  done"
log "chapter 4 M sweep"
timeout 90 tools/ch4_m_sweep.sh > $W/ch4-m-sweep.txt 2>&1; log "  rc=$?"
log "chapter 7 sanitizer"
left=$((590 - (SECONDS - T0)))
SANITIZE_JOBS=4 timeout $left tools/sanitize.sh build/tests/chapter07_test > $W/ch7-sanitize.txt 2>&1; log "  rc=$?"
log "end"
