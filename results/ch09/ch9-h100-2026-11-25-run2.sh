#!/bin/bash
# device run 2 of chapter 9 (helper ch9c): everything into one log
# (run as `cd .carry/ch9c && bash run2.sh` on the device, from a copy of the tree at commit ea446b7)
export CI=$PWD/../../.deps/include
L=$OUT/run2.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -1; date -u; } > $L
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI chapter9 build/tests/chapter09_test > /tmp/build.txt 2>&1 || { tail -30 /tmp/build.txt; exit 1; }
echo "== build warnings: $(grep -ci warning /tmp/build.txt)" >> $L
cuobjdump -sass build/chapters/09_hopper/launch.o > /tmp/sass.txt
echo "== SASS: HGMMA $(grep -c HGMMA /tmp/sass.txt), UTMALDG $(grep -c UTMALDG /tmp/sass.txt), USETMAXREG $(grep -c USETMAXREG /tmp/sass.txt), STL $(grep -c 'STL' /tmp/sass.txt)" >> $L
grep -m12 "HGMMA\|UTMALDG\|USETMAXREG\|WARPGROUP" /tmp/sass.txt >> $L
echo "== tests (quick and bounds)" >> $L
timeout 60 ./build/tests/chapter09_test "*quick*,*writes all*" 2>&1 | tail -4 >> $L
for a in "128 8192" "128 8192 --causal" "64 8192"; do set -- $a; echo "== ladder D=$1 N=$2 $3" >> $L
timeout 30 ./chapter9 --ladder --bench --seq $2 --batch $((65536/$2)) --heads 16 --dim $1 $3 --repeat 10 2>&1 | tail -6 >> $L; done
echo "== exercises" >> $L
timeout 60 make check-exercises CHECK_EXERCISES_ONLY="9:2 9:3" ARCH=sm_90 CATCH2_INCLUDE=$CI EXERCISES_TIMEOUT=40 2>&1 | tail -6 >> $L
echo "== pytorch" >> $L
timeout 70 python3 tools/compare_pytorch.py --chapters 9 --dims 128 --seq 8192 --causal "0 1" --repeat 10 --out $OUT/pytorch.csv >> $L 2>&1
cat $L
