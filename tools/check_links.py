#!/usr/bin/env python3
"""Checks that every local link in generated HTML resolves: `tools/check_links.py build/docs/html`.

Walks every .html file under the folder, takes each href and src that is not a web address
(http:, https:, mailto:, ...) nor an anchor in the same page, and checks that the file it names
exists (relative to the page; a link through a symbolic link counts when its target exists).
Prints each dead link as "page: link" and exits 1 when there is any, so `make docs` fails on one.
"""
import html.parser
import os
import sys
import urllib.parse


class Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append(value)


def local_target(page: str, link: str) -> str | None:
    """The file a link names, or None for a web address or an anchor in the same page."""
    parts = urllib.parse.urlsplit(link)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    return os.path.normpath(os.path.join(os.path.dirname(page), urllib.parse.unquote(parts.path)))


def main() -> int:
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print("usage: tools/check_links.py HTML_FOLDER", file=sys.stderr)
        return 2
    root = sys.argv[1]
    pages = dead = 0
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".html"):
                continue
            page = os.path.join(folder, name)
            pages += 1
            parser = Links()
            with open(page, encoding="utf-8", errors="replace") as f:
                parser.feed(f.read())
            for link in sorted(set(parser.links)):
                target = local_target(page, link)
                if target is not None and not os.path.exists(target):
                    print(f"{os.path.relpath(page, root)}: dead link {link}")
                    dead += 1
    if dead:
        print(f"check_links: {dead} dead local link(s) in {pages} pages under {root}")
        return 1
    print(f"check_links: every local link of {pages} pages under {root} resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
