#!/usr/bin/env bash
# make docs: the HTML docs with Doxygen (docs/Doxyfile) into $BUILD/docs/html, their links made to
# work there (docs/html_links.py), then the folder checked (tools/check_links.py): every local link
# resolves inside it, nothing is loaded from the web, no symbolic link; any fault fails the build.
# The math is rendered by MathJax 2, whose files the pages load (about 2 MB) are copied into
# html/mathjax: the folder reads offline, and still does when copied elsewhere. tools/find_mathjax.sh
# finds MathJax: MATHJAX_DIR=folder, else Debian's libjs-mathjax, else that package fetched into
# $BUILD/deps without root. When none works the build stops and says how to get it, rather than
# fall back to a CDN: pages that show raw TeX once read offline would be found too late to fix.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
out=$build/docs
if ! command -v doxygen >/dev/null; then
    echo "make docs: doxygen not found; install it (Debian/Ubuntu: sudo apt-get install doxygen)." >&2
    exit 1
fi
mathjax=$(tools/find_mathjax.sh "$build/deps") || exit 1

# What the pages' MathJax configuration (docs/Doxyfile: TeX in, HTML-CSS out) can load: the
# loader, its extensions (TeX packages, tex2jax, the menu), the TeX input, the HTML-CSS output with
# the font data of TeX (its web font) and of STIX (used where the reader has STIX installed), and
# the TeX web fonts as WOFF. Left out: the other outputs and fonts, the menu's translations (English
# is built in), the combined configurations and the unminified sources.
mathjax_files=(MathJax.js extensions jax/element jax/input/TeX
               jax/output/HTML-CSS/config.js jax/output/HTML-CSS/jax.js jax/output/HTML-CSS/autoload
               jax/output/HTML-CSS/fonts/TeX jax/output/HTML-CSS/fonts/STIX fonts/HTML-CSS/TeX/woff)

# Copies those files of MathJax folder $1 into folder $2, as files (-h: a link in $1 is followed).
copy_mathjax() {
    mkdir -p "$2"
    tar -C "$1" -chf - "${mathjax_files[@]}" | tar -C "$2" -xf -
}

python3 tools/check_links.py --self-test
rm -rf "$out/html"
mkdir -p "$out"
{ cat docs/Doxyfile; printf '%s\n' "OUTPUT_DIRECTORY = $out" "GENERATE_TAGFILE = $out/course.tag"; } | doxygen -
copy_mathjax "$mathjax" "$out/html/mathjax"
python3 docs/html_links.py "$out/html" "$out/course.tag"
python3 tools/check_links.py --mathjax mathjax/MathJax.js "$out/html"
echo "docs: open $out/html/index.html (MathJax from $mathjax: $(du -sh "$out/html/mathjax" | cut -f1) in html/mathjax)"
