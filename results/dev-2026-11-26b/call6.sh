#!/usr/bin/env bash
# Device call 6 (second session of 2026-11-26): chapter 10 after the every-warp combine, the
# early-prefetch candidate 4 and the 1024-key split floor: its tests, tools/bench_decoding.sh (the
# ladders, the sweeps, PyTorch, the target table), candidate 4's ladders, a sweep at N = 4096, then
# compute-sanitizer. Everything lands in $OUT/call6.tar.gz.
set -u -o pipefail
W=/tmp/call6; mkdir -p $W/bench
CI=$PWD/.deps/include
M=(make ARCH=sm_90 CATCH2_INCLUDE=$CI)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call6.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
log "build"
"${M[@]}" -j16 chapter10 build/tests/chapter10_test > $W/build.txt 2>&1; log "  rc=$?, warnings: $(grep -ci warning $W/build.txt)"
log "chapter 10 tests (all)"
timeout 150 stdbuf -oL build/tests/chapter10_test > $W/ch10-tests.txt 2>&1; log "  rc=$?: $(tail -n 2 $W/ch10-tests.txt | tr '\n' ' ')"
log "bench_decoding"
timeout 240 tools/bench_decoding.sh $W/bench > $W/bench-decoding.txt 2>&1; log "  rc=$?"
log "candidate 4 and the N = 4096 sweep"
{ for a in "--seq 8192" "--seq 32768" "--seq 131072" "--batch 64 --seq 4096"; do
    echo "### ./chapter10 --ladder --tiles 4 $a --check-rows 64 --page-sizes 64"
    timeout 30 ./chapter10 --ladder --tiles 4 $a --check-rows 64 --page-sizes 64 2>&1
  done
  echo "### ./chapter10 --ladder --tiles 4 --seq 256 --no-check --page-sizes 0"
  timeout 30 ./chapter10 --ladder --tiles 4 --seq 256 --no-check --page-sizes 0 2>&1
  echo "### ./chapter10 --sweep --seq 4096 --no-check"
  timeout 30 ./chapter10 --sweep --seq 4096 --no-check 2>&1
} > $W/ch10-candidate4.txt 2>&1; log "  done"
log "sanitizer"
left=$((590 - (SECONDS - T0)))
SANITIZE_JOBS=4 timeout $left tools/sanitize.sh build/tests/chapter10_test > $W/ch10-sanitize.txt 2>&1; log "  rc=$?"
log "end"
