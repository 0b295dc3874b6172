#!/usr/bin/env bash
# Proves that the chapters' tests catch every planted bug (docs/exercises.md).
#   tools/check_exercises.sh          (make check-exercises)
# For every chapters/NN_*/exercises/bugK.patch: copy the sources to exercises-work/chN-bugK/, apply
# the patch, build chapter N's test binary there and run the test cases the patch header names
# (`# Tests:`); the bug is caught when they fail, or, for `# Where: gpu-race`, when they fail or
# compute-sanitizer (`# Sanitizer:`, on small shapes) reports an error. Bugs tagged `cpu` always
# run; `gpu` and `gpu-race` ones only where nvidia-smi lists a GPU, otherwise they are listed as
# skipped-no-gpu (never as caught). Every patch must still apply, whether it runs or not.
#
# Speed: one baseline copy (exercises-work/.base, kept between runs) is built once, seeded from the
# repository's build folder when that was built with the same flags; each bug's folder starts from
# the baseline's objects, so only the files its patch touches are compiled. Builds run
# EXERCISES_JOBS at a time (default: all cores), CPU test runs too, GPU runs
# EXERCISES_GPU_JOBS at a time (default 4; they share the one GPU, and the test cases the patches
# name check values only, so sharing cannot make them fail).
#
# Environment: ARCH, CATCH2_INCLUDE, NVCC, EXTRA_NVCCFLAGS, BUILD as for make (the Makefile passes
# them; without a GPU and without ARCH, the copies are built for EXERCISES_CPU_ARCH, default
# sm_75: see below); CHECK_EXERCISES_ONLY="5:2 7" runs bug 2 of chapter 5 and every bug of chapter 7;
# EXERCISES_JOBS; EXERCISES_GPU_JOBS; EXERCISES_TIMEOUT (seconds per test run, default 600);
# EXERCISES_KEEP=1 keeps the work folders of caught bugs too (those of the others are always kept);
# EXERCISES_CONTROL=1 first runs each distinct test command on the unmodified baseline and requires
# it to pass (the chapters' own tests already do that, so it is off by default).
# Prints one line per bug as it finishes, then the table; exits 1 if a patch no longer applies, a
# copy does not build, a run checks nothing or times out, or a bug survives.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/exercise.sh"

jobs=${EXERCISES_JOBS:-$(nproc)}
gpu_jobs=${EXERCISES_GPU_JOBS:-4}
timeout_s=${EXERCISES_TIMEOUT:-600}
logs="$EX_WORK/check-logs"
base="$EX_WORK/.base"
gpu=0
ex_have_gpu && gpu=1
# Without a GPU only the cpu bugs run, and the test cases they name never launch a kernel. So,
# unless the caller chose ARCH, the copies are built for sm_75 alone (EXERCISES_CPU_ARCH), where
# the tensor-core kernels compile to stubs (common/tensor_core/build.h): seconds per copy instead
# of the minutes of their full sm_80 code, which these runs would never execute.
if [ "$gpu" = 0 ] && [ -z "${ARCH:-}" ]; then ARCH=${EXERCISES_CPU_ARCH:-sm_75}; fi
ex_make_vars
start_all=$SECONDS

# ---- which bugs ---------------------------------------------------------------------------------
selected() {  # chapter bug
    [ -z "${CHECK_EXERCISES_ONLY:-}" ] && return 0
    local t
    for t in $CHECK_EXERCISES_ONLY; do
        [ "$t" = "$1" ] || [ "$t" = "$1:$2" ] && return 0
    done
    return 1
}

declare -a CH BUG WHERE TESTS SAN PATCH RESULT SECS T_START
n=0
bad=0
while read -r ch bug f; do
    selected "$ch" "$bug" || continue
    CH[n]=$ch BUG[n]=$bug PATCH[n]=$f
    WHERE[n]=$(ex_field "$f" Where)
    TESTS[n]=$(ex_field "$f" Tests)
    SAN[n]=$(ex_field "$f" Sanitizer)
    RESULT[n]="" SECS[n]=""
    case "${WHERE[n]}" in
        cpu | gpu | gpu-race) ;;
        *) RESULT[n]="BAD HEADER (Where: ${WHERE[n]})" bad=1 ;;
    esac
    if [ -z "${TESTS[n]}" ] || { [ "${WHERE[n]}" = gpu-race ] && [ -z "${SAN[n]}" ]; }; then
        RESULT[n]="BAD HEADER (Tests/Sanitizer)" bad=1
    fi
    n=$((n + 1))
done < <(ex_all)
if [ "$n" -eq 0 ]; then
    echo "check-exercises: no exercise matches CHECK_EXERCISES_ONLY='${CHECK_EXERCISES_ONLY:-}'"
    exit 1
fi

# Every selected patch must apply to the current sources, run or not.
rm -rf "$logs"
mkdir -p "$logs"
for ((i = 0; i < n; i++)); do
    [ -n "${RESULT[i]}" ] && continue
    rel=${PATCH[i]#"$EX_ROOT"/}
    if command -v patch >/dev/null; then
        (cd "$EX_ROOT" && patch -p1 --dry-run -s --no-backup-if-mismatch <"$rel" >/dev/null 2>&1)
    else
        (cd "$EX_ROOT" && git apply --check "$rel" >/dev/null 2>&1)
    fi || { RESULT[i]="PATCH DOES NOT APPLY"; bad=1; }
done

runnable() {  # index: should this bug be built and run here?
    [ -z "${RESULT[$1]}" ] && { [ "${WHERE[$1]}" = cpu ] || [ "$gpu" = 1 ]; }
}
for ((i = 0; i < n; i++)); do
    [ -z "${RESULT[i]}" ] && ! runnable "$i" && RESULT[i]="skipped-no-gpu"
done
if [ "$gpu" = 1 ] && ! command -v compute-sanitizer >/dev/null; then
    for ((i = 0; i < n; i++)); do
        [ "${WHERE[i]}" = gpu-race ] && [ -z "${RESULT[i]}" ] && RESULT[i]="NO compute-sanitizer" bad=1
    done
fi

echo "check-exercises: $n planted bugs; $([ "$gpu" = 1 ] && echo "GPU present: all of them run" ||
    echo "no GPU: the cpu ones run, gpu and gpu-race ones are skipped"); built for ${ARCH:-this machine}; ${jobs} jobs; logs in ${logs#"$EX_ROOT"/}/"

# ---- baseline -----------------------------------------------------------------------------------
declare -A need_ch=()
for ((i = 0; i < n; i++)); do runnable "$i" && need_ch[${CH[i]}]=1; done
if [ "${#need_ch[@]}" -gt 0 ]; then
    ex_copy_sources "$base"
    stamp=$(ex_stamp "$base")
    if [ -n "$stamp" ] && [ ! -f "$base/build/$stamp" ] && [ -f "$(ex_repo_build)/$stamp" ]; then
        rm -rf "$base/build"
        for c in "${!need_ch[@]}"; do ex_seed "$(ex_repo_build)" "$base" "$c" "$stamp"; done
        echo "baseline: seeded from ${BUILD:-build}/ (same flags)"
    fi
    targets=()
    for c in $(printf '%s\n' "${!need_ch[@]}" | sort -n); do targets+=("$(ex_test_bin "$c")"); done
    t0=$SECONDS
    echo "baseline: building ${targets[*]} in ${base#"$EX_ROOT"/}/ ..."
    if ! make -C "$base" -j"$jobs" "${EX_VARS[@]}" "${targets[@]}" >"$logs/baseline.log" 2>&1; then
        tail -n 30 "$logs/baseline.log"
        echo "check-exercises: the unmodified sources do not build (log: ${logs#"$EX_ROOT"/}/baseline.log)"
        exit 1
    fi
    rm -f "${targets[@]/#/$base/}"  # the bugs' folders link their own; only the objects are shared
    echo "baseline: ready [$((SECONDS - t0)) s]"
fi

# ---- build every runnable bug, $jobs at a time ------------------------------------------------
build_one() {  # index
    local i=$1 dir="$EX_WORK/ch${CH[$1]}-bug${BUG[$1]}" log="$logs/ch${CH[$1]}-bug${BUG[$1]}.build.log"
    rm -rf "$dir"
    ex_copy_sources "$dir"
    ex_seed "$base/build" "$dir" "${CH[i]}" "$stamp" >/dev/null
    ex_apply "$dir" "${PATCH[i]}" >"$log" 2>&1 || return 3
    ex_build "$dir" "${CH[i]}" 2 "$log"
}

# Runs "$fn index" for every index, at most $max at a time; "${fn}_done index status" runs here,
# in this shell, as each one ends (so it can print and record).
pool() {  # max fn indices...
    local max=$1 fn=$2 running=0 i
    shift 2
    rm -f "$logs"/.done.*
    for i in "$@"; do
        T_START[i]=$SECONDS
        ("$fn" "$i"; echo $? >"$logs/.done.$i") &
        running=$((running + 1))
        while [ "$running" -ge "$max" ]; do
            wait -n
            running=$((running - 1))
            pool_collect "$fn"
        done
    done
    while [ "$running" -gt 0 ]; do
        wait -n
        running=$((running - 1))
        pool_collect "$fn"
    done
    pool_collect "$fn"
}
pool_collect() {
    local f i
    for f in "$logs"/.done.*; do
        [ -f "$f" ] || continue
        i=${f##*.}
        "${1}_done" "$i" "$(cat "$f")"
        rm -f "$f"
    done
}

build_one_done() {  # index status
    if [ "$2" -eq 3 ]; then
        RESULT[$1]="PATCH DOES NOT APPLY"
    elif [ "$2" -ne 0 ]; then
        RESULT[$1]="BUILD FAILED"
    fi
    if [ -n "${RESULT[$1]}" ]; then
        bad=1
        printf '  ch%s bug%s: %s (log: %s)\n' "${CH[$1]}" "${BUG[$1]}" "${RESULT[$1]}" \
            "${logs#"$EX_ROOT"/}/ch${CH[$1]}-bug${BUG[$1]}.build.log"
    fi
}

to_build=()
for ((i = 0; i < n; i++)); do runnable "$i" && to_build+=("$i"); done
if [ "${#to_build[@]}" -gt 0 ]; then
    t0=$SECONDS
    echo "building ${#to_build[@]} copies with a planted bug ..."
    pool "$jobs" build_one "${to_build[@]}"
    echo "built [$((SECONDS - t0)) s]"
fi

# ---- run ----------------------------------------------------------------------------------------
# Verdict of one run from its exit status and log: caught, or why not.
verdict() {  # status log is-race
    local status=$1 log=$2 summary failed passed
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        echo "TIMEOUT (${timeout_s} s; EXERCISES_TIMEOUT raises it)"
        return
    fi
    summary=$(grep '^test-summary:' "$log" | tail -n 1)
    if [ "$3" = 1 ] && grep -qE '^========= ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9][0-9]* hazards? displayed \([1-9]' "$log"; then
        echo "caught (sanitizer)"
        return
    fi
    if [ -z "$summary" ]; then
        [ "$status" -ne 0 ] && echo "caught (crash, exit $status)" || echo "NO TESTS RAN"
        return
    fi
    passed=$(echo "$summary" | sed -n 's/.*passed=\([0-9]*\).*/\1/p')
    failed=$(echo "$summary" | sed -n 's/.*failed=\([0-9]*\).*/\1/p')
    if [ "$failed" -gt 0 ]; then
        echo "caught ($failed test case$([ "$failed" -gt 1 ] && echo s) failed)"
    elif [ "$status" -ne 0 ]; then
        echo "caught (exit $status)"
    elif [ "$passed" -eq 0 ]; then
        echo "NO TESTS RAN"
    elif [ "$3" = 1 ] && grep -q 'RACECHECK SUMMARY: [1-9]' "$log"; then
        echo "SURVIVED (racecheck warnings only)"
    else
        echo "SURVIVED"
    fi
}

# Runs bug i's test command in folder $2 (its own, or the baseline for a control run) into $3.
run_in() {  # index dir log
    local i=$1 log=$3 bin status race=0
    bin=$(ex_test_bin "${CH[i]}")
    cd "$2" || return 1
    if [ "${WHERE[i]}" = gpu-race ]; then
        race=1
        FA_TEST_SMALL=1 timeout -k 10 "$timeout_s" compute-sanitizer --tool "${SAN[i]}" \
            --error-exitcode 99 "$bin" "${TESTS[i]}" >"$log" 2>&1
    elif [ "${WHERE[i]}" = gpu ]; then
        FA_TEST_SMALL=1 timeout -k 10 "$timeout_s" "$bin" "${TESTS[i]}" >"$log" 2>&1
    else
        timeout -k 10 "$timeout_s" "$bin" "${TESTS[i]}" >"$log" 2>&1
    fi
    status=$?
    verdict "$status" "$log" "$race" >"$log.verdict"
}
run_one() { run_in "$1" "$EX_WORK/ch${CH[$1]}-bug${BUG[$1]}" "$logs/ch${CH[$1]}-bug${BUG[$1]}.log"; }

# Control runs (EXERCISES_CONTROL=1): each distinct test command once on the unmodified baseline,
# which must pass, so that "caught" means the bug made the difference.
run_control() { run_in "$1" "$base" "$logs/control-$1.log"; }
run_control_done() {  # representative index, status
    local r j
    r=$(cat "$logs/control-$1.log.verdict" 2>/dev/null || echo "NO VERDICT")
    printf '  control ch%s %-9s %-52s %s [%s s]\n' "${CH[$1]}" "${WHERE[$1]}" "${TESTS[$1]}" \
        "$([ "$r" = SURVIVED ] && echo passes || echo "FAILS: $r (log: ${logs#"$EX_ROOT"/}/control-$1.log)")" \
        "$((SECONDS - T_START[$1]))"
    [ "$r" = SURVIVED ] && return
    for ((j = 0; j < n; j++)); do
        [ "${CONTROL_OF[j]:-}" = "$1" ] && RESULT[j]="CONTROL FAILS (unmodified code)" && bad=1
    done
}

run_one_done() {  # index status
    local i=$1 r
    r=$(cat "$logs/ch${CH[i]}-bug${BUG[i]}.log.verdict" 2>/dev/null || echo "NO VERDICT")
    RESULT[i]=$r
    SECS[i]=$((SECONDS - T_START[i]))
    case "$r" in
        caught*) [ -z "${EXERCISES_KEEP:-}" ] && rm -rf "$EX_WORK/ch${CH[i]}-bug${BUG[i]}" ;;
        *) bad=1 ;;
    esac
    printf '  ch%s bug%s %-9s %s [%s s]\n' "${CH[i]}" "${BUG[i]}" "${WHERE[i]}" "$r" "${SECS[i]}"
}

declare -a CONTROL_OF
if [ -n "${EXERCISES_CONTROL:-}" ]; then
    declare -A rep=()
    controls=()
    for ((i = 0; i < n; i++)); do
        [ -z "${RESULT[i]}" ] || continue
        key="${CH[i]}|${WHERE[i]}|${TESTS[i]}|${SAN[i]}"
        [ -z "${rep[$key]:-}" ] && rep[$key]=$i && controls+=("$i")
        CONTROL_OF[i]=${rep[$key]}
    done
    if [ "${#controls[@]}" -gt 0 ]; then
        echo "control: the same ${#controls[@]} test commands on the unmodified baseline ..."
        pool "$gpu_jobs" run_control "${controls[@]}"
    fi
fi

cpu_runs=() gpu_runs=()
for ((i = 0; i < n; i++)); do
    [ -z "${RESULT[i]}" ] || continue
    if [ "${WHERE[i]}" = cpu ]; then cpu_runs+=("$i"); else gpu_runs+=("$i"); fi
done
if [ "${#cpu_runs[@]}" -gt 0 ]; then
    echo "running the [cpu] tests of ${#cpu_runs[@]} cpu bugs ..."
    pool "$jobs" run_one "${cpu_runs[@]}"
fi
if [ "${#gpu_runs[@]}" -gt 0 ]; then
    echo "running the GPU tests of ${#gpu_runs[@]} gpu and gpu-race bugs (small shapes, ${gpu_jobs} at a time) ..."
    pool "$gpu_jobs" run_one "${gpu_runs[@]}"
fi

# ---- table --------------------------------------------------------------------------------------
echo
printf '%-8s %-4s %-9s %-36s %s\n' chapter bug where result "time (s)"
caught=0 skipped=0
for ((i = 0; i < n; i++)); do
    printf '%-8s %-4s %-9s %-36s %s\n' "${CH[i]}" "${BUG[i]}" "${WHERE[i]}" "${RESULT[i]}" "${SECS[i]}"
    case "${RESULT[i]}" in
        caught*) caught=$((caught + 1)) ;;
        skipped-no-gpu) skipped=$((skipped + 1)) ;;
    esac
done
echo
echo "check-exercises: $caught caught, $skipped skipped (no GPU), $((n - caught - skipped)) not caught, of $n [$((SECONDS - start_all)) s]"
if [ "$bad" -ne 0 ]; then
    echo "check-exercises: FAILED. A bug that survives is a hole in the tests: fix the tests, not the bug."
    echo "(work folders of the bugs not caught are kept in ${EX_WORK#"$EX_ROOT"/}/; logs in ${logs#"$EX_ROOT"/}/)"
    exit 1
fi
exit 0
