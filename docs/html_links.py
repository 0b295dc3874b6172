#!/usr/bin/env python3
"""Makes the links of the Markdown pages work in Doxygen's HTML (run by tools/make_docs.sh).

The docs link as GitHub wants: relative to the Markdown file (`kernels.cu`,
`../../results/x.csv`). Doxygen copies such links into its flat html/ folder unchanged, where
they point nowhere. For each page made from a Markdown file, every relative link that does not
resolve in html/ is taken relative to that Markdown file in the repository and rewritten:
  - a source file Doxygen documented -> its source page (Doxygen's tag file names it);
    a text fragment `#:~:text=...` (what a browser scrolls to on GitHub) becomes the anchor of
    the first source line holding that text, so `kernels.cu#:~:text=Alg.%201%20line%209` lands
    on the line in both places (a text that is in no line is an error);
  - a folder with a README.md -> that README's page;
  - any other file (results CSVs and logs, scripts) -> a copy under html/files/.
    tools/check_links.py then checks that every local link resolves.
  python3 docs/html_links.py HTML_DIR TAG_FILE
"""
import html
import os
import re
import shutil
import sys
import urllib.parse
import xml.etree.ElementTree as ET

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LINK = re.compile(r'(\b(?:href|src)=")([^"]*)(")')


def markdown_pages() -> dict[str, str]:
    """Doxygen's page file name -> the folder (relative to the repository) of its Markdown file."""
    pages = {"index.html": ""}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "exercises-work")]
        for name in files:
            if name.endswith(".md"):
                rel = os.path.relpath(os.path.join(folder, name), ROOT)
                pages["md_" + rel[: -len(".md")].replace(os.sep, "_") + ".html"] = os.path.dirname(rel)
    return pages


def source_pages(tag_file: str) -> dict[str, str]:
    """Path of a documented source file (relative to the repository) -> its source page."""
    out = {}
    for compound in ET.parse(tag_file).getroot().iter("compound"):
        if compound.get("kind") != "file":
            continue
        path = os.path.join(compound.findtext("path", ""), compound.findtext("name", ""))
        page = compound.findtext("filename", "")
        if not page.endswith(".html"):
            page += ".html"
        out[os.path.relpath(os.path.abspath(path), ROOT)] = page[: -len(".html")] + "_source.html"
    return out


def line_anchor(path: str, fragment: str) -> str:
    """The anchor of the first line of `path` that holds the text of a `:~:text=` fragment."""
    text = urllib.parse.unquote(fragment[len(":~:text="):])
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            at = line.find(text)
            # "line 1" must not stop at "line 12"
            while at >= 0 and text[-1:].isdigit() and line[at + len(text): at + len(text) + 1].isdigit():
                at = line.find(text, at + 1)
            if at >= 0:
                return f"l{number:05d}"
    raise SystemExit(f"html_links: no line of {path} holds {text!r} (a link's #:~:text= fragment)")


def rewrite(link: str, md_dir: str, html_dir: str, sources: dict[str, str], copies: set) -> str:
    parts = urllib.parse.urlsplit(html.unescape(link))
    if parts.scheme or parts.netloc or not parts.path or os.path.exists(os.path.join(html_dir, parts.path)):
        return link
    target = os.path.normpath(os.path.join(md_dir, urllib.parse.unquote(parts.path)))
    if target in sources:
        anchor = line_anchor(target, parts.fragment) if parts.fragment.startswith(":~:text=") else parts.fragment
        return sources[target] + (f"#{anchor}" if anchor else "")
    full = os.path.join(ROOT, target)
    if os.path.isdir(full) and os.path.isfile(os.path.join(full, "README.md")):
        return "md_" + os.path.join(target, "README").replace(os.sep, "_") + ".html"
    if os.path.isfile(full) and not target.startswith(".."):
        copies.add(target)
        return urllib.parse.quote("files/" + target.replace(os.sep, "/"))
    return link  # left for tools/check_links.py to report


def main() -> None:
    html_dir, tag_file = sys.argv[1], sys.argv[2]
    sources = source_pages(tag_file)
    copies: set = set()
    for page, md_dir in markdown_pages().items():
        path = os.path.join(html_dir, page)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = LINK.sub(lambda m: m.group(1) + rewrite(m.group(2), md_dir, html_dir, sources, copies) + m.group(3), text)
        if new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
    for target in sorted(copies):
        dest = os.path.join(html_dir, "files", target)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, target), dest)


if __name__ == "__main__":
    main()
