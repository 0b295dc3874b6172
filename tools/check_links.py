#!/usr/bin/env python3
"""Checks that generated HTML stands alone: `tools/check_links.py [--mathjax PATH] HTML_FOLDER`.

The folder must work when copied anywhere and read without a network (tools/make_docs.sh runs
this on build/docs/html). Every .html file under it is read, and each of these is a fault:
  - a local href or src (not a web address, mailto: or javascript:, nor an anchor in the same
    page) naming no file;
  - a local href or src whose file lies outside the folder (`../x`, `/usr/share/...`);
  - a symbolic link in the folder (`cp -r` or an archive would carry the link, not the file);
  - anything loaded from the web: a src, or a stylesheet's href, with a web address, or a web
    address of MathJax inside a script (the formulas would need the network);
  - with --mathjax PATH: PATH (relative to the folder) is not a file there, no page loads it, or a
    page loads some other MathJax.js.
Prints each fault as "page: what" and exits 1 when there is any, so `make docs` fails on one.
`tools/check_links.py --self-test` plants each fault in a small folder and fails unless every one
is caught and a clean folder passes.
"""
import html.parser
import os
import re
import sys
import tempfile
import urllib.parse

WEB_MATHJAX = re.compile(r"(?:https?:)?//[^\s\"'<>]*mathjax", re.IGNORECASE)


class Page(html.parser.HTMLParser):
    """The links of one page: (tag, attribute, value) for each href and src, and its scripts' text."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, str]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("href", "src"):
            if attrs.get(name):
                kind = "stylesheet" if tag == "link" and "stylesheet" in (attrs.get("rel") or "") else tag
                self.links.append((kind, name, attrs[name]))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.script_text.append(data)


def is_web(link: str) -> bool:
    """A web address: http(s)://host/..., or //host/... (the page's own scheme)."""
    parts = urllib.parse.urlsplit(link)
    return parts.scheme in ("http", "https") or bool(parts.netloc)


def local_target(page: str, link: str) -> str | None:
    """The file a local link names, or None for a web address, another scheme (mailto:,
    javascript:) or an anchor in the same page."""
    parts = urllib.parse.urlsplit(link)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    return os.path.normpath(os.path.join(os.path.dirname(page), urllib.parse.unquote(parts.path)))


def inside(root: str, path: str) -> bool:
    return os.path.commonpath([os.path.abspath(root), os.path.abspath(path)]) == os.path.abspath(root)


def page_faults(root: str, page: str, mathjax: str | None) -> tuple[list[str], set[str]]:
    """The faults of one page, and the MathJax.js files (relative to the folder) it loads."""
    parser = Page()
    with open(page, encoding="utf-8", errors="replace") as f:
        parser.feed(f.read())
    faults, loaders = [], set()
    for kind, name, link in sorted(set(parser.links)):
        if is_web(link):
            if name == "src" or kind == "stylesheet":
                faults.append(f"loads {link} from the web (the page must render offline)")
            continue
        target = local_target(page, link)
        if target is None:
            continue
        if not inside(root, target):
            faults.append(f"link {link} leaves the folder")
        elif not os.path.exists(target):
            faults.append(f"dead link {link}")
        elif kind == "script" and os.path.basename(target) == "MathJax.js":
            loaders.add(os.path.relpath(target, root))
    for url in WEB_MATHJAX.findall("\n".join(parser.script_text)):
        faults.append(f"a script loads MathJax from the web: {url}")
    if mathjax is not None:
        faults += [f"loads {other}, not {mathjax}" for other in sorted(loaders - {mathjax})]
    return faults, loaders


def folder_faults(root: str, mathjax: str | None) -> tuple[int, list[str]]:
    """(number of pages, every fault as 'page: what') of an HTML folder."""
    pages, faults, loaders = 0, [], set()
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = os.path.join(folder, name)
            if os.path.islink(path):
                faults.append(f"{os.path.relpath(path, root)}: symbolic link to {os.readlink(path)}")
        for name in sorted(files):
            if name.endswith(".html") and not os.path.islink(os.path.join(folder, name)):
                page = os.path.join(folder, name)
                pages += 1
                found, loaded = page_faults(root, page, mathjax)
                faults += [f"{os.path.relpath(page, root)}: {what}" for what in found]
                loaders |= loaded
    if mathjax is not None:
        path = os.path.join(root, mathjax)
        if not os.path.isfile(path) or not inside(os.path.realpath(root), os.path.realpath(path)):
            faults.append(f"{mathjax}: MathJax's entry script is not a file in the folder")
        elif mathjax not in loaders:
            faults.append(f"{mathjax}: no page loads it (the pages' MathJax settings changed?)")
    return pages, faults


def write(root: str, files: dict[str, str]) -> None:
    for rel, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
            f.write(text)


def self_test() -> int:
    """Plants each fault in a copy of a clean folder; every one must be caught, the clean one pass."""
    clean = {"index.html": '<script src="mathjax/MathJax.js"></script><a href="b.html#x">b</a>'
                           '<a href="https://example.org">web page: allowed</a>',
             "b.html": '<script src="mathjax/MathJax.js"></script><link rel="stylesheet" href="s.css">',
             "s.css": "", "mathjax/MathJax.js": ""}
    cdn = '<script src="https://cdn.jsdelivr.net/npm/mathjax@2/MathJax.js"></script>'
    planted = {  # fault: (the words that must name it, the files changed to plant it)
        "a dead link": ("dead link", {"b.html": '<a href="missing.html">x</a>'}),
        "a link out of the folder": ("leaves the folder", {"b.html": '<a href="../outside.html">x</a>'}),
        "an absolute path": ("leaves the folder",
                             {"b.html": '<script src="/usr/share/javascript/mathjax/MathJax.js"></script>'}),
        "MathJax from a CDN": ("from the web", {"b.html": cdn}),
        "MathJax 3 configured from a CDN": ("MathJax from the web", {"b.html": (
            "<script>window.MathJax = {loader: {paths: {mathjax: 'https://cdn.jsdelivr.net/npm/mathjax@3/es5'}}};"
            "</script>")}),
        "a web stylesheet": ("from the web", {"b.html": '<link rel="stylesheet" href="https://example.org/s.css">'}),
        "no MathJax entry script": ("entry script", {"mathjax/MathJax.js": None}),
        "another MathJax.js": ("not mathjax/MathJax.js",
                               {"b.html": '<script src="other/MathJax.js"></script>', "other/MathJax.js": ""}),
        "no page loading MathJax": ("no page loads it", {"index.html": "", "b.html": ""}),
        "a symbolic link out of the folder": ("symbolic link", {"mathjax": "->"}),
    }
    failed = 0
    for fault, (words, changes) in {"nothing (the clean folder)": ("", {}), **planted}.items():
        with tempfile.TemporaryDirectory() as tmp:
            root = os.path.join(tmp, "html")
            write(tmp, {"outside.html": "", "mathjax/MathJax.js": ""})
            write(root, {rel: text for rel, text in clean.items()
                         if not any(rel == c or rel.startswith(c + "/") for c in changes)})
            for rel, text in changes.items():
                if text == "->":
                    os.symlink(os.path.join(tmp, rel), os.path.join(root, rel))
                elif text is not None:
                    write(root, {rel: text})
            found = folder_faults(root, "mathjax/MathJax.js")[1]
        caught = any(words in f for f in found) if fault in planted else not found
        if not caught:
            print(f"check_links: self-test: {fault} gave {found or 'no fault'}")
            failed += 1
    if failed:
        return 1
    print(f"check_links: self-test: each of {len(planted)} planted faults caught, a clean folder passes")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--self-test"]:
        return self_test()
    mathjax = None
    if len(argv) == 3 and argv[0] == "--mathjax":
        mathjax, argv = os.path.normpath(argv[1]), argv[2:]
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print("usage: tools/check_links.py [--mathjax PATH] HTML_FOLDER | --self-test", file=sys.stderr)
        return 2
    root = argv[0]
    pages, faults = folder_faults(root, mathjax)
    for fault in faults:
        print(fault)
    if faults:
        print(f"check_links: {len(faults)} fault(s) in {pages} pages under {root}: the folder would not "
              "work on its own")
        return 1
    print(f"check_links: {pages} pages under {root} stand alone (every local link resolves inside the "
          f"folder, nothing from the web{', MathJax from ' + mathjax if mathjax else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
