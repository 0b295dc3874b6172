#!/usr/bin/env bash
# Device call 4 (third session of 2026-11-26): an experiment, not course code. Chapter 10 built
# from .carry/tl (main plus call4-timeline-batched.diff): call 3's per-block timestamps, one more
# (when a group's last block has counted itself), a read-only kernel over the same bytes as K and
# V, and combine_row with each batch of splits' loads issued before any is used
# (-DFA_BATCHED_COMBINE=16), against the unchanged combine_row. Kernels 3 and 5.
set -u -o pipefail
W=/tmp/call4; mkdir -p $W
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call4.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
cd .carry/tl
make -j16 ARCH=sm_90 BUILD=/tmp/bu EXTRA_NVCCFLAGS=-DFA_TIMELINE chapter10 > $W/build-u.txt 2>&1; log "build unchanged rc=$?"; cp chapter10 /tmp/ch10_u
make -j16 ARCH=sm_90 BUILD=/tmp/bb "EXTRA_NVCCFLAGS=-DFA_TIMELINE -DFA_BATCHED_COMBINE=16" chapter10 > $W/build-b.txt 2>&1; log "build batched rc=$?"; cp chapter10 /tmp/ch10_b
make ARCH=sm_90 BUILD=/tmp/bb "EXTRA_NVCCFLAGS=-DFA_TIMELINE -DFA_BATCHED_COMBINE=16" chapter10.sass > /dev/null 2>&1; cp chapter10.sass $W/ch10-batched.sass 2>/dev/null
{ for round in 1 2; do for v in u b; do
    for a in "--kernel 5 --seq 32768" "--kernel 5 --seq 32768 --q-len 4" "--kernel 3 --seq 32768 --q-len 4" "--kernel 5 --seq 8192" "--kernel 5 --seq 131072"; do
      echo "### [$v round $round] ./chapter10 $a --check-rows 64 --repeat 10"
      timeout 60 /tmp/ch10_$v $a --check-rows 64 --repeat 10 2>&1 | grep -E "^kernel |EXPERIMENT|PASS|FAIL|time|timeline|since|combine in"
    done
  done; done
} > $W/timelines.txt 2>&1; log "runs done"
log "end"
