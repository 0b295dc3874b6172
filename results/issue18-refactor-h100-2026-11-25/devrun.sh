#!/usr/bin/env bash
# core18's device call: build (after = this branch, before = main), ladder timings on a quiet GPU,
# the edit-loop timings, then make test, make sanitize and make check-exercises side by side.
set -u
CI=$(cd ../../.deps/include && pwd)
A=(ARCH=sm_90 CATCH2_INCLUDE=$CI)
B=../core18-before
T0=$(date +%s.%N)
now() { awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN{printf "%.1f", a-b}'; }
log() { echo "[t=$(now) s] $*"; }
timed() { local s rc; s=$(date +%s.%N); "$@"; rc=$?; echo "  -> rc=$rc, $(awk -v a="$(date +%s.%N)" -v b="$s" 'BEGIN{printf "%.1f", a-b}') s: $*"; }
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -2; date -u
  log "build after"; timed make -j16 "${A[@]}" all tests
  log "build before (main)"; timed make -C $B -j16 "${A[@]}" chapter5
} > $OUT/build.txt 2>&1
{
  L=(--ladder --no-compare --seq 8192 --dim 128 --batch 4 --heads 8 --repeat 10)
  date -u; echo "command: ./chapter5 ${L[*]} --csv FILE, alternating after/before"
  for r in 1 2; do
    log "after, round $r"; ./chapter5 "${L[@]}" --csv $OUT/ladder-after.csv
    log "before, round $r"; (cd $B && ./chapter5 "${L[@]}" --csv $OUT/ladder-before.csv)
  done
} > $OUT/ladder.txt 2>&1
{
  K=chapters/05_flash_attention_2/kernels.cu
  log "edit loop, with a rebuild: touch $K; make test-chapter5 VARIANT=2"
  touch $K; timed make -j16 "${A[@]}" test-chapter5 VARIANT=2
  log "the same for VARIANT=2.4"; touch $K; timed make -j16 "${A[@]}" test-chapter5 VARIANT=2.4
  log "the whole chapter: touch $K; make test-chapter5"; touch $K; timed make -j16 "${A[@]}" test-chapter5
  log "rebuild alone"; touch $K; timed make -j16 "${A[@]}" build/tests/chapter05_test
  log "runs alone (no rebuild)"
  timed make "${A[@]}" test-chapter5 VARIANT=2; timed make "${A[@]}" test-chapter5 VARIANT=2.4; timed make "${A[@]}" test-chapter5
} > $OUT/loop.txt 2>&1
left=$(awk -v n="$(now)" 'BEGIN{printf "%d", 570 - n}')
echo "phase 3 gets $left s" >> $OUT/loop.txt
(timeout $left make "${A[@]}" test > $OUT/test.txt 2>&1; echo "make test rc=$?" >> $OUT/test.txt) &
(timeout $left make "${A[@]}" sanitize > $OUT/sanitize.txt 2>&1; echo "make sanitize rc=$?" >> $OUT/sanitize.txt) &
(timeout $left make "${A[@]}" check-exercises CHECK_EXERCISES_ONLY="4 5 6 7" > $OUT/exercises.txt 2>&1; echo "check-exercises rc=$?" >> $OUT/exercises.txt) &
wait
log "all done" >> $OUT/loop.txt
