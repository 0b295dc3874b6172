#!/usr/bin/env bash
# Device call 2 (session of 2026-11-27): call 1's tree plus line 15's adds from one lane pointer
# (every add at an immediate offset) and without a row check in Q_i tiles that end before N, and
# step 6 candidates with float2 (c5: c2, c6: c4; D = 64: c5 is c1) and scalar (c7: c4) dQ atomics.
# Their [gpu] tests on the small grid, the sweeps beside FA2 (same call), Nsight Compute of c6.
set -u -o pipefail
W=/tmp/call2; mkdir -p $W
CI=$PWD/.deps/include
T0=$SECONDS
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $W/timeline.txt; }
pack() { tar -C $W -czf $OUT/call2.tar.gz .; cp $W/timeline.txt $OUT/; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; date -u; } > $W/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI chapter8 build/tests/chapter08_test > $W/build.txt 2>&1; log "build rc=$?, warnings: $(grep -ci warning $W/build.txt)"
FA_TEST_SMALL=1 timeout 90 build/tests/chapter08_test "[gpu][v6]" > $W/ch8-tests-v6-small.txt 2>&1; log "ch8 v6 small rc=$?: $(tail -n 2 $W/ch8-tests-v6-small.txt | tr '\n' ' ')"
{ for a in "--seq 8192 --batch 2 --heads 16 --dim 128" "--seq 4096 --batch 4 --heads 16 --dim 128" \
           "--seq 8192 --batch 2 --heads 16 --dim 128 --causal" \
           "--seq 8192 --batch 2 --heads 32 --dim 64" "--seq 4096 --batch 4 --heads 32 --dim 64"; do
    echo "### ./chapter8 --sweep --no-check --dq atomic $a --repeat 10"
    timeout 60 ./chapter8 --sweep --no-check --dq atomic $a --repeat 10 2>&1 | sed -n '/^kernel  /,$p' | grep -v "^5-tuned-c[0-8] "
  done
  echo "### python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 4096 8192 --causal 0 1"
  timeout 150 python3 tools/pytorch_backward.py --dtype bf16 --dims 64 128 --seqs 4096 8192 --causal 0 1 2>&1 | grep -v Warning
} > $W/ch8-sweeps.txt 2>&1; log "sweeps done"
S="--import-source no --section SourceCounters --section WarpStateStats --section ComputeWorkloadAnalysis --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"
timeout 90 ncu $S --kernel-name regex:dkdv --launch-skip 2 --launch-count 1 -o $W/c6 ./chapter8 --kernel 6 --tiles 6 --dq atomic --no-check --seq 8192 --batch 1 --heads 16 --dim 128 --repeat 3 > $W/ncu-c6.log 2>&1; log "ncu c6 rc=$?"
ncu -i $W/c6.ncu-rep --page details > $W/c6-details.txt 2>&1
ncu -i $W/c6.ncu-rep --page source --csv --print-source sass > $W/c6-source.csv 2>&1; log "source page rc=$?"
log "end"
