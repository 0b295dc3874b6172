#!/usr/bin/env bash
# Device call 2 (session of 2026-11-26, 20:12 UTC on): where step 6's c2 (FA2's layout, 263 TF/s
# in call 1) and FlashAttention-2's own backward (288 TF/s) differ. Same tree as call 1. Nsight
# Compute of the three dK/dV kernels (FA2's from PyTorch, step 6 c2, step 5 c9) at D = 128,
# N = 8192, B = 1, H = 16, bf16, with instruction counts; and the opcode mix of c2's and c9's SASS.
set -u -o pipefail
W=/tmp/call2; mkdir -p $W
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call2.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
make -j16 ARCH=sm_90 chapter8 > $W/build.txt 2>&1; log "build rc=$?"
M=gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size,launch__block_size,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio$
# instruction classes, in a second pass (a name this ncu lacks must not cost the first)
M2=smsp__inst_executed_op_ldsm.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_op_shared_st.sum,smsp__inst_executed_op_global_red.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_xu.sum
cat > $W/fa2.py <<'PY'
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = ((torch.rand(1, 16, 8192, 128, device="cuda", generator=g) - 0.4).to(torch.bfloat16) for _ in range(4))
for x in (q, k, v): x.requires_grad_(True)
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    for _ in range(3): torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()
PY
for m in M M2; do
  timeout 120 ncu --kernel-name regex:flash_bwd_dq_dk_dv --launch-skip 1 --launch-count 1 --metrics ${!m} python3 $W/fa2.py > $W/ncu-fa2-$m.txt 2>&1; log "ncu fa2 $m rc=$?"
  timeout 60 ncu --kernel-name regex:dkdv --launch-skip 2 --launch-count 1 --metrics ${!m} ./chapter8 --kernel 6 --tiles 2 --dq atomic --no-check --seq 8192 --batch 1 --heads 16 --dim 128 --repeat 3 > $W/ncu-k6c2-$m.txt 2>&1; log "ncu k6c2 $m rc=$?"
  timeout 60 ncu --kernel-name regex:dkdv --launch-skip 2 --launch-count 1 --metrics ${!m} ./chapter8 --kernel 5 --dq atomic --no-check --seq 8192 --batch 1 --heads 16 --dim 128 --repeat 3 > $W/ncu-k5c9-$m.txt 2>&1; log "ncu k5c9 $m rc=$?"
done
cuobjdump -sass chapter8 > $W/all.sass 2>/dev/null; log "sass rc=$?"
python3 - "$W" <<'PY'
import re, sys, collections
w = sys.argv[1]; text = open(w + "/all.sass").read()
funcs = re.split(r"\n\s*Function : ", text)
want = {"k6c2": "Fa2LayoutConfigILi128ELi8ELi128ELi64ELi2ELb0ELi32ELi4ELi32EEELb1E", "k5c9": "BwdConfigILi5ELi128ELi8ELi128ELi2ELb0ELi32ELi4ELi1EEELb1E"}
with open(w + "/sass-mix.txt", "w") as out:
    for name, key in want.items():
        for f in funcs:
            head = f.split("\n", 1)[0]
            if key in head and "bfloat16" in head:
                ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", f)
                c = collections.Counter(ops)
                out.write("%s %s: %d instructions\n" % (name, head[:160], len(ops)))
                for op, n in c.most_common(40): out.write("  %6d %s\n" % (n, op))
                open("%s/%s.sass" % (w, name), "w").write(f)
PY
log "end"
