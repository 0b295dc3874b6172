#!/usr/bin/env bash
# make docs: the HTML docs with Doxygen (docs/Doxyfile) into $BUILD/docs/html, their links made to
# work there (docs/html_links.py), then every local link checked (tools/check_links.py): a dead
# one fails the build.
# The math is rendered by MathJax: a local copy when one is installed, so the docs read offline
# (Debian/Ubuntu's libjs-mathjax, or MATHJAX_DIR=a folder holding MathJax 2's MathJax.js), else
# MathJax 3 from its CDN (the pages then need the network for their formulas).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BUILD:-build}/docs
if ! command -v doxygen >/dev/null; then
    echo "make docs: doxygen not found; install it (Debian/Ubuntu: sudo apt-get install doxygen)." >&2
    exit 1
fi
mathjax=${MATHJAX_DIR:-/usr/share/javascript/mathjax}
settings=("OUTPUT_DIRECTORY = $out" "GENERATE_TAGFILE = $out/course.tag")
if [ -f "$mathjax/MathJax.js" ]; then
    # the link makes the output folder self-contained on this machine without copying 50 MB
    settings+=("MATHJAX_VERSION = MathJax_2" "MATHJAX_RELPATH = mathjax")
    where="the local MathJax in $mathjax"
else
    where="MathJax from its CDN (install libjs-mathjax to read the formulas offline)"
fi
rm -rf "$out/html"
mkdir -p "$out"
{ cat docs/Doxyfile; printf '%s\n' "${settings[@]}"; } | doxygen -
if [ -f "$mathjax/MathJax.js" ]; then ln -sfn "$(cd "$mathjax" && pwd)" "$out/html/mathjax"; fi
python3 docs/html_links.py "$out/html" "$out/course.tag"
python3 tools/check_links.py "$out/html"
echo "docs: open $out/html/index.html (math: $where)"
