"""docs/exercises.md's list of every planted bug, from the patch headers
(chapters/NN_name/exercises/bugK.patch: Where, Symptom, Caught by)."""

import glob
import os
import re

from tables import common


def header_fields(path):
    """{'Where': ..., 'Symptom': ..., ...} of a patch's '# Key: text' header, continuation lines
    (indented under '#') joined to their key."""
    fields, key = {}, None
    with open(path) as f:
        for line in f:
            if not line.startswith("#"):
                break
            text = line[1:].rstrip("\n")
            m = re.match(r" (\w[\w -]*): (.*)", text)
            if m:
                key = m.group(1)
                fields[key] = m.group(2).strip()
            elif key and text.startswith("   "):
                fields[key] += " " + text.strip()
            else:
                key = None
    return fields


def first_clause(symptom):
    """The symptom up to its first ';' (or all of it), with a capital first letter; a race's
    'the tests usually pass' gives way to the clause after it."""
    clauses = [c.strip() for c in symptom.split(";")]
    if len(clauses) > 1 and clauses[0].lower().startswith("the tests usually pass"):
        clauses = clauses[1:]
    text = clauses[0].rstrip(".")
    return text[:1].upper() + text[1:]


def first_case(caught_by):
    """'"first test case" (+k more)' from a Caught by line of quoted test-case names."""
    names = re.findall(r'"([^"]+)"', caught_by)
    if not names:
        return caught_by
    more = " (+%d more)" % (len(names) - 1) if len(names) > 1 else ""
    return '"%s"%s' % (names[0], more)


def exercises_table():
    rows = []
    for path in glob.glob(os.path.join(common.ROOT, "chapters", "*", "exercises", "bug*.patch")):
        chapter = int(os.path.basename(os.path.dirname(os.path.dirname(path)))[:2])
        bug = int(re.search(r"bug(\d+)\.patch$", path).group(1))
        f = header_fields(path)
        for key in ("Where", "Symptom", "Caught by"):
            if key not in f:
                raise common.TableError("%s: no '# %s:' line in its header"
                                        % (os.path.relpath(path, common.ROOT), key))
        rows.append((chapter, bug, f["Where"], first_clause(f["Symptom"]), first_case(f["Caught by"])))
    rows.sort()
    return common.md_table(["chapter", "bug", "where", "symptom (the start of it)",
                            "first test case that catches it"], [list(r) for r in rows])


TABLES = {"exercises": exercises_table}
