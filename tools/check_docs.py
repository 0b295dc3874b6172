#!/usr/bin/env python3
"""The docs' own test (`make check-docs`, run by `make test` and `make docs`, so by CI):

1. No words about how the course was made in what a student reads (README.md,
   chapters/*/README.md, docs/*.md): device calls or numbered runs, sessions, issues, helpers,
   owners, commit hashes, "not yet" status notes. History belongs in results/ (its NOTES.md files).
2. Every measured table is what tools/doc_tables.py makes from results/ now (no hand-typed or
   stale numbers).
3. A chapter's "Read in this order" table gives each file's true line count (`wc -l`).
4. results/ holds what something uses: every file in it is named by a doc, a results/ notes file
   (README.md, chNN/NOTES.md) or a table generator in tools/tables/ (the rest of the runs' logs
   stay in git's history).

Prints each finding as "file:line: text" and exits 1 when there is any. Standard library only.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_tables  # noqa: E402

# Each pattern names one way a doc speaks of its own making; matched case-insensitively per line.
PROCESS_WORDS = [
    (r"\bdevice[- ](call|run)s?\b", "a device call or run"),
    (r"\bcalls? \d+\b", "a numbered call"),
    (r"\b(first|second|third|later|earlier|next|last|this|previous) (run|session)s? of the day\b", "a run of the day"),
    (r"\brun \d+\b(?![.,]?\d)(?! ?(×|x\b|times|TF|GB|TB|ms|µs|us|s\b|%|blocks|threads|warps))", "a numbered run"),
    (r"\bsessions?\b", "a session"),
    (r"\bissues? #?\d+\b", "an issue number"),
    (r"\b(this|the|that|its|chapter's|an open|the open) issue\b", "an issue"),
    (r"\b(helpers?|sub-?agents?) (session|agent|branch)s?\b", "a helper"),
    (r"\bowners?\b", "an owner"),
    (r"\bworklog\b", "a worklog"),
    (r"\bstate of the chapter\b", "a status note"),
    (r"\bnot yet (run |measured |timed )?on an? [HA]\d+", "a status note"),
    (r"\bstatus:", "a status note"),
    (r"\bmerged by hand\b", "a process note"),
    (r"(?<![0-9a-fA-Fx#/_.-])\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b(?![.(])", "a commit hash"),
]
PATTERNS = [(re.compile(p, re.I if "0-9a-f" not in p else 0), what) for p, what in PROCESS_WORDS]


def process_word_findings(docs):
    found = []
    for doc in docs:
        with open(doc) as f:
            for number, line in enumerate(f, start=1):
                for pattern, what in PATTERNS:
                    m = pattern.search(line)
                    if m:
                        found.append("%s:%d: %s (%r)" % (doc, number, what, m.group(0)))
    return found


RESULT_NAME = re.compile(r"[\w./+-]+")


def results_files():
    out = []
    for folder, _, files in os.walk("results"):
        out += [os.path.join(folder, f) for f in files]
    return sorted(out)


def unused_results(docs):
    """Files under results/ that no doc, notes file or generator names (by a path relative to the
    repository root or to the naming file's folder)."""
    readers = list(docs) + [f for f in results_files() if f.endswith(".md")]
    readers += [os.path.join("tools", "tables", f) for f in os.listdir(os.path.join("tools", "tables"))
                if f.endswith(".py")]
    named = set()
    for reader in readers:
        with open(reader) as f:
            text = f.read()
        base = os.path.dirname(reader)
        for token in RESULT_NAME.findall(text):
            token = token.rstrip(".")
            for candidate in (token, os.path.join(base, token)):
                named.add(os.path.normpath(candidate))
    # a generator may read a file beside one it names ("env.txt" next to a run's log): such a file
    # counts when its name appears in a generator and a file of its folder is named
    generator_text = "".join(open(r).read() for r in readers if r.endswith(".py"))
    named_dirs = {os.path.dirname(n) for n in named}

    def used(f):
        f = os.path.normpath(f)
        return f in named or (os.path.dirname(f) in named_dirs and
                              re.search(r'["/]%s"' % re.escape(os.path.basename(f)), generator_text) is not None)

    return [f for f in results_files() if not f.endswith(".md") and not used(f)]


CELL_LINK = re.compile(r"\]\(([^)#]+\.(?:h|cuh|cu|cpp|py|sh))\)")
CELL_FILE = re.compile(r"`([^`]+\.(?:h|cuh|cu|cpp|py|sh))`")


def line_count_findings(docs):
    """The 'lines' column of each chapter's "Read in this order" table against the files: a cell of
    n numbers goes with the n files the row's first cell links to (or names in backquotes)."""
    found = []
    for doc in docs:
        if not doc.startswith("chapters/"):
            continue
        base, inside = os.path.dirname(doc), False
        with open(doc) as f:
            for number, line in enumerate(f, start=1):
                if line.startswith("## "):
                    inside = line.strip() == "## Read in this order"
                    continue
                cells = [c.strip() for c in line.strip().strip("|").split("|")] if inside and line.startswith("|") else []
                if len(cells) < 2 or not re.fullmatch(r"\d+(, \d+)*", cells[1]):
                    continue
                files = CELL_LINK.findall(cells[0]) or CELL_FILE.findall(cells[0])
                counts = [int(x) for x in cells[1].split(", ")]
                if len(files) != len(counts):
                    found.append("%s:%d: %d files but %d line counts" % (doc, number, len(files), len(counts)))
                    continue
                for name, count in zip(files, counts):
                    target = next((p for p in (os.path.join(base, name), name, os.path.join(base, "kernel", name))
                                   if os.path.isfile(p)), None)
                    if target is None:
                        found.append("%s:%d: no file %s" % (doc, number, name))
                        continue
                    with open(target, "rb") as g:
                        real = g.read().count(b"\n")
                    if real != count:
                        found.append("%s:%d: %s has %d lines, the table says %d" % (doc, number, name, real, count))
    return found


# Lines each pattern must catch, and lines of ordinary teaching text none may flag (--self-test).
PLANTED = ["as device call 4 showed", "(call 12 of the day)", "chapter 10, run 3, read 4 TB/s",
           "the second session measured", "see issue 29", "the tree that closes the issue",
           "a helper session found", "the owner of the kernel", "fixed in 98c3ce6",
           "Status: not yet on an H100", "merged by hand"]
INNOCENT = ["the products run 3× faster", "variant 2 runs 16.2 TF/s", "each warp issues a load",
            "0x7f800000 is +inf", "the thread that owns row 5", "run 10 times", "a helper function",
            "chapter 3, runs 51.1 TF/s", "the runs of 2048 keys"]


def self_test():
    """The patterns catch every planted line and pass every innocent one; a table edited by hand
    is caught. Exits 1 (naming the line) otherwise."""
    bad = []
    for text in PLANTED:
        if not any(p.search(text) for p, _ in PATTERNS):
            bad.append("not caught: %r" % text)
    for text in INNOCENT:
        hits = [what for p, what in PATTERNS if p.search(text)]
        if hits:
            bad.append("flagged as %s: %r" % (hits[0], text))
    gens = doc_tables.generators()
    name = sorted(gens)[0]
    good = "<!-- table:%s -->\n%s\n<!-- /table:%s -->" % (name, gens[name]().rstrip("\n"), name)
    edited = good.replace("|", "| 1", 1) if "|" in good else good + " 1"
    problems = []
    if doc_tables.render("x.md", edited, gens, problems) == edited:
        bad.append("a hand-edited table %s was not regenerated" % name)
    for b in bad:
        print("check_docs --self-test: " + b, file=sys.stderr)
    print("check_docs --self-test: %d planted lines caught, %d innocent ones passed, a hand edit caught"
          % (len(PLANTED), len(INNOCENT)) if not bad else "check_docs --self-test: FAILED")
    return 1 if bad else 0


def main():
    os.chdir(doc_tables.ROOT)
    if "--self-test" in sys.argv[1:]:
        return self_test()
    docs = doc_tables.student_docs()
    findings = process_word_findings(docs)
    findings += line_count_findings(docs)
    findings += doc_tables.run(check=True)
    findings += ["%s: no doc, results notes or table generator names this file (delete it; git "
                 "keeps it)" % f for f in unused_results(docs)]
    for f in findings:
        print("check_docs: " + f, file=sys.stderr)
    if findings:
        print("check_docs: %d finding(s); a lesson speaks of the course as it is (history goes to "
              "results/), and tables come from tools/doc_tables.py" % len(findings), file=sys.stderr)
        return 1
    print("check_docs: %d docs, no process words, every table as results/ gives it, file line counts "
          "true, every results/ file used" % len(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
