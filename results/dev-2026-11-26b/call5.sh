#!/usr/bin/env bash
# Device call 5 (second session of 2026-11-26): chapter 9 with the persistent-grid candidates of
# step 6: all tests, the sweep at N = 8192 and at short N (1024, 2048), causal and not, the tensor
# pipe's utilization of steps 3, 5, 6 (ncu), then compute-sanitizer's four tools on the small grid.
# Everything lands in $OUT/call5.tar.gz.
set -u -o pipefail
W=/tmp/call5; mkdir -p $W/ncu
CI=$PWD/.deps/include
M=(make ARCH=sm_90 CATCH2_INCLUDE=$CI)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call5.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
log "build"
"${M[@]}" -j16 chapter9 build/tests/chapter09_test > $W/build.txt 2>&1; log "  rc=$?, warnings: $(grep -ci warning $W/build.txt)"
log "chapter 9 tests (all)"
timeout 150 stdbuf -oL build/tests/chapter09_test > $W/ch9-tests.txt 2>&1; log "  rc=$?: $(tail -n 2 $W/ch9-tests.txt | tr '\n' ' ')"
log "sweeps"
for D in 128 64; do for n in 8192 2048 1024; do for c in "" --causal; do
  echo "### ./chapter9 --sweep --no-check --seq $n --batch $((16384 / n)) --heads $((2048 / D)) --dim $D $c --repeat 10"
  timeout 40 stdbuf -oL ./chapter9 --sweep --no-check --seq $n --batch $((16384 / n)) --heads $((2048 / D)) --dim $D $c --repeat 10 2>&1 | sed -n '/^kernel  /,$p'
done; done; done > $W/ch9-sweeps.txt 2>&1; log "  done"
for kd in "3 128" "5 128" "6 128" "3 64" "6 64"; do
  set -- $kd
  timeout 30 ncu --kernel-name regex:hopper_forward --launch-skip 2 --launch-count 1 \
    --metrics sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,gpu__time_duration.sum \
    ./chapter9 --kernel $1 --no-check --seq 8192 --batch 1 --heads $((2048 / $2)) --dim $2 --repeat 3 > $W/ncu/k$1-D$2.txt 2>&1
done; log "ncu done"
log "sanitizer"
left=$((590 - (SECONDS - T0)))
SANITIZE_JOBS=4 timeout $left tools/sanitize.sh build/tests/chapter09_test > $W/ch9-sanitize.txt 2>&1; log "  rc=$?"
cp build/tests/chapter09_test.*.log $W/ 2>/dev/null
log "end"
