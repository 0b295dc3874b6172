#!/usr/bin/env bash
# Device call 5 (session of 2026-11-27, 05:55 UTC on): `make bench` for chapter 8 at D = 64 and
# every N of the figures (call 2 ran only the table's two lengths), alone on the GPU. Call 6 runs
# D = 128 on the same machine right after; the two CSVs are merged into one results file.
set -u -o pipefail
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $OUT/env.txt 2>&1
make -j16 ARCH=sm_90 chapter5 chapter7 chapter8 > /tmp/build.txt 2>&1; rc=$?
{ echo "### build rc=$rc"; grep -iE "warning|error" /tmp/build.txt; } >> $OUT/env.txt
log "build rc=$rc, warnings: $(grep -ci warning /tmp/build.txt)"
timeout $((575 - (SECONDS - T0))) make bench ARCH=sm_90 BENCH_CHAPTERS=8 BENCH_D=64 \
  BENCH_OUT=$OUT/nvidia-h200-2026-11-27b-ch8-d64.csv > $OUT/bench.log 2>&1
log "bench rc=$?: $(tail -n 1 $OUT/bench.log)"
log "end"
