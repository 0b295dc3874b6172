#!/usr/bin/env bash
# Device call 6 (third session of 2026-11-26): an experiment, not course code. Chapter 10 built
# from .carry/l2 (HEAD 482746f plus call6-cp-async-l2.diff): every cp.async with an L2 prefetch
# size (.L2::128B, .L2::256B) against none, kernel 5 on the target shapes, two rounds.
set -u -o pipefail
W=/tmp/call6; mkdir -p $W
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call6.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
cd .carry/l2
make -j16 ARCH=sm_90 BUILD=/tmp/b0 chapter10 > $W/build-none.txt 2>&1; log "build none rc=$?"; cp chapter10 /tmp/ch10_none
make -j16 ARCH=sm_90 BUILD=/tmp/b1 EXTRA_NVCCFLAGS=-DFA_CP_L2=128 chapter10 > $W/build-128.txt 2>&1; log "build 128 rc=$?"; cp chapter10 /tmp/ch10_128
make -j16 ARCH=sm_90 BUILD=/tmp/b2 EXTRA_NVCCFLAGS=-DFA_CP_L2=256 chapter10 > $W/build-256.txt 2>&1; log "build 256 rc=$?"; cp chapter10 /tmp/ch10_256
{ for round in 1 2; do for v in none 128 256; do
    for a in "--batch 64 --seq 4096" "--seq 32768" "--seq 131072" "--seq 8192"; do
      echo "### [$v round $round] ./chapter10 --kernel 5 $a --check-rows 64 --repeat 20"
      timeout 60 /tmp/ch10_$v --kernel 5 $a --check-rows 64 --repeat 20 2>&1 | grep -E "read bandwidth|PASS|FAIL|time "
    done
  done; done; } > $W/runs.txt 2>&1; log "runs done"
log "end"
