#!/usr/bin/env python3
"""Writes or checks every measured table in the docs from the files in results/.

A doc holds a generated table between two markers:

    <!-- table:ch7-ladder -->
    ...what tools/tables/ch07.py's TABLES["ch7-ladder"]() returns...
    <!-- /table:ch7-ladder -->

  tools/doc_tables.py            rewrite every table in README.md, chapters/*/README.md, docs/*.md
  tools/doc_tables.py --check    change nothing; exit 1 and name each table that differs from what
                                 its generator makes now (a hand edit, or a results file changed)
  tools/doc_tables.py --list     the table names and the docs that use them

A marker whose name no generator knows, a generator no doc uses, and a begin without its end are
errors too. Standard library only.
"""

import glob
import importlib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

BLOCK = re.compile(r"<!-- table:([\w.-]+) -->\n(.*?)<!-- /table:([\w.-]+) -->", re.S)
BEGIN = re.compile(r"<!-- table:([\w.-]+) -->")


def student_docs():
    """The docs a student reads (relative paths): the top README, each chapter's, docs/*.md."""
    docs = ["README.md"] + sorted(glob.glob("chapters/*/README.md", root_dir=ROOT))
    return docs + sorted(glob.glob("docs/*.md", root_dir=ROOT))


def generators():
    """name -> function, from every module in tools/tables/ (a name defined twice is an error)."""
    found = {}
    for module_path in sorted(glob.glob(os.path.join(ROOT, "tools", "tables", "*.py"))):
        name = os.path.splitext(os.path.basename(module_path))[0]
        if name.startswith("_") or name == "common":
            continue
        module = importlib.import_module("tables." + name)
        for table, fn in getattr(module, "TABLES", {}).items():
            if table in found:
                raise SystemExit("doc_tables: table %s is defined twice (tools/tables/%s.py)" % (table, name))
            found[table] = fn
    return found


def render(doc, text, gens, problems):
    """text with every table regenerated; problems gets a line for each marker error."""
    begins = BEGIN.findall(text)
    blocks = BLOCK.findall(text)
    if len(begins) != len(blocks):
        problems.append("%s: a <!-- table:NAME --> without its <!-- /table:NAME -->" % doc)
        return text

    def one(match):
        name, _, end = match.groups()
        if name != end:
            problems.append("%s: table %s ends with the marker of %s" % (doc, name, end))
            return match.group(0)
        if name not in gens:
            problems.append("%s: no generator in tools/tables/ makes table %s" % (doc, name))
            return match.group(0)
        try:
            body = gens[name]().rstrip("\n")
        except Exception as e:  # a generator's own error, with the table it belongs to
            problems.append("%s: table %s: %s: %s" % (doc, name, type(e).__name__, e))
            return match.group(0)
        return "<!-- table:%s -->\n%s\n<!-- /table:%s -->" % (name, body, name)

    return BLOCK.sub(one, text)


def run(check, only=None):
    """Regenerates (or with check, compares) every table; returns the list of problems."""
    os.chdir(ROOT)
    gens = generators()
    problems, used = [], set()
    for doc in only or student_docs():
        with open(doc) as f:
            text = f.read()
        used.update(name for name, _, _ in BLOCK.findall(text))
        new = render(doc, text, gens, problems)
        if new == text:
            continue
        if check:
            old_blocks = dict((n, b) for n, b, _ in BLOCK.findall(text))
            for name, body, _ in BLOCK.findall(new):
                if old_blocks.get(name) != body:
                    problems.append("%s: table %s differs from what results/ gives "
                                    "(tools/doc_tables.py rewrites it)" % (doc, name))
        else:
            with open(doc, "w") as f:
                f.write(new)
            print("doc_tables: rewrote %s" % doc)
    if only is None:
        problems += ["tools/tables/: table %s is used by no doc" % n for n in sorted(set(gens) - used)]
    return problems


def main(argv):
    if "--list" in argv:
        os.chdir(ROOT)
        for doc in student_docs():
            with open(doc) as f:
                for name, _, _ in BLOCK.findall(f.read()):
                    print("%-28s %s" % (name, doc))
        return 0
    check = "--check" in argv
    only = [a for a in argv if not a.startswith("--")] or None
    problems = run(check, only)
    for p in problems:
        print("doc_tables: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
