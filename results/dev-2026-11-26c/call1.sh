#!/usr/bin/env bash
# Device call 1 (third session of 2026-11-26): where the time goes.
# Chapter 9 at D = 64 and 128: every pipe's utilization and the stall reasons of step 6 (ncu), and
# step 6's candidates at the shortest causal D = 64 shape of the PyTorch comparison.
# Chapter 10: kernel 3 against kernel 5 at q_len = 4 (ladder, sweep, ncu), every decode kernel of
# the N = 32768 ladder with a paged kernel 5 (ncu: time, DRAM, stalls), and N = 256 inside ncu.
# Everything lands in $OUT/call1.tar.gz.
set -u -o pipefail
W=/tmp/call1; mkdir -p $W/ncu
M=(make ARCH=sm_90)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call1.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
log "build"
"${M[@]}" -j16 chapter9 chapter10 > $W/build.txt 2>&1; log "  rc=$?, warnings: $(grep -ci warning $W/build.txt)"
PIPES='regex:sm__inst_executed_pipe_[a-z_]*\.avg\.pct_of_peak_sustained_active$,regex:sm__pipe_[a-z_]*_cycles_active\.avg\.pct_of_peak_sustained_active$,regex:smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio$,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active'
for D in 64 128; do
  timeout 60 ncu --kernel-name regex:hopper_forward --launch-skip 2 --launch-count 1 --metrics "$PIPES" \
    ./chapter9 --kernel 6 --no-check --seq 8192 --batch 1 --heads $((2048 / D)) --dim $D --repeat 3 > $W/ncu/ch9-k6-D$D-pipes.txt 2>&1
  log "  ncu ch9 D=$D rc=$?"
done
timeout 60 ncu --kernel-name regex:hopper_forward --launch-skip 2 --launch-count 1 --metrics "$PIPES" \
    ./chapter9 --kernel 6 --no-check --seq 4096 --batch 1 --heads 32 --dim 64 --causal --repeat 3 > $W/ncu/ch9-k6-D64-causal4096-pipes.txt 2>&1
{ for c in "" --causal; do
    echo "### ./chapter9 --sweep --no-check --seq 4096 --batch 4 --heads 32 --dim 64 $c --repeat 10"
    timeout 60 ./chapter9 --sweep --no-check --seq 4096 --batch 4 --heads 32 --dim 64 $c --repeat 10 2>&1 | sed -n '/^kernel  /,$p'
  done; } > $W/ch9-sweep-d64-n4096.txt 2>&1; log "ch9 sweep done"
log "chapter 10"
timeout 90 ./chapter10 --ladder --q-len 4 --seq 32768 --check-rows 64 --page-sizes 0 > $W/ch10-qlen4-ladder.txt 2>&1; log "  ladder q4 rc=$?"
timeout 90 ./chapter10 --sweep --q-len 4 --seq 32768 --no-check > $W/ch10-qlen4-sweep.txt 2>&1; log "  sweep q4 rc=$?"
STALL='gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio$,launch__grid_size,launch__registers_per_thread,smsp__inst_executed.sum'
for k in 3 5; do
  timeout 60 ncu --kernel-name regex:"decode_kernel|combine_kernel" --launch-skip 2 --launch-count 2 --metrics "$STALL" \
    ./chapter10 --kernel $k --q-len 4 --seq 32768 --no-check --repeat 1 > $W/ncu/ch10-k$k-q4.txt 2>&1; log "  ncu k$k q4 rc=$?"
done
timeout 150 ncu --kernel-name regex:"decode_kernel|combine_kernel" --metrics "$STALL" \
    ./chapter10 --ladder --seq 32768 --no-check --page-sizes 64 --repeat 1 > $W/ncu/ch10-ladder-32768.txt 2>&1; log "  ncu ladder rc=$?"
timeout 60 ncu --kernel-name regex:decode_kernel --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size \
    ./chapter10 --ladder --seq 256 --no-check --page-sizes 0 --repeat 1 > $W/ncu/ch10-ladder-256.txt 2>&1; log "  ncu 256 rc=$?"
timeout 60 ./chapter10 --ladder --seq 32768 --check-rows 64 --page-sizes 64 > $W/ch10-ladder-32768.txt 2>&1; log "  ladder 32768 rc=$?"
log "end"
