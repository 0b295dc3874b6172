#!/usr/bin/env bash
# Device call 8 (session of 2026-11-26, 20:12 UTC on): the tree of call 7; chapter 8's [gpu] tests
# on the small grid under compute-sanitizer's memcheck, racecheck, synccheck and initcheck
# (tools/sanitize.sh, the four tools at once), after step 6's new candidates.
set -u -o pipefail
W=/tmp/call8; mkdir -p $W
CI=$PWD/.deps/include
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { cp build/tests/chapter08_test.*.log $W/ 2>/dev/null; tar -C $W -czf $OUT/call8.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI build/tests/chapter08_test > $W/build.txt 2>&1; log "build rc=$?, warnings: $(grep -ci warning $W/build.txt)"
left=$((585 - (SECONDS - T0)))
timeout $left tools/sanitize.sh build/tests/chapter08_test > $W/ch8-sanitize.txt 2>&1; log "sanitize rc=$?: $(tail -n 5 $W/ch8-sanitize.txt | tr '\n' ' ')"
log "end"
