#!/usr/bin/env bash
# The coordinator's device run of the merged tree: build, every chapter's tests (chapters 7-10
# first), chapter 9's ladder and the PyTorch comparison at D = 128.
set -u -o pipefail
cd "$(dirname "$0")"
CI=$PWD/../../.deps/include
M="make ARCH=sm_90 CATCH2_INCLUDE=$CI"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -n 1; date -u; } | tee $OUT/env.txt
t0=$SECONDS
$M -j16 all tests > $OUT/build.txt 2>&1; echo "build rc=$? in $((SECONDS - t0)) s; warnings: $(grep -ci warning $OUT/build.txt)"
t=$SECONDS
timeout 150 tests/run_tests.sh build/tests/chapter09_test build/tests/chapter08_test build/tests/chapter07_test > $OUT/test-7-9.txt 2>&1
echo "tests 7-9 rc=$? in $((SECONDS - t)) s"; tail -n 3 $OUT/test-7-9.txt
t=$SECONDS
for n in 8192 16384; do for c in "" --causal; do
  timeout 40 ./chapter9 --ladder --bench --seq $n --batch $((32768 / n)) --heads 16 --dim 128 $c --repeat 10 2>&1 | tail -n 9
done; done > $OUT/ch9-ladder.txt 2>&1
echo "ladder in $((SECONDS - t)) s"; cat $OUT/ch9-ladder.txt
t=$SECONDS
PYTHONUNBUFFERED=1 timeout 120 python3 tools/compare_pytorch.py --chapters "7 9" --dims 128 --seq "8192" --causal "0 1" --repeat 10 --out $OUT/pytorch.csv > $OUT/pytorch.txt 2>&1
echo "compare rc=$? in $((SECONDS - t)) s"; cat $OUT/pytorch.txt | tail -n 20
t=$SECONDS
timeout $((560 - SECONDS)) tests/run_tests.sh build/tests/chapter10_test build/tests/common_test build/tests/chapter0[1-6]_test > $OUT/test-rest.txt 2>&1
echo "tests rest rc=$? in $((SECONDS - t)) s"; grep -E "^(test-summary|===|\*\*\*)|passed, " $OUT/test-rest.txt
