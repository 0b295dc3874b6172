#!/usr/bin/env bash
# Device call 11 (second session of 2026-11-26): chapter 10 at q_len = 4 (N = 32768) and q_len = 1
# (N = 32768), before (87d4deb, .carry/before) and after the every-warp combine, alternately, two
# rounds: is kernel 5's loss to kernel 3 at q_len = 4 on the H200 (call 8) new?
set -u -o pipefail
W=/tmp/call11; mkdir -p $W
M=(make ARCH=sm_90 CATCH2_INCLUDE=$PWD/.deps/include)
pack() { tar -C $W -czf $OUT/call11.tar.gz .; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; } > $W/env.txt 2>&1
"${M[@]}" -j16 chapter10 > $W/build.txt 2>&1 & "${M[@]}" -C .carry/before -j16 chapter10 > $W/build-before.txt 2>&1; wait
for r in 1 2; do for t in after before; do
  d=.; [ $t = before ] && d=.carry/before
  for a in "--q-len 4 --seq 32768" "--seq 32768"; do
    echo "### round $r, $t: ./chapter10 --ladder $a --check-rows 64 --page-sizes 64"
    (cd $d && timeout 30 ./chapter10 --ladder $a --check-rows 64 --page-sizes 64 2>&1 | sed -n '/^kernel  /,$p')
  done
done; done > $W/ch10-qlen4.txt 2>&1
cat $W/ch10-qlen4.txt | grep -E "###|5-tuned|3-gqa"
