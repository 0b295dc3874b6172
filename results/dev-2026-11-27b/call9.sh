#!/usr/bin/env bash
# Device call 9 (session of 2026-11-27, 05:55 UTC on): make sanitize's script over chapters 9 and
# 10 after their last edit (fa::sm_count() from common/device.h; call 8 ran their tests): memcheck,
# racecheck, synccheck, initcheck, one [gpu] test case per process, small grid.
set -u -o pipefail
CI=$PWD/.deps/include
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -n 2; compute-sanitizer --version | tail -n 1; date -u; } > $OUT/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI build/tests/chapter09_test build/tests/chapter10_test > /tmp/build.txt 2>&1; rc=$?
{ echo "### build rc=$rc"; grep -iE "warning|error" /tmp/build.txt; } >> $OUT/env.txt
log "build rc=$rc, warnings: $(grep -ci warning /tmp/build.txt)"
SANITIZE_JOBS=8 timeout 200 tools/sanitize.sh build/tests/chapter09_test build/tests/chapter10_test > $OUT/sanitize.txt 2>&1
log "sanitize rc=$?: $(tail -n 1 $OUT/sanitize.txt)"
