#!/usr/bin/env bash
# Chapter 4's sweep over the on-chip memory M of Algorithm 1 line 1 (FA1's Theorem 2: HBM accesses
# Θ(N² d² / M)). For each M, ./chapter4 --kernel 1 --sram-kb M runs the readable kernel with the tiles
# line 1 gives; the table shows the tiles, the traffic the loops request (ch4::traffic), the median
# time and, when Nsight Compute is on the PATH, the bytes that really reached DRAM (dram__bytes.sum of
# one launch; the L2 absorbs the rest).
#
#   make chapter4 && tools/ch4_m_sweep.sh                      B=8 H=12 N=1024 D=64, M from 8 to 192 KB
#   tools/ch4_m_sweep.sh --seq 2048 --dim 128 -- 16 32 64      other shape, other M (KB) after --
#
# Options before -- go to ./chapter4 unchanged. M larger than the device's opt-in shared memory
# per block is refused by the program, and the row says so.
set -u -o pipefail
cd "$(dirname "$0")/.."
shape=(--batch 8 --heads 12 --seq 1024 --dim 64)  # variant 1 runs one block per head: N = 4096 takes seconds per run at small M
ms=(8 12 16 24 32 48 64 96 128 160 192)
if [ $# -gt 0 ]; then
    shape=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do shape+=("$1"); shift; done
    if [ $# -gt 0 ]; then shift; ms=("$@"); fi
fi
[ -x ./chapter4 ] || { echo "ch4_m_sweep: ./chapter4 not built (run: make chapter4)" >&2; exit 2; }
have_ncu=0
command -v ncu > /dev/null && have_ncu=1

echo "chapter 4, variant 1, ${shape[*]}; $(date -u +%F)"
printf "| M (KB) | B_r x B_c | T_c | requested traffic (GB) | median ms | requested GB/s | DRAM bytes (GB, ncu) |\n"
printf "| --- | --- | --- | --- | --- | --- | --- |\n"
fail=0
for m in "${ms[@]}"; do
    log=$(./chapter4 --kernel 1 --sram-kb "$m" --no-compare --repeat 3 "${shape[@]}" 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        why=$(echo "$log" | grep -m1 "chapter4:" || echo "exit $rc")
        printf "| %s | %s |\n" "$m" "not run: ${why#chapter4: }"
        [ $rc -eq 1 ] && fail=1  # 1 = a check failed; 3 = tiles this GPU's shared memory cannot hold
        continue
    fi
    tiles=$(echo "$log" | sed -n 's/^tiles: B_r = \([0-9]*\), B_c = \([0-9]*\).*T_c = \([0-9]*\) key tiles.*/\1 x \2|\3/p')
    total=$(echo "$log" | sed -n 's/.*total \([0-9.]*\) GB$/\1/p')
    median=$(echo "$log" | sed -n 's/.*median *\([0-9.]*\) ms.*/\1/p' | head -n 1)
    rate=$(echo "$log" | sed -n 's/.*at the median time: \([0-9.]*\) GB\/s.*/\1/p')
    dram="-"
    if [ $have_ncu -eq 1 ]; then
        dram=$(ncu --metrics dram__bytes.sum --kernel-name flash1_readable --launch-count 1 --csv \
                   ./chapter4 --kernel 1 --sram-kb "$m" --no-compare --no-check --repeat 1 "${shape[@]}" 2>/dev/null |
               awk -F'","' '/dram__bytes.sum/ { v = $NF; gsub(/[",]/, "", v); u = $(NF - 1);
                    f = (u ~ /^Gbyte/) ? 1 : (u ~ /^Mbyte/) ? 1e-3 : (u ~ /^Kbyte/) ? 1e-6 : (u ~ /^byte/) ? 1e-9 : 0;
                    if (f > 0) printf "%.3f", v * f; else printf "? (%s)", u }')
        [ -n "$dram" ] || dram="?"
    fi
    printf "| %s | %s | %s | %s | %s | %s | %s |\n" "$m" "${tiles%|*}" "${tiles#*|}" "$total" "$median" "$rate" "$dram"
done
exit $fail
