#!/usr/bin/env bash
# Device call 7 (session of 2026-11-26, 20:12 UTC on): chapter 8 as committed with step 6's new
# candidates (the tree of call 5; call 6's experiment reverted). `make bench` for chapter 8 at
# D = 128 (call 5's sweep reached D = 64 whole and was cut inside D = 128), then step 6's [gpu]
# tests at full size (every candidate, the course's grid). Everything lands in $OUT/call7.tar.gz.
set -u -o pipefail
W=/tmp/call7; mkdir -p $W
CI=$PWD/.deps/include
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call7.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI chapter5 chapter8 build/tests/chapter08_test > $W/build.txt 2>&1; log "build rc=$?, warnings: $(grep -ci warning $W/build.txt)"
timeout 290 make bench ARCH=sm_90 BENCH_CHAPTERS=8 BENCH_D=128 BENCH_OUT=$W/nvidia-h200-2026-11-26-ch8-d128.csv > $W/bench.log 2>&1; log "bench rc=$?: $(tail -n 1 $W/bench.log)"
left=$((585 - (SECONDS - T0)))
timeout $left stdbuf -oL build/tests/chapter08_test "[gpu][v6]" -d yes > $W/ch8-tests-v6.txt 2>&1; log "ch8 v6 full gpu tests rc=$?: $(tail -n 2 $W/ch8-tests-v6.txt | tr '\n' ' ')"
log "end"
