#!/bin/bash
# device run 1 of chapter 9 (helper ch9c): build, SASS, tests, small probes, ladder
# (run as `cd .carry/ch9c && bash run1.sh` on the device, from a copy of the tree at commit 00c78eb)
export CI=$PWD/../../.deps/include
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/device.txt; nvcc --version | tail -2 >> $OUT/device.txt; date -u >> $OUT/device.txt
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI chapter9 build/tests/chapter09_test > $OUT/build.txt 2>&1 || { tail -50 $OUT/build.txt; exit 1; }
cuobjdump -sass build/chapters/09_hopper/launch.o > /tmp/sass.txt; grep -c HGMMA /tmp/sass.txt > $OUT/sass_counts.txt; grep -c UTMALDG /tmp/sass.txt >> $OUT/sass_counts.txt; grep -m40 "HGMMA\|UTMALDG\|USETMAXREG\|SYNCS\|WARPGROUP" /tmp/sass.txt > $OUT/sass_excerpt.txt
probe() { for k in 1 2 3; do for D in 64 128; do timeout 20 ./chapter9 --kernel $k --dim $D --seq 300 --batch 1 --heads 2 --causal --no-bench 2>&1 | grep -E "rule|FAIL|PASS|rror|O max" | tr '\n' ' ' ; echo " <- k$k D$D"; done; done; }
probe > $OUT/probe.txt 2>&1; cat $OUT/probe.txt
if grep -q FAIL $OUT/probe.txt; then
  cp common/tensor_core/hopper_layout.h /tmp/hl.h
  sed -i 's/make_smem_desc(addr, std::uint32_t(rows \* 128), kAtomBytes, Swizzle::k128B)/make_smem_desc(addr, kAtomBytes, std::uint32_t(rows * 128), Swizzle::k128B)/' common/tensor_core/hopper_layout.h
  grep -n "make_smem_desc(addr" common/tensor_core/hopper_layout.h > $OUT/probe_swap.txt
  make -j16 ARCH=sm_90 chapter9 > /dev/null 2>&1; probe >> $OUT/probe_swap.txt 2>&1; cat $OUT/probe_swap.txt
  cp /tmp/hl.h common/tensor_core/hopper_layout.h
fi
timeout 150 ./build/tests/chapter09_test 2>&1 | tail -80 > $OUT/tests.txt; tail -5 $OUT/tests.txt
if true; then
for D in 128 64; do for c in "" --causal; do timeout 30 ./chapter9 --ladder --bench --seq 8192 --batch 4 --heads 16 --dim $D $c --repeat 10 > $OUT/ladder_D${D}${c}.txt 2>&1; tail -7 $OUT/ladder_D${D}${c}.txt; done; done
fi
timeout 150 make check-exercises CHECK_EXERCISES_ONLY="9" ARCH=sm_90 CATCH2_INCLUDE=$CI EXERCISES_TIMEOUT=60 > $OUT/exercises.txt 2>&1; tail -9 $OUT/exercises.txt
