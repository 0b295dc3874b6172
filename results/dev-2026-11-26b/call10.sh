#!/usr/bin/env bash
# Device call 10 (second session of 2026-11-26): chapter 8's [gpu] tests at full size (N up to
# 4097), which have never completed on a GPU, with the call's whole time for them.
set -u -o pipefail
W=/tmp/call10; mkdir -p $W
T0=$SECONDS
pack() { tar -C $W -czf $OUT/call10.tar.gz .; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } > $W/env.txt 2>&1
make ARCH=sm_90 CATCH2_INCLUDE=$PWD/.deps/include -j16 build/tests/chapter08_test > $W/build.txt 2>&1
echo "build rc=$? after $((SECONDS - T0)) s" > $W/timeline.txt
timeout $((585 - (SECONDS - T0))) stdbuf -oL build/tests/chapter08_test "[gpu]" -d yes > $W/ch8-tests-full.txt 2>&1
echo "tests rc=$? after $((SECONDS - T0)) s" >> $W/timeline.txt
cat $W/timeline.txt; tail -5 $W/ch8-tests-full.txt
