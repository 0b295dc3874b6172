#!/usr/bin/env python3
"""Doxygen input filter for Markdown pages.

The chapter docs are written for GitHub, where math is $...$ (inline) and a $$ line opens or
closes a display block. Doxygen wants \\f$...\\f$ and \\f[...\\f]. This filter rewrites the one into
the other outside code blocks and code spans, so one source renders in both places. It also doubles
the backticks of a code span that holds a quote, which Doxygen would otherwise end at the quote.
"""
import re
import sys

INLINE = re.compile(r"(?<![\\$])\$(?=\S)([^$\n]+?)(?<=\S)\$(?!\$)")
DISPLAY_ONE_LINE = re.compile(r"\$\$(.+?)\$\$")


def convert(line: str) -> str:
    parts = re.split(r"(`[^`]*`)", line)  # odd indices are code spans: left alone, except that
    for i in range(1, len(parts), 2):     # Doxygen ends a `...` span at a quote, a ``...`` one not
        if "'" in parts[i] or '"' in parts[i]:
            parts[i] = "`" + parts[i] + "`"
    for i in range(0, len(parts), 2):
        p = DISPLAY_ONE_LINE.sub(lambda m: "\\f[" + m.group(1) + "\\f]", parts[i])
        parts[i] = INLINE.sub(lambda m: "\\f$" + m.group(1) + "\\f$", p)
    return "".join(parts)


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, fence, display = [], False, False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = not fence
            out.append(line)
        elif fence:
            out.append(line)
        elif stripped == "$$":
            out.append("\\f]" if display else "\\f[")
            display = not display
        elif display:
            out.append(line)
        else:
            out.append(convert(line))
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main()
