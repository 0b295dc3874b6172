#!/usr/bin/env bash
# Finds MathJax 2 for the HTML docs, or fetches it without root (tools/make_docs.sh copies it into
# the HTML folder, so the formulas render offline wherever the folder goes).
#   tools/find_mathjax.sh DEPS_DIR
# Prints the absolute path of a MathJax 2 folder (one holding MathJax.js and the TeX web fonts).
# Messages go to stderr; on failure it prints nothing and exits 1 with one line that says why.
#
# Where it looks, in order:
#   1. MATHJAX_DIR, when given: a MathJax 2 folder (Debian's, or MathJax 2.7's own release).
#   2. Debian/Ubuntu's libjs-mathjax in /usr/share/javascript/mathjax; MATHJAX_SYSTEM=0 skips it
#      (to prove step 4 on a machine that has it).
#   3. DEPS_DIR/usr/share/javascript/mathjax: a copy fetched by an earlier run.
#   4. Debian/Ubuntu's packages libjs-mathjax and fonts-mathjax (its web fonts), downloaded with
#      `apt-get download` (no root needed) and unpacked into DEPS_DIR with dpkg-deb.
set -u
deps=$1
say() { echo "find_mathjax: $*" >&2; }
how="install Debian's libjs-mathjax (sudo apt-get install libjs-mathjax) or pass MATHJAX_DIR=a folder holding MathJax 2.7 (its release, with fonts)"

# Succeeds when folder $1 holds MathJax 2 with the TeX web fonts; says what is missing otherwise.
probe() {
    local dir=$1
    if [ ! -f "$dir/MathJax.js" ]; then
        return 1
    elif ! grep -q 'MathJax.version="2\.' "$dir/MathJax.js"; then
        say "$dir/MathJax.js is not MathJax 2 (the docs' pages are made for MathJax 2's MathJax.js)."
        return 1
    elif [ ! -d "$dir/fonts/HTML-CSS/TeX/woff" ]; then
        say "$dir has MathJax but not its TeX web fonts (fonts/HTML-CSS/TeX/woff; Debian: fonts-mathjax)."
        return 1
    fi
}

absolute() { (cd "$1" 2>/dev/null && pwd); }

if [ -n "${MATHJAX_DIR:-}" ]; then
    dir=$(absolute "$MATHJAX_DIR")
    if [ -z "$dir" ] || [ ! -f "$dir/MathJax.js" ]; then
        say "MATHJAX_DIR=$MATHJAX_DIR holds no MathJax.js (a MathJax 2 folder has it, and fonts/HTML-CSS/TeX/woff)."
        exit 1
    fi
    probe "$dir" || exit 1
    echo "$dir"
    exit 0
fi

system=/usr/share/javascript/mathjax
if [ "${MATHJAX_SYSTEM:-1}" != 0 ] && probe "$system"; then echo "$system"; exit 0; fi

mkdir -p "$deps" && deps=$(absolute "$deps")
if probe "$deps$system"; then echo "$deps$system"; exit 0; fi

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    say "MathJax 2 is not installed and this is no Debian/Ubuntu machine to fetch it from: $how."
    exit 1
fi
if [ "${MATHJAX_SYSTEM:-1}" = 0 ]; then why="MATHJAX_SYSTEM=0 (an installed MathJax is not used)"; else why="MathJax is not installed"; fi
say "$why: fetching Debian's libjs-mathjax into ${deps#"$PWD"/}/ (apt-get download; no root needed) ..."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# as root, apt-get warns that it cannot drop privileges to download: harmless here
if (cd "$tmp" && apt-get download -q libjs-mathjax fonts-mathjax) >"$tmp/apt.log" 2>&1; then
    for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$deps" && rm -f "$deb"; done
    if probe "$deps$system"; then
        say "using MathJax $(grep -o 'MathJax.version="[^"]*' "$deps$system/MathJax.js" | cut -d'"' -f2) from ${deps#"$PWD"/}$system"
        echo "$deps$system"
        exit 0
    fi
fi
say "could not fetch MathJax ($(grep -E '^E:' "$tmp/apt.log" | head -n 1)); run 'sudo apt-get update' and retry, or $how."
exit 1
