#!/usr/bin/env bash
# Device call 2 (second session of 2026-11-26): chapter 9 with step 6's new default at D = 64 (three
# consumers, no turns): tests, PyTorch at N = 4096/8192/16384, the D = 64 ladder, Nsight Compute of
# steps 3, 5, 6. Everything lands in $OUT/call2.tar.gz (the device returns at most 8 files).
set -u -o pipefail
W=/tmp/call2; mkdir -p $W/ncu
CI=$PWD/.deps/include
M=(make ARCH=sm_90 CATCH2_INCLUDE=$CI)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call2.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; git log -1 --format=%h; } > $W/env.txt 2>&1
log "build"
"${M[@]}" -j16 chapter7 chapter9 build/tests/chapter09_test > $W/build.txt 2>&1; log "  rc=$?, warnings: $(grep -ci warning $W/build.txt)"
log "chapter 9 tests (all)"
timeout 150 stdbuf -oL build/tests/chapter09_test > $W/ch9-tests.txt 2>&1; log "  rc=$?: $(tail -n 2 $W/ch9-tests.txt | tr '\n' ' ')"
log "compare_pytorch"
timeout 240 python3 tools/compare_pytorch.py --chapters "7 9" --dims "128 64" --seq "4096 8192 16384" --causal "0 1" \
  --repeat 10 --out $W/pytorch-fwd.csv > $W/pytorch-fwd.txt 2>&1; log "  rc=$?"
log "ladder D=64"
for c in "" --causal; do
  echo "### ./chapter9 --ladder --bench --seq 8192 --batch 4 --heads 32 --dim 64 $c --repeat 10"
  timeout 45 stdbuf -oL ./chapter9 --ladder --bench --seq 8192 --batch 4 --heads 32 --dim 64 $c --repeat 10 2>&1
done > $W/ch9-ladder-d64.txt 2>&1; log "  done"
names=$(ncu --query-metrics --chip gh100 2>/dev/null | awk '{print $1}')
echo "$names" | grep -i -E "gmma|tensor|stalled" > $W/ncu/metric-names.txt
mets=$(echo "$names" | grep -E "^sm__pipe_tensor_op_gmma.*cycles_active$" | sed 's/$/.avg.pct_of_peak_sustained_active/' | paste -sd,)
mets="$mets,$(echo "$names" | grep -E "^smsp__average_warps_issue_stalled_.*_per_issue_active$" | sed 's/$/.ratio/' | paste -sd,)"
mets="${mets#,}"; echo "$mets" > $W/ncu/metrics-used.txt
for kd in "6 128" "3 128" "6 64" "3 64" "5 128"; do
  set -- $kd
  [ $((SECONDS - T0)) -gt 540 ] && { log "ncu $1 D=$2 skipped (time)"; continue; }
  log "ncu kernel $1 D=$2"
  a=(--kernel-name regex:hopper_forward --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats)
  timeout 45 ncu "${a[@]}" ${mets:+--metrics "$mets"} ./chapter9 --kernel $1 --no-check --seq 8192 --batch 1 --heads $((2048 / $2)) \
    --dim $2 --repeat 3 > $W/ncu/k$1-D$2.txt 2>&1
  log "  rc=$?"
done
log "end"
