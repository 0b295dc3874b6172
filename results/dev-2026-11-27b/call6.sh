#!/usr/bin/env bash
# Device call 6 (session of 2026-11-27, 05:55 UTC on), on call 5's machine: `make bench` for
# chapter 8 at D = 128 and every N, then for chapter 7 at every N (call 3 ran only the table's two
# lengths), each alone on the GPU.
set -u -o pipefail
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
left() { echo $((575 - (SECONDS - T0))); }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $OUT/env.txt 2>&1
make -j16 ARCH=sm_90 chapter5 chapter7 chapter8 > /tmp/build.txt 2>&1; rc=$?
{ echo "### build rc=$rc"; grep -iE "warning|error" /tmp/build.txt; } >> $OUT/env.txt
log "build rc=$rc, warnings: $(grep -ci warning /tmp/build.txt)"
timeout $(left) make bench ARCH=sm_90 BENCH_CHAPTERS=8 BENCH_D=128 \
  BENCH_OUT=$OUT/nvidia-h200-2026-11-27b-ch8-d128.csv > $OUT/bench-ch8.log 2>&1
log "bench ch8 rc=$?: $(tail -n 1 $OUT/bench-ch8.log)"
timeout $(left) make bench ARCH=sm_90 BENCH_CHAPTERS=7 \
  BENCH_OUT=$OUT/nvidia-h200-2026-11-27b-ch7-all.csv > $OUT/bench-ch7.log 2>&1
log "bench ch7 rc=$?: $(tail -n 1 $OUT/bench-ch7.log)"
log "end"
