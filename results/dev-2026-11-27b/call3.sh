#!/usr/bin/env bash
# Device call 3 (session of 2026-11-27, 05:55 UTC on): the one [gpu] test case of chapter 8 that
# call 1's deadline cut at full size (large logits, kernel 5), alone; then `make bench` for chapter 7
# at the results table's lengths (its timings predated tc::load_tile's cp.async zero fill), alone
# on the GPU. Logs and the CSV go straight to $OUT.
set -u -o pipefail
CI=$PWD/.deps/include
T0=$SECONDS; DEADLINE=575
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $OUT/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI build/tests/chapter08_test chapter5 chapter7 > /tmp/build.txt 2>&1; rc=$?
{ echo "### build rc=$rc"; grep -iE "warning|error" /tmp/build.txt; } >> $OUT/env.txt
log "build rc=$rc, warnings: $(grep -ci warning /tmp/build.txt)"
timeout $(left) build/tests/chapter08_test "ch8 GPU: large logits (inputs of magnitude 8)\, tuned kernel" \
  > $OUT/ch08-large-logits-tuned-full.txt 2>&1
log "ch08 large logits, tuned kernel, full size rc=$?: $(grep -E '^(All tests|test cases:|test-summary)' $OUT/ch08-large-logits-tuned-full.txt | tr '\n' ' ')"
timeout $(left) make bench ARCH=sm_90 BENCH_CHAPTERS=7 BENCH_N="1024 8192" \
  BENCH_OUT=$OUT/nvidia-h200-2026-11-27b-ch7.csv > $OUT/bench.log 2>&1
log "bench rc=$?: $(tail -n 1 $OUT/bench.log)"
log "end"
