#!/usr/bin/env bash
# Chapter 10's benchmark, in one run on one GPU: ./chapter10 --ladder over the issue's shapes (every
# variant checked and timed beside the read-only kernel), variant 5's split sweep, PyTorch's SDPA on
# the same shapes, then the target table and the figure (tools/plot_decoding.py).
#   tools/bench_decoding.sh OUTDIR        (needs ./chapter10; PyTorch and matplotlib for the last steps)
# Writes OUTDIR/decoding.csv (ours), OUTDIR/pytorch-decoding.csv, OUTDIR/decoding_bandwidth.png.
set -u
out=${1:?usage: tools/bench_decoding.sh OUTDIR}
mkdir -p "$out"
csv=$out/decoding.csv
run() { echo "+ $*"; "$@"; }
for n in 4096 8192 16384 32768 131072; do
  pages=64
  [ "$n" = 32768 ] && pages=16,64,256
  run ./chapter10 --ladder --seq "$n" --check-rows 64 --page-sizes "$pages" --csv "$csv"
done
run ./chapter10 --ladder --q-len 4 --seq 32768 --check-rows 64 --page-sizes 64 --csv "$csv"
run ./chapter10 --ladder --batch 64 --seq 4096 --check-rows 64 --page-sizes 64 --csv "$csv"
run ./chapter10 --kernel 5 --batch 4 --cache-lens 1,17,4097,100000 --check-rows 512 --csv "$csv"
run ./chapter10 --ladder --seq 32768 --no-check --page-sizes 0 --dirty-flush --csv "$csv"  # what the flush's write-back costs
run ./chapter10 --ladder --seq 256 --no-check --page-sizes 0 --csv "$csv"                  # the fixed costs alone
for args in "--seq 8192" "--seq 32768"; do
  # shellcheck disable=SC2086
  run ./chapter10 --sweep $args --no-check --csv "$csv"
done
run python3 tools/pytorch_decoding.py --out "$out/pytorch-decoding.csv"
run python3 tools/plot_decoding.py --ours "$csv" --torch "$out/pytorch-decoding.csv" --figure "$out/decoding_bandwidth.png"
