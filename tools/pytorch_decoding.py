#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on chapter 10's decoding shapes, for comparison.

    python3 tools/pytorch_decoding.py --out results/pytorch-decoding.csv
    python3 tools/pytorch_decoding.py --shapes 1,32,8,1,128,32768 --dtype bf16

For each shape (B, H_q, H_kv, q_len, D, N: every sequence holds N tokens, the q_len new ones last)
it times F.scaled_dot_product_attention(q, k, v, enable_gqa=True) with q (B, H_q, q_len, D) and
k, v (B, H_kv, N, D), once per backend (flash, efficient, cudnn; the math backend only checks):
CUDA events, L2 flushed and then filled with clean unrelated lines (as ./chapter10 times), the GPU
kept busy while Python enqueues each call, median. q_len > 1 uses the bottom-right causal
mask (new token i sees keys 0 .. N - q_len + i), as chapter 10 does. Each backend's O is compared
with the math backend in float32; the script times and checks only. Prints one line per
(shape, backend) and, with --out, writes the rows as CSV; the column kv_gbps counts the bytes of K
and V (2·B·H_kv·N·D elements) per second, chapter 10's figure of merit.
"""
import argparse
import csv
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION}
# The shapes of chapter 10's benchmark: B, H_q, H_kv, q_len, D, N.
DEFAULT_SHAPES = ([(1, 32, 8, 1, 128, n) for n in (4096, 8192, 16384, 32768, 131072)]
                  + [(1, 32, 8, 4, 128, 32768), (64, 32, 8, 1, 128, 4096), (8, 32, 8, 1, 128, 32768)])


def median_ms(fn, repeat, flush, clean):
    """Median of `repeat` event-timed calls of fn. Before each, as ./chapter10 does: L2 flushed
    (a fill), another buffer read (so that the fill's dirty lines are written back untimed), then a
    GPU sleep of about 50 us, so that Python has enqueued the call before the start event is reached
    (the events then time the GPU work, not the host's dispatch)."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(2):
        fn()
    times = []
    for i in range(repeat):
        flush.fill_(i & 0xFF)
        clean.sum(dtype=torch.int32)  # written back untimed: L2 holds clean, unrelated data
        torch.cuda._sleep(100_000)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="*", help="B,H_q,H_kv,q_len,D,N (default: the chapter's benchmark)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", help="CSV file to write")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes] if args.shapes else DEFAULT_SHAPES
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    dev = torch.device("cuda")
    flush = torch.empty(2 * torch.cuda.get_device_properties(dev).L2_cache_size, dtype=torch.uint8, device=dev)
    clean = torch.zeros_like(flush)
    print(f"device: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    rows = []
    for (B, Hq, Hkv, q_len, D, N) in shapes:
        gen = torch.Generator(device=dev).manual_seed(1)
        q = (torch.rand(B, Hq, q_len, D, device=dev, generator=gen) * 2 - 0.9).to(dtype)
        k = (torch.rand(B, Hkv, N, D, device=dev, generator=gen) * 2 - 0.8).to(dtype)
        v = (torch.rand(B, Hkv, N, D, device=dev, generator=gen) * 2 - 0.5).to(dtype)
        mask = causal_lower_right(q_len, N) if q_len > 1 else None
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True)
        kv_bytes = 2 * B * Hkv * N * D * q.element_size()
        for name, backend in BACKENDS.items():
            def run():
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            try:
                with sdpa_kernel(backend):
                    err = (run().float() - ref).abs().max().item()
                    ms = median_ms(run, args.repeat, flush, clean)
            except RuntimeError as e:  # the backend does not take this shape
                print(f"B={B} H_q={Hq} H_kv={Hkv} q_len={q_len} D={D} N={N} {name:9s} not supported: "
                      f"{str(e).splitlines()[0][:90]}")
                continue
            gbps = kv_bytes / (ms * 1e-3) / 1e9
            print(f"B={B} H_q={Hq} H_kv={Hkv} q_len={q_len} D={D} N={N} {name:9s} {ms * 1e3:9.2f} us "
                  f"{gbps:8.1f} GB/s  max|O - O_math| {err:.2e}")
            rows.append(dict(backend=name, dtype=args.dtype, batch=B, heads_q=Hq, heads_kv=Hkv, q_len=q_len,
                             dim=D, seq=N, median_us=round(ms * 1e3, 3), kv_gbps=round(gbps, 1),
                             max_abs_err_vs_math=f"{err:.3e}"))
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
