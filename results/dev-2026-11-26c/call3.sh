#!/usr/bin/env bash
# Device call 3 (third session of 2026-11-26): an experiment, not course code. Chapter 10 built
# from .carry/tl (main plus call3-timeline.diff): thread 0 of every decoding block writes
# %globaltimer at its entry, once lens[b] is known, when tile 0 has landed, after the loop, after
# its O/partial is written, and at its end (after the fused combine); ./chapter10 prints the
# spread of each over the last timed launch. Kernels 3 and 5 on the ladder's shapes.
set -u -o pipefail
W=/tmp/call3; mkdir -p $W
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call3.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
cd .carry/tl
make -j16 ARCH=sm_90 EXTRA_NVCCFLAGS=-DFA_TIMELINE chapter10 > $W/build.txt 2>&1; log "build rc=$?"
{ for a in "--seq 256" "--seq 4096" "--seq 8192" "--seq 32768" "--seq 131072" "--seq 32768 --q-len 4" "--batch 64 --seq 4096"; do
    for k in 3 5; do
      echo "### ./chapter10 --kernel $k $a --no-check --repeat 10"
      timeout 60 ./chapter10 --kernel $k $a --no-check --repeat 10 2>&1 | grep -E "^kernel |time|timeline|since"
    done
  done
  echo "### ./chapter10 --kernel 5 --tiles 4 --seq 256 --no-check --repeat 10 (early prefetch)"
  timeout 60 ./chapter10 --kernel 5 --tiles 4 --seq 256 --no-check --repeat 10 2>&1 | grep -E "^kernel |time|timeline|since"
} > $W/timelines.txt 2>&1; log "runs done"
log "end"
