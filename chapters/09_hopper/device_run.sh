#!/usr/bin/env bash
# Chapter 9 on a Hopper machine in one call: build, SASS and resources, every test (GPU included),
# the sanitizers on small shapes, the ladder next to chapter 7's kernel 6, and (when torch is there)
# tools/compare_pytorch.py. Logs go to $OUT (default results/ch9-device); the table prints last.
#   bash chapters/09_hopper/device_run.sh [quick]
set -u -o pipefail
OUT=${OUT:-results/ch9-device}
mkdir -p "$OUT"
CATCH=${CATCH2_INCLUDE:-$PWD/../../.deps/include}
make -j16 ARCH=sm_90 CATCH2_INCLUDE="$CATCH" chapter7 chapter9 build/tests/chapter09_test 2>&1 | tail -3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
cuobjdump -sass build/chapters/09_hopper/launch.o > "$OUT/ch9.sass"
echo "HGMMA lines: $(grep -c HGMMA "$OUT/ch9.sass"); HMMA lines: $(grep -c ' HMMA' "$OUT/ch9.sass");" \
     "LDL/STL: $(grep -c 'LDL\|STL' "$OUT/ch9.sass")" | tee "$OUT/sass-summary.txt"
cuobjdump -res-usage build/chapters/09_hopper/launch.o > "$OUT/res-usage.txt" 2>&1
build/tests/chapter09_test 2>&1 | tail -40 | tee "$OUT/tests.txt"
shape="--batch 4 --heads 16 --seq 8192 --dim 128"
for dt in bf16 fp16; do
    for c in "" "--causal"; do
        ./chapter9 --ladder --ch7 --bench --dtype $dt $shape $c --repeat 20 2>&1 | tee "$OUT/ladder-$dt$c.txt" | tail -9
    done
done
./chapter9 --ladder --ch7 --dtype bf16 --batch 4 --heads 16 --seq 8192 --dim 64 --repeat 20 2>&1 |
    tee "$OUT/ladder-d64.txt" | tail -6
[ "${1:-}" = quick ] && exit 0
for tool in memcheck racecheck synccheck initcheck; do
    FA_TEST_SMALL=1 compute-sanitizer --tool $tool --error-exitcode 1 build/tests/chapter09_test "[gpu]" \
        > "$OUT/sanitize-$tool.txt" 2>&1
    echo "compute-sanitizer $tool: exit $? ($(grep -m1 'ERROR SUMMARY' "$OUT/sanitize-$tool.txt"))"
done
if python3 -c "import torch" 2>/dev/null; then
    python3 tools/compare_pytorch.py --chapters "7 9" --dims "64 128" --seq "4096 8192 16384" \
        --out "$OUT/pytorch.csv" 2>&1 | tail -30 | tee "$OUT/pytorch.txt"
else
    echo "no torch on this machine: compare_pytorch.py skipped"
fi
