#!/usr/bin/env bash
# Device call 4 (second session of 2026-11-26): `make bench` for chapter 9 (its first sweep over the
# bench grid, for the README's results table), then chapter 4's M sweep (FA1 Theorem 2).
# Everything lands in $OUT/call4.tar.gz.
set -u -o pipefail
W=/tmp/call4; mkdir -p $W
CI=$PWD/.deps/include
M=(make ARCH=sm_90 CATCH2_INCLUDE=$CI)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call4.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; git log -1 --format=%h; } > $W/env.txt 2>&1
log "build"
"${M[@]}" -j16 chapter4 chapter5 chapter9 > $W/build.txt 2>&1; log "  rc=$?, warnings: $(grep -ci warning $W/build.txt)"
log "make bench BENCH_CHAPTERS=9"
timeout 420 "${M[@]}" bench BENCH_CHAPTERS=9 BENCH_OUT=$W/nvidia-h200-2026-11-26-ch9.csv > $W/bench-ch9.txt 2>&1; log "  rc=$?"
log "chapter 4 M sweep"
left=$((585 - (SECONDS - T0)))
timeout $left tools/ch4_m_sweep.sh > $W/ch4-m-sweep.txt 2>&1; log "  rc=$?"
log "end"
