#!/usr/bin/env bash
# Chapter 9's benchmark, in one run on one Hopper GPU (H100/H200): ./chapter9 --ladder --bench
# (chapter 7's kernel 6, chapter 9's steps 1-6, the cuBLAS GEMM; every kernel checked by the 2x
# rule) at D = 128 and 64, N = 4096, 8192, 16384 (B·N = 32768, H = 16), causal and not, bf16; then
# tools/compare_pytorch.py (PyTorch's flash and cuDNN backends beside chapters 7 and 9) at D = 128
# and 64, N = 8192.
#   tools/bench_hopper.sh OUTDIR        (needs ./chapter9; PyTorch for the last step)
# OUTDIR/bench-hopper.txt gets each ladder's summary table; OUTDIR/ladder-*.txt the whole output.
set -u -o pipefail
out=${1:?usage: tools/bench_hopper.sh OUTDIR}
mkdir -p "$out"
log="$out/bench-hopper.txt"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$log"
for d in 128 64; do
  for n in 4096 8192 16384; do
    for c in "" --causal; do
      full="$out/ladder-D$d-N$n${c:+-causal}.txt"
      echo "== ./chapter9 --ladder --bench --seq $n --batch $((32768 / n)) --heads 16 --dim $d $c --repeat 10" >> "$log"
      ./chapter9 --ladder --bench --seq "$n" --batch $((32768 / n)) --heads 16 --dim "$d" $c --repeat 10 \
        --csv "$out/chapter9-ladder.csv" > "$full" 2>&1
      echo "exit status $?" >> "$full"
      sed -n '/^kernel  /,$p' "$full" >> "$log"  # the summary table, the verdict, the exit status
    done
  done
done
echo "== compare_pytorch" >> "$log"
python3 tools/compare_pytorch.py --chapters "7 9" --dims "128 64" --seq 8192 --causal "0 1" --repeat 10 \
  --out "$out/pytorch.csv" >> "$log" 2>&1
cat "$log"
