#!/usr/bin/env bash
# Device call 4 (session of 2026-11-27, 05:55 UTC on): the four [gpu] test cases of chapter 8 that
# call 1's deadline left unrun at full size (they come after the one call 3 ran); then chapter 7
# beside PyTorch's flash and cuDNN forwards, the command of 2026-11-23 (results/README.md), since
# chapter 7's timings moved with tc::load_tile's cp.async zero fill (call 3's bench). Logs and the
# CSV go straight to $OUT.
set -u -o pipefail
CI=$PWD/.deps/include
T0=$SECONDS; DEADLINE=575
log() { echo "[t=$((SECONDS - T0)) s] $*" | tee -a $OUT/timeline.txt; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nvcc --version | tail -n 2; python3 -c "import torch; print('torch', torch.__version__)"; date -u; } > $OUT/env.txt 2>&1
make -j16 ARCH=sm_90 CATCH2_INCLUDE=$CI build/tests/chapter08_test chapter7 > /tmp/build.txt 2>&1; rc=$?
{ echo "### build rc=$rc"; grep -iE "warning|error" /tmp/build.txt; } >> $OUT/env.txt
log "build rc=$rc, warnings: $(grep -ci warning /tmp/build.txt)"
spec="ch8 GPU: every tile candidate of steps 5 and 6"
spec+=",ch8 GPU: the float2 and float4 dQ atomic candidates on the shape grid (atomic dQ\, 2x rule)"
spec+=",ch8 GPU: on compute capability 9.0 the vector dQ candidates run vector atomics"
spec+=",ch8 GPU: the atomic strategy's workspace starts from zero on every run"
timeout $(left) build/tests/chapter08_test "$spec" > $OUT/ch08-last-four-full.txt 2>&1
log "ch08 last four [gpu] cases, full size rc=$?: $(grep -E '^(All tests|test cases:|test-summary)' $OUT/ch08-last-four-full.txt | tr '\n' ' ')"
timeout $(left) python3 tools/compare_pytorch.py --chapters 7 --dims '64 128' --seq '2048 8192' \
  --out $OUT/pytorch-nvidia-h200-2026-11-27b-ch7.csv > $OUT/compare-pytorch-ch7.txt 2>&1
log "compare_pytorch ch7 rc=$?"
log "end"
