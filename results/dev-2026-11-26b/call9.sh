#!/usr/bin/env bash
# Device call 9 (second session of 2026-11-26): the planted bugs of chapters 8, 9 and 10 on the GPU
# (make check-exercises for those chapters), after this session's kernel changes.
set -u -o pipefail
W=/tmp/call9; mkdir -p $W
T0=$SECONDS
pack() { tar -C $W -czf $OUT/call9.tar.gz .; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } > $W/env.txt 2>&1
CHECK_EXERCISES_ONLY="9 10 8" timeout 570 make check-exercises ARCH=sm_90 CATCH2_INCLUDE=$PWD/.deps/include > $W/check-exercises.txt 2>&1
echo "rc=$? after $((SECONDS - T0)) s" >> $W/check-exercises.txt
tail -40 $W/check-exercises.txt
