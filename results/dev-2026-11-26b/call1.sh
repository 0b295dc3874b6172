#!/usr/bin/env bash
# Device call 1 of the second session of 2026-11-26 (run from the repo root): chapter 9 with step 6's
# new candidates (three consumers, consumers without turns): build, all tests, the sweep at D = 128
# and 64, the ladder, and Nsight Compute on steps 3, 5 and 6.
set -u -o pipefail
CI=$PWD/.deps/include
M=(make ARCH=sm_90 CATCH2_INCLUDE=$CI)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; git log -1 --format=%h; } > $OUT/env.txt 2>&1
log "build"
"${M[@]}" -j16 chapter9 build/tests/chapter09_test > $OUT/build.txt 2>&1; log "  rc=$?, warnings: $(grep -ci warning $OUT/build.txt)"
log "chapter 9 sweep"
for a in "--heads 16 --dim 128" "--heads 32 --dim 64" "--heads 16 --dim 128 --causal" "--heads 32 --dim 64 --causal"; do
  echo "### ./chapter9 --sweep --seq 8192 --batch 2 $a --repeat 10"
  timeout 60 stdbuf -oL ./chapter9 --sweep --seq 8192 --batch 2 $a --repeat 10 2>&1
done > $OUT/ch9-sweep.txt 2>&1; log "  done"
log "chapter 9 tests (all)"
timeout 240 stdbuf -oL build/tests/chapter09_test > $OUT/ch9-tests.txt 2>&1; log "  rc=$?: $(tail -n 2 $OUT/ch9-tests.txt | tr '\n' ' ')"
log "chapter 9 ladder"
for D in 128 64; do
  echo "### ./chapter9 --ladder --bench --seq 8192 --batch 4 --heads $((2048 / D)) --dim $D --repeat 10"
  timeout 60 stdbuf -oL ./chapter9 --ladder --bench --seq 8192 --batch 4 --heads $((2048 / D)) --dim $D --repeat 10 2>&1
done > $OUT/ch9-ladder.txt 2>&1; log "  done"
mkdir -p $OUT/ncu
ncu --query-metrics 2>/dev/null | grep -i -E "gmma|pipe_tensor" > $OUT/ncu/metric-names.txt
for kd in "3 128" "5 128" "6 128" "3 64" "6 64"; do
  set -- $kd
  [ $((SECONDS - T0)) -gt 520 ] && { log "ncu $1 D=$2 skipped (time)"; continue; }
  log "ncu kernel $1 D=$2"
  timeout 60 ncu --kernel-name regex:hopper_forward --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    --metrics "regex:^sm__pipe_tensor_op_gmma.*pct_of_peak_sustained_active$,regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__issue_active.avg.pct_of_peak_sustained_active" \
    ./chapter9 --kernel $1 --no-check --seq 8192 --batch 1 --heads $((2048 / $2)) --dim $2 --repeat 3 > $OUT/ncu/k$1-D$2.txt 2>&1
  log "  rc=$?"
done
log "end"
