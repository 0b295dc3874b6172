#!/usr/bin/env python3
"""PyTorch's attention backward next to chapters 6 and 8 (a comparison only; the course does not
use PyTorch). Times torch.autograd.grad through scaled_dot_product_attention with one SDPA backend
at a time. Median of 10 timed runs after 2 warm-ups, CUDA events; FLOPs as the chapters count them
(2.5 x 4*B*H*N^2*D, half when causal); shapes of the course's grid (batch*N = 16384 tokens,
heads = 2048/D). Timing only: the chapters' tests check their gradients against float64.

    python3 tools/pytorch_backward.py                      fp32: 'efficient' (CUTLASS) and 'math', TF32 off (chapter 6)
    python3 tools/pytorch_backward.py --dtype bf16         16-bit: 'flash' (FlashAttention-2) and 'cudnn' (chapter 8)
    python3 tools/pytorch_backward.py --dtype fp16 --dims 64 128 --seqs 2048 8192 --causal 0 1 --train

--train also times forward + backward (a training step's attention).
"""
import argparse

import torch
from torch.nn.attention import sdpa_kernel, SDPBackend

ap = argparse.ArgumentParser()
ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
ap.add_argument("--dims", type=int, nargs="+", default=None)
ap.add_argument("--seqs", type=int, nargs="+", default=None)
ap.add_argument("--causal", type=int, nargs="+", default=None)
ap.add_argument("--train", action="store_true")
a = ap.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
backends = ([("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)] if a.dtype == "fp32"
            else [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)])
if a.dims or a.seqs or a.causal:
    shapes = [(D, N, bool(c)) for D in (a.dims or [64, 128]) for N in (a.seqs or [2048, 8192]) for c in (a.causal or [0])]
else:
    shapes = [(128, 8192, False), (64, 8192, False), (128, 2048, False), (64, 2048, False), (128, 8192, True)]
print("torch", torch.__version__, torch.cuda.get_device_name(), a.dtype)


def median_ms(fn):
    ts = []
    for _ in range(12):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record(); fn(); e.record()
        torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    return sorted(ts[2:])[len(ts[2:]) // 2]


for D, N, causal in shapes:
    B, H = 16384 // N, 2048 // D
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = ((torch.rand(B, H, N, D, device="cuda", generator=g) - 0.4).to(dtype) for _ in range(4))
    for x in (q, k, v): x.requires_grad_(True)
    flops = 2.5 * 4 * B * H * N * N * D * (0.5 if causal else 1)
    for name, be in backends:
        try:
            with sdpa_kernel(be):
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                ms = median_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
                line = (f"D={D} N={N} B={B} H={H} causal={int(causal)} {a.dtype} {name:9s} backward {ms:8.3f} ms "
                        f"{flops/ms/1e9:7.1f} TF/s")
                if a.train:
                    def step():
                        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        torch.autograd.grad(out, (q, k, v), do)
                    tms = median_ms(step)
                    line += f"  fwd+bwd {tms:8.3f} ms {flops * 1.4 / tms / 1e9:7.1f} TF/s"
                print(line, flush=True)
        except Exception as ex:
            print(f"D={D} N={N} causal={int(causal)} {a.dtype} {name}: failed: {str(ex)[:100]}", flush=True)
        torch.cuda.empty_cache()
