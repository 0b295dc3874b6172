#!/usr/bin/env python3
"""PyTorch's fp32 attention backward next to chapter 6 (a comparison only; the course does not use
PyTorch). Times torch.autograd.grad through scaled_dot_product_attention with two backends:
'efficient' (a fused fp32 backward, CUTLASS) and 'math' (P materialized by the forward and kept by
autograd, like chapter 6's naive backward), TF32 off. Median of 10 timed runs after 2 warm-ups,
CUDA events; FLOPs as chapter 6 counts them (2.5 x 4*B*H*N^2*D, half when causal); shapes of the
course's grid (batch*N = 16384 tokens, heads = 2048/D). Timing only: chapter 6's tests check its
gradients against the float64 reference.

    python3 tools/pytorch_backward.py
"""
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
print("torch", torch.__version__, torch.cuda.get_device_name())
for D, N, causal in [(128, 8192, False), (64, 8192, False), (128, 2048, False), (64, 2048, False), (128, 8192, True)]:
    B, H = 16384 // N, 2048 // D
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = (torch.rand(B, H, N, D, device="cuda", generator=g) - 0.4 for _ in range(4))
    for x in (q, k, v): x.requires_grad_(True)
    flops = 2.5 * 4 * B * H * N * N * D * (0.5 if causal else 1)
    for name, be in [("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]:
        try:
            with sdpa_kernel(be):
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                ts = []
                for i in range(12):
                    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
                    s.record(); torch.autograd.grad(o, (q, k, v), do, retain_graph=True); e.record()
                    torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
                ms = sorted(ts[2:])[len(ts[2:]) // 2]
                print(f"D={D} N={N} B={B} H={H} causal={int(causal)} {name:9s} backward {ms:8.3f} ms {flops/ms/1e9:7.1f} TF/s")
        except Exception as ex:
            print(f"D={D} N={N} causal={int(causal)} {name}: failed: {str(ex)[:100]}")
        torch.cuda.empty_cache()
