#!/usr/bin/env bash
# Device call 7 (second session of 2026-11-26): chapter 10 before (87d4deb, in .carry/before) and
# after (this tree) the every-warp combine / candidate 4 / 1024-key floor, on the same GPU, run
# alternately, two rounds: the ladders of tools/bench_decoding.sh at N = 4096, 8192, 32768, 131072
# (B = 1, paged P = 64) and B = 64, N = 4096. Everything lands in $OUT/call7.tar.gz.
set -u -o pipefail
W=/tmp/call7; mkdir -p $W
CI=$PWD/.deps/include
M=(make ARCH=sm_90 CATCH2_INCLUDE=$CI)
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call7.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
log "build after and before"
"${M[@]}" -j16 chapter10 > $W/build.txt 2>&1; log "  after rc=$?"
"${M[@]}" -C .carry/before -j16 chapter10 >> $W/build.txt 2>&1; log "  before rc=$?"
for r in 1 2; do for t in after before; do
  d=.; [ $t = before ] && d=.carry/before
  for a in "--seq 4096" "--seq 8192" "--seq 32768" "--seq 131072" "--batch 64 --seq 4096"; do
    echo "### round $r, $t: ./chapter10 --ladder $a --check-rows 64 --page-sizes 64"
    (cd $d && timeout 30 ./chapter10 --ladder $a --check-rows 64 --page-sizes 64 2>&1 | sed -n '/^kernel  /,$p')
  done
done; done > $W/ch10-before-after.txt 2>&1; log "done"
log "end"
