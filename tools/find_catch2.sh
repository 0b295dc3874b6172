#!/usr/bin/env bash
# Finds Catch2 (v2 or v3) for the tests, or fetches it without root, before anything is compiled.
#   tools/find_catch2.sh CATCH2_INCLUDE DEPS_DIR
# Prints one line for the Makefile: "VERSION INCLUDE_DIR [LIBRARY]", e.g. "2 -" (v2 on the
# compiler's own include path: no flag needed) or
# "3 /home/me/course/build/deps/usr/include /home/me/course/build/deps/usr/lib/libCatch2.a" (v3 is
# a compiled library, v2 a single header). Messages go to stderr; on failure it prints nothing and
# exits 1 with one line that says why.
#
# Where it looks, in order:
#   1. CATCH2_INCLUDE, when given: it must hold catch2/catch.hpp (v2) or catch2/catch_all.hpp (v3).
#   2. The C++ compiler's include path ($CXX, default g++); CATCH2_SYSTEM=0 skips it (CI does, to
#      prove step 4 on every run).
#   3. DEPS_DIR/usr/include: a copy fetched by an earlier run.
#   4. Debian/Ubuntu's package, downloaded with `apt-get download` (no root needed) and unpacked
#      into DEPS_DIR with dpkg-deb: `catch2` (v2 on Debian 12 and Ubuntu up to 24.04; on newer
#      releases a name for v3, whose files are in `libcatch2-dev`).
set -u
given=$1
deps=$2
say() { echo "find_catch2: $*" >&2; }

# "VERSION INCLUDE_DIR [LIBRARY]" of a Catch2 in include folder $1, or nothing.
probe() {
    local inc=$1 lib
    if [ -f "$inc/catch2/catch.hpp" ]; then
        echo "2 $inc"
    elif [ -f "$inc/catch2/catch_all.hpp" ]; then
        for lib in "$inc"/../lib/libCatch2.a "$inc"/../lib/*/libCatch2.a "$inc"/../lib64/libCatch2.a; do
            if [ -f "$lib" ]; then
                echo "3 $inc $(cd "$(dirname "$lib")" && pwd)/libCatch2.a"
                return
            fi
        done
        say "$inc has Catch2 v3's headers but no libCatch2.a in $inc/../lib*: Catch2 v3 is a compiled library."
    fi
}

absolute() { (cd "$1" 2>/dev/null && pwd); }

if [ -n "$given" ]; then
    dir=$(absolute "$given")
    found=${dir:+$(probe "$dir")}
    if [ -z "$found" ]; then
        say "CATCH2_INCLUDE=$given holds no Catch2 (neither catch2/catch.hpp, v2, nor catch2/catch_all.hpp, v3)."
        exit 1
    fi
    echo "$found"
    exit 0
fi

if [ "${CATCH2_SYSTEM:-1}" != 0 ]; then
    while read -r dir; do
        found=$(probe "$dir")
        # -isystem of a folder already searched would reorder the search (and break #include_next)
        if [ -n "$found" ]; then set -- $found; echo "$1 - ${3:-}"; exit 0; fi
    done < <("${CXX:-g++}" -x c++ -E -v - </dev/null 2>&1 |
             sed -n '/^#include <\.\.\.> search starts here:/,/^End of search list\./{/^ /s/^ *//p}')
fi

mkdir -p "$deps" && deps=$(absolute "$deps")
found=$(probe "$deps/usr/include")
if [ -n "$found" ]; then echo "$found"; exit 0; fi

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    say "Catch2 is not installed and this is no Debian/Ubuntu machine to fetch it from: install Catch2 v2 or v3, or pass CATCH2_INCLUDE=dir."
    exit 1
fi
if [ "${CATCH2_SYSTEM:-1}" = 0 ]; then why="CATCH2_SYSTEM=0 (an installed Catch2 is not used)"; else why="Catch2 is not installed"; fi
say "$why: fetching Debian's package into ${deps#"$PWD"/}/ (apt-get download; no root needed) ..."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for pkg in catch2 libcatch2-dev; do
    # as root, apt-get warns that it cannot drop privileges to download: harmless here
    if (cd "$tmp" && apt-get download -q "$pkg") >"$tmp/apt.log" 2>&1; then
        for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$deps" && rm -f "$deb"; done
        found=$(probe "$deps/usr/include")
        if [ -n "$found" ]; then
            say "using Catch2 v${found%% *} from ${deps#"$PWD"/}/usr/include"
            echo "$found"
            exit 0
        fi
    fi
done
say "could not fetch Catch2 ($(grep -E '^E:' "$tmp/apt.log" | head -n 1)); run 'sudo apt-get update' and retry, or install Catch2 (sudo apt-get install catch2) or pass CATCH2_INCLUDE=dir."
exit 1
