#!/usr/bin/env bash
# The exit statuses of the README's table, program by program: bad input (a malformed number or
# list, conflicting options, a crafted .npy file, a shape too large for host memory) ends every
# program with status 2 and an "error:" line before it looks for a GPU, on any machine. Without a
# GPU a good command line ends with status 3 ("no CUDA device"), chapter 2 after its CPU algorithms;
# with one, a small good run of each program ends with status 0.
#   tools/check_inputs.sh [BIN_DIR]        (default: the repository root, where make puts ./chapterN)
# Needs every program built (make all) and python3 (to write the .npy files). Prints one line per
# command; exits 1 when any ended otherwise. A GPU too old for a program (status 3 there) is only
# seen on such a GPU: on one that runs everything, the good runs must all end with 0.
set -u
cd "$(dirname "$0")/.."
bin=${1:-.}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# .npy files: good float16 inputs, float64 ones, trailing bytes, a header length field that lies
python3 - "$tmp" <<'EOF'
import os, struct, sys
tmp = sys.argv[1]
def npy(path, descr, shape, data, version=1, extra=b""):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(map(str, shape)) + ("," if len(shape) == 1 else ""))
    pre = 10 if version == 1 else 12
    header += " " * ((64 - (pre + len(header) + 1) % 64) % 64) + "\n"
    length = struct.pack("<H" if version == 1 else "<I", len(header))
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY" + bytes([version, 0]) + length + header.encode() + data + extra)
def folder(name, files):
    os.makedirs(os.path.join(tmp, name))
    for f, args in files.items():
        npy(os.path.join(tmp, name, f), *args)
shape = (1, 2, 64, 64)
n = 2 * 64 * 64
half = struct.pack("<%de" % n, *[0.25 + (i % 7) / 8 for i in range(n)])
single = struct.pack("<%df" % n, *[0.25 + (i % 7) / 8 for i in range(n)])
folder("fp16", {f: ("<f2", shape, half) for f in ("q.npy", "k.npy", "v.npy")})
folder("fp64", {"q.npy": ("<f8", shape, single + single), "k.npy": ("<f4", shape, single),
                "v.npy": ("<f4", shape, single)})
folder("trailing", {"q.npy": ("<f4", shape, single), "k.npy": ("<f4", shape, single, 1, b"\0\0\0\0"),
                    "v.npy": ("<f4", shape, single)})
rows = struct.pack("<%df" % (64 * 64), *[(i % 5) / 3 for i in range(64 * 64)])
folder("rows_fp16", {"x.npy": ("<f2", (64, 64), struct.pack("<%de" % (64 * 64), *[(i % 5) / 3 for i in range(64 * 64)]))})
folder("rows_trailing", {"x.npy": ("<f4", (64, 64), rows, 1, b"\0\0")})
# chapter 10's decoding step: Q (B, H_q, q_len, D), the caches (B, H_kv, N_max, D), the lengths
q, kv = (1, 4, 2, 64), (1, 2, 64, 64)
qdata = struct.pack("<%df" % (4 * 2 * 64), *[0.25 + (i % 7) / 8 for i in range(4 * 2 * 64)])
kvdata = struct.pack("<%df" % (2 * 64 * 64), *[0.5 - (i % 5) / 8 for i in range(2 * 64 * 64)])
for name, lens in (("decode", 40), ("decode_long", 65)):
    folder(name, {"q.npy": ("<f4", q, qdata), "k_cache.npy": ("<f4", kv, kvdata), "v_cache.npy": ("<f4", kv, kvdata),
                  "cache_lens.npy": ("<i8", (1,), struct.pack("<q", lens))})
os.makedirs(os.path.join(tmp, "lying"))
for f in ("q.npy", "x.npy"):  # 30 bytes; version 2.0, whose header length field says 4 GiB
    with open(os.path.join(tmp, "lying", f), "wb") as out:
        out.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + b" " * 18)
EOF

gpu=0
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then gpu=1; fi
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
bad=0

# expect STATUS TEXT PROGRAM ARGS...: the program ends with STATUS and prints TEXT, nothing that
# means it crashed (an abort, an uncaught exception), and, refusing bad input (2), nothing about a
# device (the description every GPU program prints once it has found one)
expect() {
  local want=$1 text=$2 prog=$3 out status first
  shift 3
  out=$("$bin/$prog" "$@" 2>&1)
  status=$?
  first=$(grep -m1 -e "error:" -e "no CUDA device" <<<"$out" || tail -n 1 <<<"$out")
  if [ "$status" -ne "$want" ] || ! grep -qF -- "$text" <<<"$out" ||
     grep -q -e "terminate called" -e "bad_alloc" -e "Aborted" <<<"$out" ||
     { [ "$want" -eq 2 ] && grep -q "(compute capability" <<<"$out"; }; then
    echo "FAIL  $prog $*: exit $status (expected $want, saying '$text'): ${first:0:200}"
    bad=1
  else
    echo "ok $status  $prog $*: ${first:0:160}"
  fi
}

giant=(--batch 64 --heads 64 --seq 65536 --dim 128)  # 2^35 elements per array: 137 GB each
small=(--batch 1 --heads 2 --seq 64 --dim 64)

echo "-- bad input: exit status 2, whatever the machine"
for n in 1 2 3 4 5 6 7 8 9 10 11 12; do
  expect 2 "cannot be combined" chapter$n --repeat 3 --no-bench
  expect 2 "cannot write this file" chapter$n --csv "$tmp/missing/r.csv"
done
expect 2 "not a whole number" chapter1 --rows 12abc
expect 2 "truncated header" chapter1 --load-npy "$tmp/lying"
expect 2 "trailing data" chapter2 --load-npy "$tmp/rows_trailing"
expect 2 "--cpu-only and --sweep cannot be combined" chapter2 --cpu-only --sweep
expect 2 "has none (use --kernel 2)" chapter3 --tf32 --kernel 1
expect 2 "--load-npy and --seed cannot be combined" chapter3 --load-npy "$tmp/fp16" --seed 3
expect 2 "Add --kernel 1" chapter4 --br 16
expect 2 "truncated header" chapter4 --load-npy "$tmp/lying"
for n in 3 5 6 7 9 12; do expect 2 "GB of host memory; this machine has" chapter$n "${giant[@]}"; done
expect 2 "outside what chapter 8 launches" chapter8 "${giant[@]}"
expect 2 "trailing data" chapter5 --load-npy "$tmp/trailing"
expect 2 "must be atomic, split or both" chapter6 --dq sideways
expect 2 "--ladder and --kernel cannot be combined" chapter7 --ladder --kernel 3
expect 2 "tile candidate 63" chapter7 --tiles 63
expect 2 "expected float32 '<f4' or float16 '<f2'" chapter7 --load-npy "$tmp/fp64"
expect 2 "truncated header" chapter8 --load-npy "$tmp/lying"
expect 2 "--fp32 and --no-bench cannot be combined" chapter8 --fp32 --no-bench
expect 2 "trailing data" chapter9 --load-npy "$tmp/trailing"
expect 2 "must be fp16 or bf16" chapter9 --dtype fp32
expect 2 "entry 1 ('12abc'): not a whole number" chapter10 --cache-lens 12abc
expect 2 "entry 1 ('4294967297'): must be in" chapter10 --cache-lens 4294967297
expect 2 "entry 1 ('abc'): not a whole number" chapter10 --cache-lens abc
expect 2 "entry 2 (''): empty" chapter10 --cache-lens 100,,200
expect 2 "entry 1 ('abc'): not a whole number" chapter10 --ladder --page-sizes abc
expect 2 "--cache-lens and --random-lens cannot be combined" chapter10 --random-lens --cache-lens 5
expect 2 "page size 17" chapter10 --kernel 4 --page-size 17
expect 2 "bad value '16' for --tiles" chapter10 --tiles 16
expect 2 "k_cache.npy" chapter10 --load-npy "$tmp/fp16"
expect 2 "cache length 65 of sequence 0 is outside q_len..N_max" chapter10 --load-npy "$tmp/decode_long"
expect 2 "the inputs and their shape come from the files" chapter10 --load-npy "$tmp/decode" --seq 40
expect 2 "GB of host memory; this machine has" chapter10 --batch 4096 --seq 4194304
expect 2 "head dim 96 is not supported" chapter11 --dim 96
expect 2 "tile candidate 7: only kernel 5 has candidates" chapter11 --tiles 7
expect 2 "--tiles is a candidate of kernel 5, not of --kernel 4" chapter11 --kernel 4 --tiles 1
expect 2 "--sweep and --tiles cannot be combined" chapter11 --sweep --tiles 0
expect 2 "outside what chapter 8 launches" chapter11 "${giant[@]}"
expect 2 "trailing data" chapter11 --load-npy "$tmp/trailing"
expect 2 "bad value '6' for --step" chapter12 --step 6
expect 2 "head dim 80 is not supported" chapter12 --dim 80
expect 2 "the backward (step 5): head dim 96 is not supported" chapter12 --dim 96 --step 5
expect 2 "--ladder and --step cannot be combined" chapter12 --ladder --step 5
expect 2 "--bandwidth and --max-seq cannot be combined" chapter12 --bandwidth --max-seq
expect 2 "--timeline and --no-bench cannot be combined" chapter12 --timeline --no-bench
expect 2 "--virtual and --rendezvous cannot be combined" chapter12 --virtual 2 --rendezvous "$tmp/id"
WORLD_SIZE=2 expect 2 "needs --rendezvous PATH" chapter12
WORLD_SIZE=2 expect 2 "--virtual runs every rank in one process" chapter12 --virtual 2
WORLD_SIZE=x expect 2 "environment variable WORLD_SIZE='x'" chapter12
WORLD_SIZE=2 RANK=2 expect 2 "environment variable RANK='2'" chapter12 --rendezvous "$tmp/id"

echo "-- good input: exit status 0 with a GPU that runs the program, 3 ('no CUDA device') without one"
# good STATUS-WITH-A-GPU PROGRAM ARGS...
good() {
  local with_gpu=$1
  shift
  if [ $gpu = 1 ]; then expect "$with_gpu" "" "$@"; else expect 3 "no CUDA device" "$@"; fi
}
expect 0 "safe softmax matches" chapter1 --rows 64 --cols 64 --no-bench
expect 0 "input loaded from" chapter1 --load-npy "$tmp/rows_fp16" --no-bench
expect 0 "CPU checks passed" chapter2 --cpu-only --rows 64 --cols 64
if [ $gpu = 0 ]; then
  expect 3 "CPU checks passed; the GPU kernels were not run" chapter2 --rows 64 --cols 64 --no-bench
else
  expect 0 "all checks passed" chapter2 --rows 64 --cols 64 --no-bench
fi
for n in 3 4 5 6 8; do good 0 chapter$n "${small[@]}" --no-bench; done
good 0 chapter5 --load-npy "$tmp/fp16" --no-bench
good 0 chapter7 --load-npy "$tmp/fp16" --dtype fp16 --no-bench
good "$([ "$cc" = 90 ] && echo 0 || echo 3)" chapter9 --load-npy "$tmp/fp16" --no-bench  # needs compute capability 9.0
good "$([ "$cc" = 90 ] && echo 0 || echo 3)" chapter11 --load-npy "$tmp/fp16" --no-bench  # the same
good 0 chapter10 --seq 256 --no-bench
good 0 chapter10 --batch 3 --cache-lens 1,17,300 --no-bench
good 0 chapter10 --load-npy "$tmp/decode" --no-bench
good 0 chapter12 "${small[@]}" --virtual 2 --step 5 --causal --no-bench
good 0 chapter12 "${small[@]}" --virtual 3 --max-seq

if [ $bad -ne 0 ]; then
  echo "check_inputs: some programs ended with another exit status (FAIL lines above)"
  exit 1
fi
echo "check_inputs: every program ended as the README's table of exit statuses says"
