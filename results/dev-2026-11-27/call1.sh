#!/usr/bin/env bash
# Device call 1 (session of 2026-11-27): chapter 8 step 6 with (a) tile loads past N as cp.async
# with source size 0 (no ordinary zero stores, no predicated-off shared loads ptxas put beside each
# cp.async) and (b) Pᵀ/dSᵀ stores addressed from two offsets per k-step. Chapter 7 shares (a):
# its [gpu] tests too. Then the sweeps at the issue's shapes beside FA2 (same call), and Nsight
# Compute of step 6 c4 and of FA2's dK/dV kernel with per-instruction (SASS) counters.
set -u -o pipefail
W=/tmp/call1; mkdir -p $W
CI=$PWD/.deps/include
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call1.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; ncu --version | tail -n 1; date -u; } > $W/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI chapter7 chapter8 build/tests/chapter07_test build/tests/chapter08_test > $W/build.txt 2>&1; log "build rc=$?, warnings: $(grep -ci warning $W/build.txt)"
FA_TEST_SMALL=1 timeout 60 build/tests/chapter08_test "[gpu][v6]" > $W/ch8-tests-v6-small.txt 2>&1; log "ch8 v6 small rc=$?: $(tail -n 2 $W/ch8-tests-v6-small.txt | tr '\n' ' ')"
timeout 120 build/tests/chapter07_test "[gpu]" > $W/ch7-tests-gpu.txt 2>&1; log "ch7 gpu rc=$?: $(tail -n 2 $W/ch7-tests-gpu.txt | tr '\n' ' ')"
{ for a in "--seq 8192 --batch 2 --heads 16 --dim 128" "--seq 4096 --batch 4 --heads 16 --dim 128" \
           "--seq 8192 --batch 2 --heads 32 --dim 64" "--seq 4096 --batch 4 --heads 32 --dim 64"; do
    echo "### ./chapter8 --sweep --no-check --dq atomic $a --repeat 10"
    timeout 60 ./chapter8 --sweep --no-check --dq atomic $a --repeat 10 2>&1 | sed -n '/^kernel  /,$p'
  done
  echo "### python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 4096 8192 --causal 0"
  timeout 120 python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 4096 8192 --causal 0 2>&1 | grep -v Warning
} > $W/ch8-sweeps.txt 2>&1; log "sweeps done"
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
S="--import-source no --section SourceCounters --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --metrics gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
timeout 150 ncu $S --kernel-name regex:flash_bwd_dq_dk_dv --launch-skip 1 --launch-count 1 -o $W/fa2 python3 $W/fa2.py > $W/ncu-fa2.log 2>&1; log "ncu fa2 rc=$?"
timeout 90 ncu $S --kernel-name regex:dkdv --launch-skip 2 --launch-count 1 -o $W/c4 ./chapter8 --kernel 6 --tiles 4 --dq atomic --no-check --seq 8192 --batch 1 --heads 16 --dim 128 --repeat 3 > $W/ncu-c4.log 2>&1; log "ncu c4 rc=$?"
for r in fa2 c4; do
  ncu -i $W/$r.ncu-rep --page details > $W/$r-details.txt 2>&1
  ncu -i $W/$r.ncu-rep --page source --csv --print-source sass > $W/$r-source.csv 2>&1; log "source page $r rc=$? lines=$(wc -l < $W/$r-source.csv)"
done
log "end"
