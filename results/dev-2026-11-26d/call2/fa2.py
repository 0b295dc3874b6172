import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = ((torch.rand(1, 16, 8192, 128, device="cuda", generator=g) - 0.4).to(torch.bfloat16) for _ in range(4))
for x in (q, k, v): x.requires_grad_(True)
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    for _ in range(3): torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()
