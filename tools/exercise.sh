#!/usr/bin/env bash
# Bug-hunt exercises (docs/exercises.md): one planted bug, in a copy of the course you can edit.
#   tools/exercise.sh                 list every exercise
#   tools/exercise.sh CH              list chapter CH's exercises
#   tools/exercise.sh CH BUG          copy the sources to exercises-work/chCH-bugBUG/, apply
#                                     chapters/NN_*/exercises/bugBUG.patch there, build chapter CH's
#                                     test binary there and run its tests (they fail: find out why)
#   tools/exercise.sh --answer CH BUG print the planted change (make exercise-answer)
# `make exercise CH=5 BUG=2` calls it. Running it again reuses the folder (your edits stay) and
# rebuilds only what changed; RESET=1 starts over from the repository's sources.
#
# Environment (the Makefile passes its own values): ARCH, CATCH2_INCLUDE, NVCC, EXTRA_NVCCFLAGS as
# for make; BUILD, the repository's build folder, whose objects seed the copy when they were built
# with the same flags (so only the files the patch touches are compiled); TEST_ARGS, a Catch2 test
# spec that replaces the exercise's own; RESET=1.
#
# tools/check_exercises.sh sources this file for the functions below (ex_*).
set -u

EX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
EX_WORK="$EX_ROOT/exercises-work"

# ---- the exercises -----------------------------------------------------------------------------

# The patch file of (chapter, bug), or nothing.
ex_patch() {
    local f
    for f in "$EX_ROOT"/chapters/"$(printf '%02d' "$1")"_*/exercises/bug"$2".patch; do
        [ -f "$f" ] && echo "$f"
    done
}

# Every exercise as "chapter bug patch-file", in order.
ex_all() {
    local f ch bug
    for f in "$EX_ROOT"/chapters/[0-9][0-9]_*/exercises/bug*.patch; do
        [ -f "$f" ] || continue
        ch=$(basename "$(dirname "$(dirname "$f")")")
        ch=$((10#${ch%%_*}))
        bug=$(basename "$f" .patch)
        echo "$ch ${bug#bug} $f"
    done | sort -n -k1,1 -k2,2
}

# A field of a patch header: "# Key: value", continued on lines "#   more".
ex_field() {
    awk -v key="# $2: " '
        /^(---|\+\+\+|@@|diff )/ { exit }
        found && /^#   / { sub(/^#   /, ""); printf " %s", $0; next }
        found { exit }
        index($0, key) == 1 { printf "%s", substr($0, length(key) + 1); found = 1 }
    ' "$1"
}

ex_chapter_dir() { basename "$(dirname "$(dirname "$1")")"; }

# ---- building a copy ---------------------------------------------------------------------------

# make's variables for a work folder: the repository's choices, build folder `build`.
ex_make_vars() {
    EX_VARS=(BUILD=build)
    [ -n "${ARCH:-}" ] && EX_VARS+=("ARCH=$ARCH")
    [ -n "${NVCC:-}" ] && EX_VARS+=("NVCC=$NVCC")
    [ -n "${EXTRA_NVCCFLAGS:-}" ] && EX_VARS+=("EXTRA_NVCCFLAGS=$EXTRA_NVCCFLAGS")
    if [ -n "${CATCH2_INCLUDE:-}" ]; then
        case "$CATCH2_INCLUDE" in
            /*) EX_VARS+=("CATCH2_INCLUDE=$CATCH2_INCLUDE") ;;
            *) EX_VARS+=("CATCH2_INCLUDE=$EX_ROOT/$CATCH2_INCLUDE") ;;
        esac
    fi
    # a make above us (make exercise) must not hand its own variables, -j or jobserver down
    unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES
}

# The repository's build folder (BUILD, relative to the repository or absolute).
ex_repo_build() {
    case "${BUILD:-build}" in
        /*) echo "$BUILD" ;;
        *) echo "$EX_ROOT/${BUILD:-build}" ;;
    esac
}

# The test binary of chapter $1, relative to a work folder.
ex_test_bin() { printf 'build/tests/chapter%02d_test' "$1"; }

# The chapters whose objects chapter $1's test binary links (itself and its USES_N line).
ex_link_chapters() {
    echo "$1 $(sed -n "s/^USES_$1 *:= *//p" "$EX_ROOT/Makefile")"
}

# Copies what a build needs (Makefile, common/, tests/, chapters/ without the exercises, the
# Makefile's Catch2 finder) into $1, keeping modification times, so that objects copied next to it
# are up to date.
ex_copy_sources() {
    mkdir -p "$1/tools"
    rm -rf "$1/Makefile" "$1/common" "$1/tests" "$1/chapters"
    cp -a "$EX_ROOT/Makefile" "$EX_ROOT/common" "$EX_ROOT/tests" "$EX_ROOT/chapters" "$1/"
    cp -a "$EX_ROOT/tools/find_catch2.sh" "$1/tools/"
    rm -rf "$1"/chapters/*/exercises
}

# The name of the flags stamp make would use in work folder $1 (build/flags-<hash>).
ex_stamp() {
    make -s --no-print-directory -C "$1" "${EX_VARS[@]}" -f Makefile \
        -f <(printf 'ex-print-stamp:\n\t@echo $(notdir $(FLAGS_STAMP))\n') ex-print-stamp 2>/dev/null
}

# Copies file $1 to $2 keeping its time; an object file is hard-linked instead (no disk space; the
# Makefile writes every object as a new file, so a rebuild on either side leaves the other alone).
ex_copy_file() {
    mkdir -p "$(dirname "$2")"
    case "$1" in
        *.o) ln -f "$1" "$2" 2>/dev/null || cp -a "$1" "$2" ;;
        *) cp -a "$1" "$2" ;;
    esac
}

# Copies into $2/build the objects of build folder $1 that chapter $3's test binary links, when $1
# was built with the flags of this run ($4, the stamp name). Returns 1 when it has nothing to copy.
ex_seed() {
    local from=$1 to=$2/build ch=$3 stamp=$4 c d f
    [ -n "$stamp" ] && [ -f "$from/$stamp" ] || return 1
    mkdir -p "$to/tests" "$to/chapters"
    rm -f "$to"/flags-* "$to"/catch2-*
    cp -a "$from/$stamp" "$to/"
    cp -a "$from"/catch2-* "$to/" 2>/dev/null
    for c in $(ex_link_chapters "$ch"); do
        d=$(basename "$EX_ROOT"/chapters/"$(printf '%02d' "$c")"_*)
        [ -d "$from/chapters/$d" ] || continue
        rm -rf "$to/chapters/$d"
        while IFS= read -r f; do ex_copy_file "$from/$f" "$to/$f"; done \
            < <(cd "$from" && find "chapters/$d" -type f)
    done
    for f in "$from"/tests/main.[od] "$from"/tests/"$(printf 'chapter%02d_test' "$ch")".[od]; do
        [ -f "$f" ] && ex_copy_file "$f" "$to/tests/$(basename "$f")"
    done
    return 0
}

# Applies patch $2 in folder $1.
ex_apply() {
    if command -v patch >/dev/null; then
        (cd "$1" && patch -p1 -s --no-backup-if-mismatch <"$2")
    else  # git apply, kept from walking up into the repository that holds exercises-work/
        (cd "$1" && GIT_CEILING_DIRECTORIES="$(dirname "$1")" git apply "$2")
    fi
}

# Builds chapter $2's test binary in work folder $1 with `make -j$3`, output to $4. Prints the
# sources it compiled.
ex_build() {
    local dir=$1 ch=$2 jobs=$3 log=$4 status
    make -C "$dir" -j"$jobs" "${EX_VARS[@]}" "$(ex_test_bin "$ch")" >"$log" 2>&1
    status=$?
    EX_COMPILED=$(grep -oE ' -c [^ ]+' "$log" | sed 's/^ -c //' | tr '\n' ' ')
    return $status
}

ex_have_gpu() { nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }

# The test cases that failed in a Catch2 console log, with their failed assertions:
# "  <count> failed assertions  <name>", one line each, in order.
ex_failed_cases() {
    awk '
        BEGIN { dashes = sprintf("%79s", ""); gsub(/ /, "-", dashes) }
        $0 == dashes { if (inhead) { inhead = 0; if (!(name in seen)) { seen[name] = 0; order[++n] = name } }
                       else { inhead = 1; name = "" }
                       next }
        inhead { line = $0; sub(/^ +/, "", line); name = (name == "" ? line : name " " line); next }
        /: FAILED:$/ && name != "" { seen[name]++ }
        END { for (i = 1; i <= n; ++i) if (seen[order[i]] > 0)
                  printf "  %4d failed assertion%s  %s\n", seen[order[i]], (seen[order[i]] > 1 ? "s" : " "), order[i] }
    ' "$1"
}

# What a student needs from a long test log: the first failure in full (at most $2 lines), the
# test cases that failed, the totals.
ex_summarize() {
    local log=$1 max=${2:-45} first
    first=$(grep -n ': FAILED:$' "$log" | head -n 1 | cut -d: -f1)
    if [ -n "$first" ]; then
        local head_line
        head_line=$(head -n "$first" "$log" | grep -nE '^-{79}$' | tail -n 2 | head -n 1 | cut -d: -f1)
        local second
        second=$(grep -n ': FAILED:$' "$log" | sed -n 2p | cut -d: -f1)
        echo "-- the first failure:"
        sed -n "${head_line:-$first},${second:-\$}p" "$log" | head -n "$max" | sed '$d'
        echo "   ..."
        echo "-- the test cases that failed:"
        ex_failed_cases "$log"
    fi
    grep -E '^(test-summary:|\*\*\* |[0-9]+ GPU test cases not run|[0-9]+ passed, [0-9]+ failed)' "$log"
}

# ---- make exercise -----------------------------------------------------------------------------

ex_list() {
    local ch bug f shown=0
    while read -r ch bug f; do
        [ -n "${1:-}" ] && [ "$ch" != "$1" ] && continue
        local sym
        sym=$(ex_field "$f" Symptom)
        [ "${#sym}" -gt 84 ] && sym="${sym:0:81}..."
        printf '  CH=%s BUG=%s  %-8s  %s\n' "$ch" "$bug" "$(ex_field "$f" Where)" "$sym"
        shown=1
    done < <(ex_all)
    [ "$shown" = 1 ]
}

ex_main() {
    local ch=${1:-} bug=${2:-}
    if [ -z "$ch" ] || [ -z "$bug" ]; then
        if ! ex_list "$ch" >/dev/null; then
            echo "make exercise: chapter '$ch' has no exercises. The exercises are:" >&2
            ex_list >&2
            return 2
        fi
        echo "Bug-hunt exercises: a planted bug, the chapter's tests that catch it, and you (docs/exercises.md)."
        echo
        ex_list "$ch"
        echo
        echo "Pick one: make exercise CH=N BUG=K (RESET=1 starts its folder over). Where: cpu = caught by the"
        echo "[cpu] tests, no GPU needed; gpu = needs a GPU; gpu-race = caught by compute-sanitizer racecheck."
        return 0
    fi
    local patch
    patch=$(ex_patch "$ch" "$bug")
    if ! [[ "$ch" =~ ^[0-9]+$ && "$bug" =~ ^[0-9]+$ ]] || [ -z "$patch" ]; then
        echo "make exercise: there is no exercise CH=$ch BUG=$bug. The exercises are:" >&2
        ex_list >&2
        return 2
    fi
    ch=$((10#$ch)) bug=$((10#$bug))
    ex_make_vars
    local where tests sanitizer dir rel bin gpu=0
    where=$(ex_field "$patch" Where)
    tests=$(ex_field "$patch" Tests)
    sanitizer=$(ex_field "$patch" Sanitizer)
    dir="$EX_WORK/ch$ch-bug$bug"
    rel=${dir#"$EX_ROOT"/}
    bin=$(ex_test_bin "$ch")
    ex_have_gpu && gpu=1

    echo "== Exercise: chapter $ch, bug $bug ($where)"
    echo "Symptom to look for: $(ex_field "$patch" Symptom)"
    echo
    if [ -d "$dir" ] && [ -z "${RESET:-}" ]; then
        echo "Continuing in $rel/ (your edits there are kept; RESET=1 starts over)."
    else
        rm -rf "$dir"
        ex_copy_sources "$dir"
        local stamp
        stamp=$(ex_stamp "$dir")
        ex_seed "$(ex_repo_build)" "$dir" "$ch" "$stamp" ||
            ex_seed "$EX_WORK/.base/build" "$dir" "$ch" "$stamp" ||
            echo "(no build of the repository with these flags to start from: building chapter $ch from scratch)"
        if ! ex_apply "$dir" "$patch"; then
            echo "make exercise: $patch does not apply to the current sources (docs/exercises.md)." >&2
            return 1
        fi
        echo "Copied the sources to $rel/ and planted the bug there."
    fi
    echo "Building $bin in $rel/ ..."
    if ! ex_build "$dir" "$ch" "$(nproc)" "$dir/build.log"; then
        tail -n 30 "$dir/build.log"
        echo
        echo "The build failed (full log: $rel/build.log)."
        return 1
    fi
    echo "compiled: ${EX_COMPILED:-nothing, the binary was up to date}"
    echo

    local spec status=0
    if [ -n "${TEST_ARGS:-}" ]; then
        spec=$TEST_ARGS
    elif [ "$where" = cpu ] || [ "$gpu" = 1 ]; then
        spec=$tests
    else
        spec=""  # every test case; without a GPU the [gpu] ones are skipped
    fi
    local args=()
    if [ -n "${TEST_ARGS:-}" ]; then
        eval "args=($TEST_ARGS)"  # quoted the way make's test-chapterN recipe would quote it
    elif [ -n "$spec" ]; then
        args=("$spec")
    fi
    echo "== Running $bin ${spec:-(all test cases)} (full output: $rel/test.log)"
    (cd "$dir" && tests/run_tests.sh "$bin" -- "${args[@]}" >test.log 2>&1)
    status=$?
    ex_summarize "$dir/test.log"
    local unchecked=0
    if [ "$where" != cpu ] && [ "$gpu" = 0 ]; then
        echo
        # tests/run_tests.sh: 1 a test case failed; 2 or 3 nothing was checked (no test case matched,
        # or every one selected needs a GPU)
        if [ "$status" -eq 1 ]; then
            echo "No CUDA device here, so the [gpu] test cases were skipped; the [cpu] tests above caught the"
            echo "bug anyway (chapter 7's [cpu] tests run the kernels' own source in a CPU emulator)."
        else
            echo "This bug lives in GPU code and its tests need a CUDA device: the [gpu] test cases were"
            echo "skipped here, and the [cpu] tests cannot see it, so nothing was checked."
            unchecked=1 status=1
        fi
    fi
    if [ -n "$sanitizer" ] && [ "$gpu" = 1 ]; then
        echo
        echo "== compute-sanitizer --tool $sanitizer on $bin \"$tests\" (small shapes: FA_TEST_SMALL=1)"
        if ! command -v compute-sanitizer >/dev/null; then
            echo "compute-sanitizer not found (it ships with the CUDA Toolkit, in \$CUDA_HOME/bin)."
            status=1
        else
            (cd "$dir" && FA_TEST_SMALL=1 compute-sanitizer --tool "$sanitizer" --error-exitcode 99 \
                "$bin" "$tests" >"$dir/$sanitizer.log" 2>&1)
            local s=$?
            grep -E '^========= (Error|Warning|.*SUMMARY)|^=========     (at|by thread)' "$dir/$sanitizer.log" | head -n 12
            echo "(full report: $rel/$sanitizer.log)"
            [ "$s" -ne 0 ] && status=$s
        fi
    fi
    echo
    local own_mb
    own_mb=$(find "$dir" -type f -links 1 -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s / 1e6 }')
    echo "== The work folder is $rel/ (${own_mb} MB of its own; unchanged objects are shared with the"
    echo "   repository's build). RESET=1 starts it over; make clean-exercises removes every work folder."
    if [ "$unchecked" = 1 ]; then
        echo "   Read its sources with the symptom and the hints in mind; on a GPU machine, run"
        echo "   make exercise CH=$ch BUG=$bug there."
    elif [ "$status" -eq 0 ]; then
        echo "   Solved: the tests pass$([ -n "$sanitizer" ] && echo " and $sanitizer is clean"). Compare your fix with the explanation"
        echo "   at the end of chapters/$(ex_chapter_dir "$patch")/README.md."
    else
        echo "   Find the bug in its sources (not in the repository's), fix it there, and rerun"
        echo "   make exercise CH=$ch BUG=$bug        (rebuilds what you changed, reruns the tests)"
        echo "   It is solved when the tests pass$([ -n "$sanitizer" ] && echo " and $sanitizer is clean")."
        echo "   Hints, and the explanation once you are done: the end of chapters/$(ex_chapter_dir "$patch")/README.md;"
        echo "   the planted change itself, if you give up: make exercise-answer CH=$ch BUG=$bug."
    fi
    return "$status"
}

# make exercise-answer: the planted change of (chapter, bug), shown only when asked for.
ex_answer() {
    local patch
    patch=$(ex_patch "${1:-0}" "${2:-0}")
    if [ -z "$patch" ]; then
        echo "make exercise-answer: there is no exercise CH=${1:-} BUG=${2:-}; make exercise lists them." >&2
        return 2
    fi
    echo "The bug planted by make exercise CH=$1 BUG=$2 (the answer: the lines marked + are the bug,"
    echo "the lines marked - what they replaced). Why it fails: the end of chapters/$(ex_chapter_dir "$patch")/README.md."
    echo
    sed -n '/^[^#]/,$p' "$patch"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    if [ "${1:-}" = --answer ]; then
        shift
        ex_answer "$@"
    else
        ex_main "$@"
    fi
    exit $?
fi
