"""What the table generators share: reading a results file, a Markdown table, the line that says
where a table's numbers come from. Standard library only."""

import csv
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import results_csv  # noqa: E402,F401  (re-exported: the benchmark files' own reader)


class TableError(Exception):
    """A table that cannot be made; the message names the file and what is missing."""


def path(rel):
    """The absolute path of a file under the repository root, which must exist."""
    full = os.path.join(ROOT, rel)
    if not os.path.exists(full):
        raise TableError("%s does not exist" % rel)
    return full


def number(text):
    """int or float when the text is one, else the text itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_csv(rel):
    """(header, rows) of any CSV under results/: '# key: value' comment lines make the header,
    the first other line names the columns, and every row is a dict with numbers converted."""
    header, body = {}, []
    with open(path(rel), newline="") as f:
        for line in f.read().splitlines():
            if line.startswith("#"):
                kv = results_csv.parse_header_line(line)
                if kv:
                    header.setdefault(*kv)
            elif line.strip():
                body.append(line)
    if not body:
        raise TableError("%s has no column line" % rel)
    reader = csv.DictReader(body)
    return header, [{k: number(v) for k, v in row.items()} for row in reader]


def select(rows, **want):
    """The rows whose columns equal every given value."""
    return [r for r in rows if all(r.get(k) == v for k, v in want.items())]


def one(rows, what, **want):
    """The single row matching want; a TableError names `what` when there is none or several."""
    found = select(rows, **want)
    if len(found) != 1:
        raise TableError("%s: %d rows match %s, expected 1" % (what, len(found), want))
    return found[0]


def md_table(columns, rows):
    """A Markdown table: columns is a list of titles, rows a list of lists of cells (str())."""
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def provenance(header, rel, doc_dir=""):
    """'NVIDIA H100 …, CUDA 13.0, 2026-11-27, `command`; rows: [file](link)' from a results file's
    header. doc_dir is the folder of the doc the line goes into (the link is made relative to it)."""
    link = os.path.relpath(os.path.join(ROOT, rel), os.path.join(ROOT, doc_dir)).replace(os.sep, "/")
    return ("%s (CUDA %s), %s, `%s`; rows: [`%s`](%s)"
            % (header.get("gpu", "unknown GPU"), header.get("cuda_version", "unknown"),
               header.get("date", "unknown date")[:10], header.get("command", "unknown command"),
               rel, link))


def fmt(x, digits=3):
    """A measured number to `digits` significant digits (whole numbers as they are)."""
    if isinstance(x, int):
        return str(x)
    return "%.*g" % (digits, x)


def compare_shape(text):
    """(D, N, causal) from a tools/compare_pytorch.py shape cell, 'D=64 N=2048 causal B=8 H=32'."""
    fields = dict(f.split("=") for f in text.split() if "=" in f)
    return int(fields["D"]), int(fields["N"]), 0 if "non-causal" in text else 1


def compare_rows(rel, course_prefix, backend, dims=None):
    """The rows of a tools/compare_pytorch.py file for one course kernel (its 'course' cell starts
    with course_prefix) against one PyTorch backend, each with 'D', 'N', 'causal' added; every row
    must say the outputs agree."""
    _, rows = read_csv(rel)
    found = []
    for r in rows:
        if not str(r["course"]).startswith(course_prefix) or r["backend"] != backend:
            continue
        r = dict(r)
        r["D"], r["N"], r["causal"] = compare_shape(r["shape"])
        if dims and r["D"] not in dims:
            continue
        if r["verdict"] != "agree":
            raise TableError("%s: %s against %s at %s: outputs %s"
                             % (rel, r["course"], backend, r["shape"], r["verdict"]))
        found.append(r)
    if not found:
        raise TableError("%s has no rows of %s against %s" % (rel, course_prefix, backend))
    return found


def span(values, digits=2):
    """'1.04–1.13' (or one value when all are equal after rounding) of a list of ratios."""
    lo, hi = "%.*f" % (digits, min(values)), "%.*f" % (digits, max(values))
    return lo if lo == hi else "%s–%s" % (lo, hi)


def listing(values):
    """'2048 and 8192', '64, 128 and 256' from numbers (sorted, unique)."""
    v = [str(x) for x in sorted(set(values))]
    return v[0] if len(v) == 1 else ", ".join(v[:-1]) + " and " + v[-1]


def relative(rel, doc_dir):
    """rel (a path from the repository root) as seen from the folder of the doc, doc_dir."""
    return os.path.relpath(os.path.join(ROOT, rel), os.path.join(ROOT, doc_dir)).replace(os.sep, "/")


def link(rel, doc_dir):
    """A Markdown link named by its path, to a results file, from the folder of the doc doc_dir."""
    return "[`%s`](%s)" % (rel, relative(rel, doc_dir))


MONTHS = {m: i + 1 for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split())}


def env_of(folder):
    """(gpu, driver, cuda release, nvcc version, date) from the env.txt a run wrote beside its logs
    (nvidia-smi's CSV line, nvcc --version, date -u)."""
    gpu = driver = cuda = nvcc = date = None
    with open(path(folder + "/env.txt")) as f:
        for line in f.read().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and parts[0].startswith("NVIDIA"):
                gpu, driver = parts[0], parts[1]
            m = re.search(r"release (\d+\.\d+), V([\d.]+)", line)
            if m:
                cuda, nvcc = m.groups()
            m = re.match(r"\w{3} (\w{3}) +(\d+) .* (\d{4})$", line)
            if m:
                date = "%s-%02d-%02d" % (m.group(3), MONTHS[m.group(1)], int(m.group(2)))
    if not (gpu and cuda and date):
        raise TableError("%s/env.txt: no GPU, CUDA release or date line" % folder)
    return gpu, driver, cuda, nvcc, date
