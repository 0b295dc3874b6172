#!/usr/bin/env bash
# Device call 2 (session of 2026-11-27, 05:55 UTC on): the numbers of the README's results table
# and figures for chapter 8, on the tree that closes issue 14. `./chapter8` with no options (the
# README's first command; its default is now step 6), then `make bench` for chapter 8 at the
# table's lengths, alone on the GPU. Logs and the CSV go straight to $OUT.
set -u -o pipefail
T0=$SECONDS; DEADLINE=575
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $OUT/env.txt 2>&1
make -j16 ARCH=sm_90 chapter5 chapter8 > /tmp/build.txt 2>&1; rc=$?
{ echo "### build rc=$rc"; grep -iE "warning|error" /tmp/build.txt; } >> $OUT/env.txt
log "build rc=$rc, warnings: $(grep -ci warning /tmp/build.txt)"
timeout 60 ./chapter8 > $OUT/chapter8-default.txt 2>&1; log "./chapter8 rc=$?"
timeout $(left) make bench ARCH=sm_90 BENCH_CHAPTERS=8 BENCH_N="1024 8192" \
  BENCH_OUT=$OUT/nvidia-h200-2026-11-27b-ch8.csv > $OUT/bench.log 2>&1
log "bench rc=$?: $(tail -n 1 $OUT/bench.log)"
log "end"
